// From the Ranks view to the Timeline: a rank's worker lane focused, scrolled into view and its
// newest event selected (panels/ranks.js calls it when a rank is clicked).

import { isolate, labelText } from "../format.js";

// Focus rank `rank`'s lane (its run `run`, else a worker lane labelled with the rank) in the
// Timeline `tl`, or say there is none.
export function focusRankLane(tl, run, rank) {
  const lanes = (tl.data && tl.data.lanes) || [];
  let lane = lanes.findIndex((l) => l.kind === "worker" && l.run === run);
  if (lane < 0) lane = lanes.findIndex((l) => l.kind === "worker" && new RegExp(`\\brank[ -]${rank}\\b`).test(l.label));
  if (lane < 0) {
    tl.setStatus(`No timeline lane for rank ${rank} (${isolate(run)}).`);
    return;
  }
  for (const node of tl.labels.querySelectorAll(".tl-row-focus")) node.classList.remove("tl-row-focus");
  const r = tl.rows[tl.rowOfLane[lane]];
  if (!r) return;
  r.node.classList.add("tl-row-focus");
  tl.focusedLane = lane;
  tl.scroll.scrollTop = Math.max(0, r.y - tl.height / 3);
  tl.setStatus(`Rank ${rank}: lane “${isolate(labelText(lanes[lane].parts))}” and its newest event, from the Ranks view.`);
  // Its newest event in the loaded window, in the details panel.
  const d = tl.data;
  if (d.events && d.laneStart[lane + 1] > d.laneStart[lane]) {
    let newest = -1;
    for (let i = 0; i < d.events.count; i++) {
      if (d.events.lane[i] === lane && (newest < 0 || d.events.t[i] >= d.events.t[newest])) newest = i;
    }
    if (newest >= 0) tl.select(d.events.id[newest]);
  }
  tl.requestDraw();
}
