// The Ranks view: a heatmap of ranks x time, each cell a rank's compute time (step minus the wait
// in collectives) over the median of all ranks in that window, with the jobs' rendezvous,
// failures and restarts marked over it, and the stalled ranks and flagged stragglers listed with
// their scores. Clicking a rank (a row or a list entry) switches to the Timeline on that rank's
// lane and selects its newest event.
//
// The server does the work (tb_plugin/ranks.py, the `ranks` route): it buckets the grid in time to
// about the plot's width and sends one byte per cell (0: no data, 128: the median, 1..255: half to
// twice as slow, log scale), the colour scale's stops, and the markers' colours; this module turns
// the bytes into one image (a 256-entry lookup table from the server's scale) and each frame is a
// single drawImage of the visible part. Everything from the data goes in as text (dom.js el).
// Fetching and polling (api.js), the time axis, zoom and pan (axis.js) and frame scheduling
// (frames.js) are the Timeline's own. Under the heatmap, on the same time axis, each rank's step
// time in seconds (steptimes.js); hovering a rank's row or its curve highlights its own.

import { decode, every, fetchRanks, Latest, LOADING_POLL_MS, Timer } from "../api.js";
import { clampSpan, TimeAxis, wantsDetail } from "../axis.js";
import { el, sizeCanvas } from "../dom.js";
import { count, formatDuration, formatTime, isolate, loadingText } from "../format.js";
import { Frames } from "../frames.js";
import { HeatColors } from "./heatmap.js";
import { JobPicker } from "./jobpicker.js";
import { focusRankLane } from "./ranklane.js";
import { drawMarkers, StepTimes } from "./steptimes.js";
import { bindPlotPointer, placeTooltip } from "../pointer.js";

const POLL_MS = 3000;
const LABEL_W = 64; // the rank labels' column, inside the canvas
const AXIS_H = 22;
const MIN_ROW_H = 3;
const MAX_ROW_H = 16;
const VIEW_KEY = "tb-monitor.view";

const times = (x) => (x === null || x === undefined ? "–" : `×${x.toFixed(2)}`);

class RanksView {
  constructor(tl) {
    this.tl = tl;
    this.data = null;
    this.time = new TimeAxis(LABEL_W); // the window shown, {start, end} in epoch seconds: this.view
    this.userZoomed = false; // else the view follows the job as it grows
    this.requests = new Latest(fetchRanks);
    this.loadingRetry = new Timer(); // asks again while the server is still reading
    this.detailFetch = new Timer(); // fetches detail once a zoom or pan has settled
    this.frames = new Frames(() => this.draw());
    this.selectedRow = null;
    this.hoverRow = null; // the row under the pointer, its step times highlighted
    this.steps = new StepTimes(this.time, LABEL_W);
    this.rankFetch = new Timer(); // fetches a hovered rank's own step times (past the band)
    this.jobs = new JobPicker(() => {
      this.view = null; // another job: its own extent, rows and lists
      this.userZoomed = false;
      this.selectedRow = this.hoverRow = null;
      this.refetch();
    });
    this.stats = { frames: this.frames.times, firstRender: null, fetches: 0 };
    window.tbRanks = this; // for the benchmark and for debugging from the console

    this.toggle = el("button", {
      type: "button",
      class: "tl-view-toggle",
      "aria-pressed": "false",
      title: "Switch between the Timeline and the Ranks view",
      text: "Ranks",
    });
    this.toggle.addEventListener("click", () => this.show(!this.active));

    this.summary = el("span", { class: "tl-ranks-summary", role: "status", "aria-live": "polite" });
    this.key = el("span", { class: "tl-ranks-key" });
    this.stalled = el("ul", { class: "tl-ranks-list tl-stalled", "aria-label": "Stalled ranks" });
    this.flagged = el("ul", { class: "tl-ranks-list tl-stragglers", "aria-label": "Stragglers" });
    this.captured = el("ul", { class: "tl-ranks-list tl-captures", "aria-label": "Captures" });
    this.canvas = el("canvas", {
      role: "img",
      "aria-label": "Ranks by time, coloured by compute time relative to the median rank. Click a rank for its lane.",
    });
    this.spacer = el("div", { class: "tl-ranks-spacer" }, this.canvas);
    this.scroll = el("div", { class: "tl-ranks-scroll", tabindex: "0" }, this.spacer);
    // Its own tooltip: the Timeline's is hidden by the Timeline's pointer handling.
    this.tooltip = el("div", { class: "tl-ranks-tooltip", hidden: "", role: "tooltip" });
    const reset = el("button", { type: "button", text: "Reset", title: "Show the whole job" });
    reset.addEventListener("click", () => {
      this.view = null;
      this.userZoomed = false;
      this.refetch();
    });
    this.node = el(
      "section",
      { class: "tl-ranks", "aria-label": "Ranks", hidden: "" },
      el("div", { class: "tl-ranks-head" }, this.summary, this.jobs.node, this.key, reset),
      el("div", { class: "tl-ranks-lists" }, this.stalled, this.flagged, this.captured),
      this.scroll,
      this.steps.node,
      this.tooltip
    );
    this.scroll.addEventListener("scroll", () => this.requestDraw());
    new ResizeObserver(() => this.resize()).observe(this.scroll);
    this.bindPointer();
    every(POLL_MS, () => this.refetch({ poll: true }), () => this.active);
    if (localStorage.getItem(VIEW_KEY) === "ranks") queueMicrotask(() => this.show(true));
  }

