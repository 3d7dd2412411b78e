// "Why did it restart", under the toolbar: one line per attempt of each job shown, with its
// outcome and duration, its root cause (a button selecting the failure's record, whose traceback
// the details panel shows), the ranks that went down with it, the time lost and the membership
// change. The analysis is the server's (tb_monitor.analysis.restarts, the payload's `attempts`);
// every value goes in as text (dom.js el), never as HTML, and what an event recorded (a run id,
// a host name, a reason) in a <bdi> of its own (dom.js userText): it cannot reorder the line.

import { el, userText } from "../dom.js";
import { formatDuration } from "../format.js";

const ranks = (list) => (list.length === 1 ? `rank ${list[0]}` : `ranks ${list.join(", ")}`);

function outcomeColor(data, outcome) {
  const i = data.states.indexOf(outcome);
  return i >= 0 ? data.colors[i] : null;
}

function line(tl, data, a, manyJobs) {
  const outcome = userText(a.outcome, { class: "tl-attempt-outcome" });
  const color = outcomeColor(data, a.outcome);
  if (color) outcome.style.borderColor = color;
  const head = el(
    "span",
    { class: "tl-attempt-head" },
    ...(manyJobs ? [userText(a.job), " · "] : []),
    `Attempt ${a.attempt} `,
    outcome,
    ` ${formatDuration(a.duration_s)}`
  );
  const parts = [head];
  const cause = a.root_cause;
  if (cause) {
    const host = cause.host ? [" (", userText(cause.host), ")"] : [];
    const button = el(
      "button",
      { type: "button", class: "tl-root-cause", title: "Show this failure's record and traceback" },
      `root cause: rank ${cause.rank}`,
      ...host,
      " · ",
      userText(cause.reason)
    );
    button.dataset.event = String(cause.event);
    button.addEventListener("click", () => {
      if (cause.event !== undefined) tl.select(cause.event, true);
    });
    parts.push(button);
    if (a.collateral_ranks.length) {
      // In a job's last attempt no restart followed: its collateral ranks stopped with the job.
      const stopped = a.collateral_state === "STOPPED_AT_END" ? "stopped when the job ended" : "stopped by restart";
      parts.push(el("span", { class: "tl-collateral", text: `${stopped}: ${ranks(a.collateral_ranks)}` }));
    }
    if (a.time_lost_s !== null) parts.push(el("span", { class: "tl-lost", text: `${formatDuration(a.time_lost_s)} lost` }));
  } else {
    parts.push(el("span", { class: "tl-dim", text: a.outcome === "RUNNING" ? "running" : "no failure" }));
  }
  const change = [];
  const hosts = (list) => list.flatMap((host, i) => (i ? [", ", userText(host)] : [userText(host)]));
  if (a.nodes_left.length) change.push("left: ", ...hosts(a.nodes_left));
  if (a.nodes_joined.length) change.push(...(change.length ? ["; "] : []), "joined: ", ...hosts(a.nodes_joined));
  if (change.length) parts.push(el("span", { class: "tl-membership" }, "nodes ", ...change));
  const item = el("li", { class: "tl-attempt" }, ...parts);
  item.dataset.outcome = a.outcome;
  return item;
}

export function createAttempts(tl) {
  const list = el("ul", { class: "tl-attempts-list" });
  const node = el("section", { class: "tl-attempts", "aria-label": "Attempts and root causes", hidden: "" }, list);

  function update(data) {
    const attempts = data.attempts || [];
    const signature = JSON.stringify(attempts);
    if (node.dataset.signature === signature) return;
    node.dataset.signature = signature;
    const manyJobs = new Set(attempts.map((a) => a.job)).size > 1;
    list.replaceChildren(...attempts.map((a) => line(tl, data, a, manyJobs)));
    node.hidden = attempts.length === 0;
  }

  return { slot: "header", node, update };
}
