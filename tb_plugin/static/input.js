// Pointer and keyboard on the plot: the wheel zooms around the pointer, dragging pans, keys zoom,
// pan and reset; hovering shows what is under the pointer (as text), clicking selects an event
// or zooms into a bucket or an interval.

import { lowerBound } from "./api.js";
import { el } from "./dom.js";
import { formatDuration, formatTime, isolate, labelText } from "./format.js";
import { bindPlotPointer, placeTooltip } from "./pointer.js";

export function bindPointer(tl) {
  bindPlotPointer(tl.canvas, {
    ready: () => Boolean(tl.view),
    zoom: (factor, px) => tl.zoomBy(factor, px),
    pan: (px) => tl.panBy(px),
    grab: () => ({ view: { ...tl.view }, top: tl.scroll.scrollTop }),
    drag: (grabbed, dx, dy) => {
      const { start, end } = tl.time.dragged(grabbed.view, dx);
      tl.setView(start, end);
      tl.scroll.scrollTop = grabbed.top - dy;
    },
    hover: (event) => onHover(tl, event),
    click: (event) => onClick(tl, event),
    leave: () => hideTooltip(tl),
  });
}

export function bindKeys(tl) {
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target instanceof HTMLInputElement || target instanceof HTMLSelectElement) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const page = tl.width * 0.2;
    const actions = {
      "+": () => tl.zoomBy(1 / 1.5),
      "=": () => tl.zoomBy(1 / 1.5),
      w: () => tl.zoomBy(1 / 1.5),
      "-": () => tl.zoomBy(1.5),
      s: () => tl.zoomBy(1.5),
      ArrowLeft: () => tl.panBy(-page),
      a: () => tl.panBy(-page),
      ArrowRight: () => tl.panBy(page),
      d: () => tl.panBy(page),
      0: () => tl.resetView(),
      Home: () => tl.resetView(),
      Escape: () => tl.select(null),
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  });
}

// The event, interval or bucket under the pointer, if any.
function hitTest(tl, event) {
  if (!tl.data) return null;
  const rect = tl.canvas.getBoundingClientRect();
  const px = event.clientX - rect.left;
  const py = event.clientY - rect.top;
  if (px < 0 || py < 0 || px > tl.width || py > tl.height) return null;
  const row = tl.rowAtY(py + tl.scroll.scrollTop);
  if (!row || row.group) return null;
  const t = tl.timeAt(px);
  const slack = (6 / tl.width) * (tl.view.end - tl.view.start);
  const start = tl.data.laneStart;
  if (tl.data.events) {
    const e = tl.data.events;
    const lo = start[row.lane];
    const hi = start[row.lane + 1];
    const i = lowerBound(e.t, t, lo, hi);
    let best = -1;
    for (const j of [i - 1, i]) {
      if (j < lo || j >= hi) continue;
      if (Math.abs(e.t[j] - t) <= slack && (best < 0 || Math.abs(e.t[j] - t) < Math.abs(e.t[best] - t))) best = j;
    }
    if (best >= 0) return { row, event: best, px };
  } else {
    const b = tl.data.buckets;
    const w0 = tl.data.window[0];
    const first = Math.floor((t - slack / 2 - w0) / b.binWidth) - 1;
    for (let i = lowerBound(b.bin, first, start[row.lane], start[row.lane + 1]); i < start[row.lane + 1]; i++) {
      const t0 = w0 + b.bin[i] * b.binWidth;
      if (t0 - slack / 2 > t) break;
      if (t <= t0 + b.binWidth + slack / 2) return { row, bucket: i, px };
    }
  }
  const iv = tl.data.intervals;
  for (let k = iv.laneStart[row.lane]; k < iv.laneStart[row.lane + 1]; k++) {
    const i = iv.order[k];
    if (iv.t0[i] <= t && t <= iv.t1[i]) return { row, interval: i, px };
  }
  return { row, px };
}

function onHover(tl, event) {
  const hit = hitTest(tl, event);
  const prevRow = tl.hover && tl.hover.row;
  tl.hover = hit;
  if (prevRow !== (hit && hit.row)) {
    if (prevRow && prevRow.node) prevRow.node.classList.remove("hover");
    if (hit && hit.row.node) hit.row.node.classList.add("hover");
    tl.requestDraw();
  }
  if (!hit || (hit.event === undefined && hit.bucket === undefined && hit.interval === undefined)) {
    hideTooltip(tl);
    return;
  }
  const d = tl.data;
  const lane = d.lanes[hit.row.lane];
  const laneText = isolate(labelText(lane.parts));
  const lines = [];
  if (hit.event !== undefined) {
    const e = d.events;
    const i = hit.event;
    lines.push([d.states[e.state[i]] || "no state", isolate(d.events.names[e.name[i]])]);
    lines.push([null, `${formatTime(e.t[i], true, true)} · ${laneText}`]);
    const msg = e.msgs[e.msg[i]];
    if (msg) lines.push([null, isolate(msg)]);
  } else if (hit.bucket !== undefined) {
    const b = d.buckets;
    const t0 = d.window[0] + b.bin[hit.bucket] * b.binWidth;
    lines.push([d.states[b.state[hit.bucket]] || "no state", `${b.n[hit.bucket].toLocaleString("en-US")} events`]);
    lines.push([null, `${formatTime(t0, true)} + ${formatDuration(b.binWidth)} · ${laneText}`]);
    lines.push([null, "Zoom in to see each event."]);
  } else {
    const iv = d.intervals;
    const i = hit.interval;
    const what = d.labels[iv.label[i]];
    lines.push([iv.open[i] ? "in progress" : d.states[iv.state[i]] || "interval", isolate(what)]);
    lines.push([null, `${formatTime(iv.t0[i], true)} → ${formatDuration(iv.t1[i] - iv.t0[i])} · ${laneText}`]);
  }
  tl.tooltip.replaceChildren(
    ...lines.map(([strong, text]) => {
      const line = el("div");
      if (strong) line.append(el("b", { text: isolate(strong) }), " ");
      line.append(el("span", { class: strong ? "" : "tl-dim", text }));
      return line;
    })
  );
  placeTooltip(tl.tooltip, event);
}

function hideTooltip(tl) {
  tl.tooltip.hidden = true;
}

function onClick(tl, event) {
  const hit = hitTest(tl, event);
  if (!hit) return;
  if (hit.event !== undefined) {
    tl.select(tl.data.events.id[hit.event], true);
  } else if (hit.bucket !== undefined) {
    const b = tl.data.buckets;
    const t0 = tl.data.window[0] + b.bin[hit.bucket] * b.binWidth;
    tl.setView(t0 - b.binWidth * 2, t0 + b.binWidth * 3);
  } else if (hit.interval !== undefined) {
    const iv = tl.data.intervals;
    const span = iv.t1[hit.interval] - iv.t0[hit.interval];
    tl.setView(iv.t0[hit.interval] - span * 0.1, iv.t1[hit.interval] + span * 0.1);
  }
}