  get view() {
    return this.time.view;
  }

  set view(view) {
    this.time.view = view;
  }

  get active() {
    return this.toggle.getAttribute("aria-pressed") === "true";
  }

  // Switch to the Ranks view (true) or back to the Timeline.
  show(on) {
    this.toggle.setAttribute("aria-pressed", String(on));
    this.toggle.textContent = on ? "Timeline" : "Ranks";
    this.tl.app.classList.toggle("tl-mode-ranks", on);
    this.node.hidden = !on;
    try {
      localStorage.setItem(VIEW_KEY, on ? "ranks" : "timeline");
    } catch {
      // Storage may be off; the view just is not remembered.
    }
    if (on) this.refetch();
    else this.tl.resize();
  }

  // ---------------------------------------------------------------- data
  // `poll`: the same window again, answered with {unchanged: true} when nothing is new.
  async refetch({ poll = false } = {}) {
    const width = Math.max(100, this.plotWidth());
    const params = new URLSearchParams({ width: String(Math.round(width)) });
    if (this.view && this.userZoomed) {
      const span = this.view.end - this.view.start;
      params.set("start", String(this.view.start - span / 2));
      params.set("end", String(this.view.end + span / 2));
      params.set("width", String(Math.round(width * 2)));
    }
    if (poll && this.data) params.set("generation", String(this.data.generation));
    if (this.jobs.job) params.set("job", this.jobs.job);
    const mine = this.hoverRow ?? this.selectedRow; // its own curves come, past the band
    if (this.data && mine !== null && mine < this.data.ranks.length) params.set("rank", String(this.data.ranks[mine]));
    let payload;
    try {
      payload = await this.requests.get(params.toString());
    } catch (err) {
      this.tl.setStatus(`Could not load the ranks: ${err.message}`, true);
      return;
    }
    if (!payload || payload.unchanged) return; // superseded, or nothing new
    this.stats.fetches++;
    this.load(payload);
    this.loadingRetry.clear();
    if (payload.loading) this.loadingRetry.set(() => this.refetch(), LOADING_POLL_MS);
  }

