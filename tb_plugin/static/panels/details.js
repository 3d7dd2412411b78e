// The details panel beside the plot: every field of the selected event, read from the event
// route, with a failed worker's error file shown as its message and Python traceback; when the
// event is an attempt's root cause (the payload's `attempts`), a banner says so first. Every
// value goes in as text (dom.js el), never as HTML.

import { fetchEvent } from "../api.js";
import { el, labelNodes, userText } from "../dom.js";
import { formatTime } from "../format.js";

const FIELDS = ["name", "source", "state", "hostname", "pid", "rank", "local_id", "run_id", "message"];

// torchelastic's agent stores a failed worker's error file (JSON) as raw_error: show its message
// and Python call stack rather than escaped JSON. Anything else is shown as it is.
function errorFileData(text) {
  if (!text || text[0] !== "{") return null;
  try {
    const data = JSON.parse(text);
    const message = data && data.message;
    if (typeof message === "string") return { message, trace: text };
    const stack = message && message.extraInfo && message.extraInfo.py_callstack;
    if (typeof stack !== "string") return null;
    return { message: typeof message.message === "string" ? message.message : "", trace: stack };
  } catch {
    return null;
  }
}

// What the panel shows of one event (the event route's `info`): its title, a banner when it is
// an attempt's root cause, every field, the error trace, the metadata and the raw record.
function eventParts(info, attempts) {
  const f = info.fields;
  const dl = el("dl");
  const row = (k, v) => {
    if (v === null || v === undefined || v === "") v = "—";
    dl.append(el("dt", { text: k }), el("dd", { text: typeof v === "object" ? JSON.stringify(v) : String(v) }));
  };
  row("time", formatTime(info.wall_time, true, true));
  dl.append(el("dt", { text: "lane" }), el("dd", { class: "tl-lane" }, ...labelNodes(info.lane_parts || ["", info.lane])));
  row("run", info.run || ".");
  row("kind", info.kind);
  row("step", info.step);
  for (const key of FIELDS) row(key, f[key]);
  const parts = [el("h2", { text: f.name || "(unnamed event)" })];
  for (const a of attempts) {
    if (a.root_cause && a.root_cause.event === info.id) {
      const cause = a.root_cause;
      const banner = [`Root cause of attempt ${a.attempt} (`, userText(a.job), `): rank ${cause.rank} · `, userText(cause.reason)];
      parts.push(el("p", { class: "tl-cause-banner" }, ...banner));
    }
  }
  parts.push(dl);
  parts.push(el("h3", { text: "error_trace" }));
  const failure = errorFileData(f.error_trace);
  if (failure && failure.message) parts.push(el("p", { class: "tl-error-message", text: failure.message }));
  const trace = failure ? failure.trace : f.error_trace;
  parts.push(el("pre", { class: f.error_trace ? "tl-error" : "", text: trace || "—" }));
  const md = el("dl");
  for (const [k, v] of Object.entries(f.metadata || {})) {
    md.append(el("dt", { text: k }), el("dd", { text: v === null ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v) }));
  }
  parts.push(el("h3", { text: "metadata" }), md);
  parts.push(el("h3", { text: "raw record" }), el("pre", { text: info.raw }));
  return parts;
}

export function createDetails(tl) {
  const node = el("aside", { class: "tl-details", hidden: "", "aria-label": "Event details" });

  async function show(id, focus) {
    const note = (text) => {
      node.replaceChildren(el("p", { text }));
      node.hidden = false;
    };
    let info;
    try {
      const wanted = () => tl.selected === id;
      info = await fetchEvent(id, { wanted, onWait: () => wanted() && note("Loading the event… (the server is still reading)") });
    } catch (err) {
      note(`Could not load the event: ${err.message}`);
      return;
    }
    if (info === null || tl.selected !== id) return;
    const close = el("button", { type: "button", class: "tl-close", "aria-label": "Close details", text: "×" });
    close.addEventListener("click", () => tl.select(null));
    const parts = [close, ...eventParts(info, (tl.data && tl.data.attempts) || [])];
    node.replaceChildren(...parts);
    node.hidden = false;
    if (focus) close.focus({ preventScroll: true });
    tl.resize();
  }

  function close() {
    node.hidden = true;
    tl.resize();
    tl.scroll.focus({ preventScroll: true });
  }

  return {
    slot: "side",
    node,
    select(id, focus) {
      if (id === null) close();
      else show(id, focus);
    },
    // New records: read the open event again (its lane or fields may have changed).
    update() {
      if (tl.selected !== null && !node.hidden) show(tl.selected, false);
    },
  };
}