  load(payload) {
    const d = { ...payload };
    if (!this.heat || !this.heat.fits(payload.scale)) {
      this.heat = new HeatColors(payload.scale);
      this.key.replaceChildren(...this.heat.key());
    }
    d.cells = payload.bins ? decode(payload.cells) : new Uint8Array(0);
    d.image = this.heat.image(d.cells, d.bins, d.ranks.length);
    this.steps.load(d);
    this.jobs.load(d);
    this.data = d;
    if ((!this.view || !this.userZoomed) && payload.extent) this.view = { start: payload.extent[0], end: payload.extent[1] };
    this.lists(d);
    const ranks = payload.ranks.length;
    this.summary.textContent = ranks
      ? `${count(ranks, "rank")} · ${count(Math.round((payload.extent[1] - payload.extent[0]) / payload.window_s), "window")} of ${payload.window_s} s`
      : payload.loading
        ? loadingText("rank windows", payload.loading)
        : "No rank health recorded: run the job with tb-monitor run or init(torch=True).";
    this.resize();
    if (this.stats.firstRender === null && ranks && !payload.loading) {
      this.stats.firstRender = performance.timeOrigin + performance.now();
    }
  }

  lists(d) {
    const button = (text, title, row, run, rank) => {
      const b = el("button", { type: "button", class: "tl-rank-link", title, text });
      b.dataset.rank = String(rank);
      b.addEventListener("click", () => this.goToRank(row, run, rank));
      return b;
    };
    const stalls = d.stalls.map((s) => {
      const seen = s.agent && s.agent.seen ? ` · its agent sees it ${isolate(s.agent.seen)}` : s.silent ? " · silent" : s.cut_off ? " · its node is cut off from the rendezvous store's" : "";
      const what = s.waited_for
        ? `rank ${s.rank} · the job waits for it${seen} · no step for ${formatDuration(s.since_step_s)}`
        : `rank ${s.rank} · stalled ${formatDuration(s.since_step_s)}${s.in_collective ? " in a collective" : ""}`;
      const recorder = s.fr_seq == null ? "" : `; torch's Flight Recorder has it at collective ${s.fr_seq}`;
      const item = el("li", {}, button(what, `Collectives entered ${s.entered}, left ${s.left}${recorder}. Show rank ${s.rank}'s lane`, s.row, s.run, s.rank), ...stacksOf(s.agent));
      item.dataset.waitedFor = String(s.waited_for);
      return item;
    });
    const called = rollCallOf(d.roll_call);
    this.stalled.replaceChildren(...(stalls.length ? [...called, el("li", { class: "tl-ranks-title", text: "Stalled" }), ...stalls] : []));
    // A rank starved of CPU may compute as fast as the others: its reason says where its time went.
    const flagged = d.stragglers.map((s) =>
      el(
        "li",
        {},
        button(
          `rank ${s.rank} ${times(s.relative)}${s.cause === "cpu" ? ` · ${s.reason}` : ""}`,
          `${s.cause === "cpu" ? `${s.reason}, ${s.starved_over} windows in a row. ` : ""}Compute ${times(s.relative)} the median rank (${times(s.individual)} its own best), ${s.windows_over} windows in a row over ×${d.threshold}. Show rank ${s.rank}'s lane`,
          s.row,
          s.run,
          s.rank
        )
      )
    );
    this.captured.replaceChildren(...capturesOf(d.captures));
    const title = el("li", { class: "tl-ranks-title", text: "Stragglers" });
    const none = el("li", { class: "tl-dim", text: d.scores.length ? "none flagged" : "" });
    this.flagged.replaceChildren(title, ...(flagged.length ? flagged : [none]));
    if (d.scores.length) {
      const slowest = d.scores.slice(0, 3).map((s) => `rank ${s.rank} ${times(s.relative)}`).join(", ");
      this.flagged.append(el("li", { class: "tl-dim", text: `slowest: ${slowest}` }));
    }
  }

  // ---------------------------------------------------------------- the Timeline's lane
  goToRank(row, run, rank) {
    this.selectedRow = row;
    this.show(false);
    this.tooltip.hidden = true;
    focusRankLane(this.tl, run, rank);
  }

  // ---------------------------------------------------------------- geometry and drawing
  plotWidth() {
    return Math.max(1, (this.scroll.clientWidth || window.innerWidth) - LABEL_W);
  }

  rowH() {
    const rows = this.data ? this.data.ranks.length : 0;
    const avail = Math.max(60, this.scroll.clientHeight - AXIS_H);
    return Math.max(MIN_ROW_H, Math.min(MAX_ROW_H, Math.floor(avail / Math.max(1, rows))));
  }

  resize() {
    if (!this.active) return;
    const rows = this.data ? this.data.ranks.length : 0;
    const rowH = this.rowH();
    // No taller than its rows at their tallest: the step times follow right under them.
    this.scroll.style.maxHeight = `${AXIS_H + Math.max(1, rows) * MAX_ROW_H}px`;
    this.spacer.style.height = `${AXIS_H + rows * rowH}px`;
    const w = this.scroll.clientWidth;
    const h = Math.min(this.scroll.clientHeight, AXIS_H + rows * rowH);
    sizeCanvas(this.canvas, w, h);
    this.w = w;
    this.time.width = Math.max(1, w - LABEL_W);
    this.h = h;
    this.steps.resize(w);
    this.drawNow();
  }

  requestDraw() {
    this.frames.request();
  }

  drawNow() {
    this.frames.now();
  }

  draw() {
    const d = this.data;
    if (!this.active || !d || !this.w || !this.view) return false;
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    const c = this.tl.colors;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = c.bg;
    ctx.fillRect(0, 0, this.w, this.h);
    const rowH = this.rowH();
    const top = this.scroll.scrollTop;
    const first = Math.floor(top / rowH);
    const visible = Math.min(d.ranks.length - first, Math.ceil((this.h - AXIS_H) / rowH) + 1);
    if (d.image && this.view && visible > 0) {
      // The bins in view, as a source rectangle clipped to the image.
      const s0 = Math.max(0, (this.view.start - d.t0) / d.bin_s);
      const s1 = Math.min(d.bins, (this.view.end - d.t0) / d.bin_s);
      if (s1 > s0) {
        const x0 = this.time.x(d.t0 + s0 * d.bin_s);
        const x1 = this.time.x(d.t0 + s1 * d.bin_s);
        ctx.imageSmoothingEnabled = false;
        const y = AXIS_H - (top - first * rowH);
        ctx.save();
        ctx.beginPath();
        ctx.rect(LABEL_W, AXIS_H, this.w - LABEL_W, this.h - AXIS_H);
        ctx.clip();
        ctx.drawImage(d.image, s0, first, s1 - s0, visible, x0, y, x1 - x0, visible * rowH);
        ctx.restore();
      }
    }
    // Rank labels: every row that has room for one.
    ctx.fillStyle = c.fg;
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.textBaseline = "middle";
    const every = Math.max(1, Math.ceil(12 / rowH));
    for (let i = 0; i < visible; i++) {
      const row = first + i;
      const y = AXIS_H + row * rowH - top + rowH / 2;
      if (row === this.selectedRow) {
        ctx.strokeStyle = c.accent;
        ctx.strokeRect(LABEL_W, y - rowH / 2, this.w - LABEL_W, rowH);
      }
      if (row % every === 0) ctx.fillText(`rank ${d.ranks[row]}`, 6, y);
    }
    drawMarkers(ctx, this.time, d.markers, { y0: AXIS_H, y1: this.h, left: LABEL_W, right: this.w });
    this.time.draw(ctx, AXIS_H, c);
    this.steps.draw(d, c, this.highlightRow());
    return true;
  }

  // The row whose step times stand out: hovered, else clicked, else the worst straggler.
  highlightRow() {
    if (this.hoverRow !== null) return this.hoverRow;
    if (this.selectedRow !== null) return this.selectedRow;
    const worst = this.data.stragglers[0];
    return worst ? worst.row : null;
  }

  hovered(row) {
    if (row === this.hoverRow) return;
    this.hoverRow = row;
    this.requestDraw();
    if (row !== null && !this.steps.has(row)) this.rankFetch.set(() => this.refetch(), 150);
  }

  // ---------------------------------------------------------------- pointer
  cellAt(event) {
    const d = this.data;
    if (!d || !this.view) return null;
    const rect = this.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const py = event.clientY - rect.top;
    if (py < AXIS_H) return null;
    const row = Math.floor((py - AXIS_H + this.scroll.scrollTop) / this.rowH());
    if (row < 0 || row >= d.ranks.length) return null;
    const t = this.time.timeAt(px);
    const bin = Math.floor((t - d.t0) / d.bin_s);
    const level = bin >= 0 && bin < d.bins && px >= LABEL_W ? d.cells[row * d.bins + bin] : 0;
    return { row, t, bin, level, px };
  }

  // The heatmap and the step times zoom and pan together; each hovers and clicks its own way.
  bindPointer() {
    const move = {
      ready: () => Boolean(this.view),
      zoom: (factor, px) => {
        const { start, end } = this.time.zoomed(factor, px);
        this.setView(start, end);
      },
      pan: (px) => {
        const { start, end } = this.time.panned(px);
        this.setView(start, end);
      },
      grab: () => ({ ...this.view }),
      drag: (view, dx) => {
        const { start, end } = this.time.dragged(view, dx);
        this.setView(start, end);
      },
      leave: () => {
        this.tooltip.hidden = true;
        this.hovered(null);
      },
    };
    const toRank = (row) => row !== null && this.goToRank(row, this.data.runs[row], this.data.ranks[row]);
    bindPlotPointer(this.canvas, {
      ...move,
      hover: (event) => event.target === this.canvas && this.hover(event),
      click: (event) => toRank(this.cellAt(event)?.row ?? null),
    });
    const steps = this.steps.canvas;
    bindPlotPointer(steps, {
      ...move,
      hover: (event) => event.target === steps && this.hoverSteps(event),
      click: (event) => toRank(this.steps.pointAt(event, this.data).row),
    });
  }

  // Over the step times: the curve under the pointer highlighted, its values in the tooltip.
  hoverSteps(event) {
    const { row, lines } = this.steps.pointAt(event, this.data);
    this.hovered(row);
    if (!lines) {
      this.tooltip.hidden = true;
      return;
    }
    this.tooltip.replaceChildren(...lines);
    placeTooltip(this.tooltip, event);
  }

  hover(event) {
    const cell = this.cellAt(event);
    const tip = this.tooltip;
    this.hovered(cell ? cell.row : null);
    if (!cell) {
      tip.hidden = true;
      return;
    }
    const d = this.data;
    const marker = d.markers.find((m) => Math.abs(this.time.x(m.t) - cell.px) <= 3);
    const lines = [el("b", { text: `rank ${d.ranks[cell.row]}` }), el("br")];
    if (marker) lines.unshift(el("b", { text: `${formatTime(marker.t)} ${marker.label}` }), el("br"));
    if (cell.level) {
      const from = d.t0 + cell.bin * d.bin_s;
      lines.push(`${formatTime(from)}–${formatTime(from + d.bin_s)}: compute ${times(this.heat.scoreOf(cell.level))} the median rank`);
      // Older windows are kept folded (the server's bound): say so where this cell is one.
      if (d.folded && from < d.folded.since) {
        lines.push(el("br"), el("span", { class: "tl-dim", text: `before ${formatTime(d.folded.since)}: windows kept ${d.folded.windows} to a column` }));
      }
    } else {
      lines.push(el("span", { class: "tl-dim", text: "no window here" }));
    }
    const score = d.scores.find((s) => s.row === cell.row);
    if (score) {
      lines.push(el("br"), el("span", { class: "tl-dim", text: `median ${times(score.relative)}, compute ${formatDuration(score.compute_s || 0)} a step` }));
    }
    tip.replaceChildren(...lines);
    placeTooltip(tip, event);
  }

  setView(start, end) {
    const ext = this.data && this.data.extent;
    const max = ext ? (ext[1] - ext[0]) * 4 : Infinity;
    this.view = clampSpan(start, end, this.data ? this.data.window_s * 4 : 1, max);
    this.userZoomed = true;
    this.requestDraw();
    this.detailFetch.set(() => {
      const d = this.data;
      // Coarser than a window a bucket where finer ones exist: fetch the detail.
      if (wantsDetail(this.view, [d.t0, d.t0 + d.bins * d.bin_s], { coarse: d.per_bin > 1 })) this.refetch();
    }, 150);
  }
}

export function createRanks(tl) {
  const view = new RanksView(tl);
  return { slot: "header", node: view.node, toolbar: view.toggle, redraw: () => view.requestDraw() };
}

// The roll-call of a stall: every rank's stacks grouped by where its main thread is, the odd one
// out first, each group's main thread opened on click (report --json's ranks.roll_call).
function rollCallOf(call) {
  if (!call || !call.groups.length) return [];
  const groups = call.groups.map((g) => {
    const who = `${g.ranks.length === 1 ? "rank" : "ranks"} ${g.ranks.join(", ")}`;
    const where = `${g.function ? ` in ${isolate(g.function)}` : ""}${g.where ? ` at ${isolate(g.where)}` : ""}`;
    const frames = g.main_thread.map((f) => `${f.name} (${f.file}${f.native ? "" : `:${f.line}`})`).join("\n");
    const summary = el("summary", { text: `${who}${where} (${g.method})` });
    const item = el("li", { class: "tl-roll-call" }, el("details", { class: "tl-rank-stacks" }, summary, el("pre", { text: frames }), el("pre", { class: "tl-dim", text: g.stack })));
    item.dataset.ranks = g.ranks.join(",");
    return item;
  });
  return [el("li", { class: "tl-ranks-title", text: "Roll-call (the odd one out first)" }), ...groups];
}

// Each capture (tb-monitor capture), newest first: per rank a link to its profile (a chrome
// trace: open it in Perfetto) and its other files, served by the plugin's capture route.
function capturesOf(captures) {
  if (!captures || !captures.length) return [];
  const items = captures.map((c) => {
    const ranks = c.ranks.map((r) => {
      const links = Object.entries(r.files).map(([kind, path]) =>
        el("a", { class: "tl-capture-file", href: `./capture?path=${encodeURIComponent(path)}`, target: "_blank", rel: "noopener", text: kind })
      );
      const item = el("li", {}, `rank ${r.rank}: `, ...links.flatMap((a, i) => (i ? [" · ", a] : [a])));
      item.dataset.rank = String(r.rank);
      return item;
    });
    const summary = el("summary", { text: `${isolate(c.capture)} (${isolate(c.reason)}, ${c.seconds} s of profile)` });
    return el("li", { class: "tl-capture" }, el("details", { open: "" }, summary, el("ul", {}, ...ranks)));
  });
  return [el("li", { class: "tl-ranks-title", text: "Captures" }), ...items];
}

// A stalled rank's Python stacks as its agent recorded them, opened on click, or why there are
// none (a stopped process cannot dump them).
function stacksOf(agent) {
  if (!agent) return [];
  if (!agent.stacks) return [el("div", { class: "tl-rank-stacks-note", text: agent.stacks_note || "" })];
  const summary = el("summary", { text: `Python stacks (${agent.stacks_reason || "recorded"})` });
  return [el("details", { class: "tl-rank-stacks" }, summary, el("pre", { text: agent.stacks }))];
}
