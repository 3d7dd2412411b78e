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

import { el } from "../dom.js";
import { count, formatDuration, formatTime } from "../format.js";

const POLL_MS = 3000;
const LOADING_POLL_MS = 700; // while the server is still reading the ranks' first windows
const LABEL_W = 64; // the rank labels' column, inside the canvas
const AXIS_H = 22;
const MIN_ROW_H = 3;
const MAX_ROW_H = 16;
const VIEW_KEY = "tb-monitor.view";

const fetchRanks = async (params) => {
  const res = await fetch(`./ranks?${params}`);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
};

function decodeBytes(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

function parseHex(hex) {
  const h = hex.replace("#", "");
  return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
}

// RGBA per level (0: transparent), interpolating the server's stops evenly over levels 1..255.
function lookupTable(scale) {
  const stops = scale.colors.map(parseHex);
  const lut = new Uint8ClampedArray(256 * 4);
  for (let level = 1; level < 256; level++) {
    const x = ((level - 1) / 254) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(x));
    const f = x - i;
    for (let c = 0; c < 3; c++) lut[level * 4 + c] = stops[i][c] + (stops[i + 1][c] - stops[i][c]) * f;
    lut[level * 4 + 3] = 255;
  }
  return lut;
}

// The relative score a level stands for (the inverse of tb_plugin.ranks.levels).
const scoreOf = (level, scale) => Math.pow(scale.max, (level - 128) / 127);
const times = (x) => (x === null || x === undefined ? "–" : `×${x.toFixed(2)}`);

class RanksView {
  constructor(tl) {
    this.tl = tl;
    this.data = null;
    this.view = null; // {start, end}, epoch seconds
    this.userZoomed = false; // else the view follows the job as it grows
    this.fetchSeq = 0;
    this.selectedRow = null;
    this.stats = { frames: [], firstRender: null, fetches: 0 };
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
      el("div", { class: "tl-ranks-head" }, this.summary, this.key, reset),
      el("div", { class: "tl-ranks-lists" }, this.stalled, this.flagged),
      this.scroll,
      this.tooltip
    );
    this.scroll.addEventListener("scroll", () => this.requestDraw());
    new ResizeObserver(() => this.resize()).observe(this.scroll);
    this.bindPointer();
    setInterval(() => {
      if (this.active && !document.hidden) this.refetch({ poll: true });
    }, POLL_MS);
    if (localStorage.getItem(VIEW_KEY) === "ranks") queueMicrotask(() => this.show(true));
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
    const seq = ++this.fetchSeq;
    const width = Math.max(100, this.plotWidth());
    const params = new URLSearchParams({ width: String(Math.round(width)) });
    if (this.view && this.userZoomed) {
      const span = this.view.end - this.view.start;
      params.set("start", String(this.view.start - span / 2));
      params.set("end", String(this.view.end + span / 2));
      params.set("width", String(Math.round(width * 2)));
    }
    if (poll && this.data) params.set("generation", String(this.data.generation));
    let payload;
    try {
      payload = await fetchRanks(params.toString());
    } catch (err) {
      if (seq === this.fetchSeq) this.tl.setStatus(`Could not load the ranks: ${err.message}`, true);
      return;
    }
    if (seq !== this.fetchSeq || payload.unchanged) return;
    this.stats.fetches++;
    this.load(payload);
    clearTimeout(this.loadingTimer);
    if (payload.loading) this.loadingTimer = setTimeout(() => this.refetch(), LOADING_POLL_MS);
  }

  load(payload) {
    const d = { ...payload };
    if (!this.lut || this.scaleKey !== payload.scale.colors.join()) {
      this.scaleKey = payload.scale.colors.join();
      this.lut = lookupTable(payload.scale);
      const stops = payload.scale.colors.join(", ");
      this.key.replaceChildren(
        el("span", { text: `×${payload.scale.min} faster` }),
        el("span", { class: "tl-ranks-gradient" }),
        el("span", { text: `×${payload.scale.max} slower than the median rank` })
      );
      this.key.children[1].style.background = `linear-gradient(to right, ${stops})`;
    }
    d.cells = payload.bins ? decodeBytes(payload.cells) : new Uint8Array(0);
    d.image = this.image(d);
    this.data = d;
    if ((!this.view || !this.userZoomed) && payload.extent) this.view = { start: payload.extent[0], end: payload.extent[1] };
    this.lists(d);
    const ranks = payload.ranks.length;
    this.summary.textContent = ranks
      ? `${count(ranks, "rank")} · ${count(Math.round((payload.extent[1] - payload.extent[0]) / payload.window_s), "window")} of ${payload.window_s} s`
      : payload.loading
        ? `Loading rank windows… ${payload.loading.expected ? Math.floor((100 * payload.loading.done) / payload.loading.expected) : 0}%`
        : "No rank health recorded: run the job with tb-monitor run or init(torch=True).";
    this.resize();
    if (this.stats.firstRender === null && ranks && !payload.loading) {
      this.stats.firstRender = performance.timeOrigin + performance.now();
    }
  }

  // One pixel per cell, coloured through the lookup table.
  image(d) {
    const rows = d.ranks.length;
    if (!rows || !d.bins) return null;
    const canvas = document.createElement("canvas");
    canvas.width = d.bins;
    canvas.height = rows;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(d.bins, rows);
    const px = new Uint32Array(img.data.buffer);
    const lut32 = new Uint32Array(this.lut.buffer);
    const cells = d.cells;
    for (let i = 0; i < cells.length; i++) px[i] = lut32[cells[i]];
    ctx.putImageData(img, 0, 0);
    return canvas;
  }

  lists(d) {
    const button = (text, title, row, run, rank) => {
      const b = el("button", { type: "button", class: "tl-rank-link", title, text });
      b.dataset.rank = String(rank);
      b.addEventListener("click", () => this.goToRank(row, run, rank));
      return b;
    };
    const stalls = d.stalls.map((s) => {
      const what = s.waited_for
        ? `rank ${s.rank} · the job waits for it · no step for ${formatDuration(s.since_step_s)}`
        : `rank ${s.rank} · stalled ${formatDuration(s.since_step_s)}${s.in_collective ? " in a collective" : ""}`;
      const recorder = s.fr_seq == null ? "" : `; torch's Flight Recorder has it at collective ${s.fr_seq}`;
      const item = el("li", {}, button(what, `Collectives entered ${s.entered}, left ${s.left}${recorder}. Show rank ${s.rank}'s lane`, s.row, s.run, s.rank));
      item.dataset.waitedFor = String(s.waited_for);
      return item;
    });
    this.stalled.replaceChildren(...(stalls.length ? [el("li", { class: "tl-ranks-title", text: "Stalled" }), ...stalls] : []));
    const flagged = d.stragglers.map((s) =>
      el(
        "li",
        {},
        button(
          `rank ${s.rank} ${times(s.relative)}`,
          `Compute ${times(s.relative)} the median rank (${times(s.individual)} its own best), ${s.windows_over} windows in a row over ×${d.threshold}. Show rank ${s.rank}'s lane`,
          s.row,
          s.run,
          s.rank
        )
      )
    );
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
    const tl = this.tl;
    const lanes = (tl.data && tl.data.lanes) || [];
    let lane = lanes.findIndex((l) => l.kind === "worker" && l.run === run);
    if (lane < 0) lane = lanes.findIndex((l) => l.kind === "worker" && new RegExp(`\\brank[ -]${rank}\\b`).test(l.label));
    if (lane < 0) {
      tl.setStatus(`No timeline lane for rank ${rank} (${run}).`);
      return;
    }
    for (const node of tl.labels.querySelectorAll(".tl-row-focus")) node.classList.remove("tl-row-focus");
    const r = tl.rows[tl.rowOfLane[lane]];
    if (!r) return;
    r.node.classList.add("tl-row-focus");
    tl.focusedLane = lane;
    tl.scroll.scrollTop = Math.max(0, r.y - tl.height / 3);
    tl.setStatus(`Rank ${rank}: lane “${r.node.textContent}” and its newest event, from the Ranks view.`);
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
    const dpr = window.devicePixelRatio || 1;
    const rows = this.data ? this.data.ranks.length : 0;
    const rowH = this.rowH();
    this.spacer.style.height = `${AXIS_H + rows * rowH}px`;
    const w = this.scroll.clientWidth;
    const h = Math.min(this.scroll.clientHeight, AXIS_H + rows * rowH);
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
      this.canvas.width = Math.round(w * dpr);
      this.canvas.height = Math.round(h * dpr);
      this.canvas.style.width = `${w}px`;
      this.canvas.style.height = `${h}px`;
    }
    this.w = w;
    this.h = h;
    this.drawNow();
  }

  x(t) {
    return LABEL_W + ((t - this.view.start) / (this.view.end - this.view.start)) * (this.w - LABEL_W);
  }

  timeAt(px) {
    return this.view.start + ((px - LABEL_W) / (this.w - LABEL_W)) * (this.view.end - this.view.start);
  }

  requestDraw() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = 0;
      this.drawNow();
    });
  }

  drawNow() {
    const d = this.data;
    if (!this.active || !d || !this.w) return;
    const t0 = performance.now();
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
        const x0 = this.x(d.t0 + s0 * d.bin_s);
        const x1 = this.x(d.t0 + s1 * d.bin_s);
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
    this.drawMarkers(ctx, d);
    this.drawAxis(ctx, c);
    const ms = performance.now() - t0;
    this.stats.frames.push(ms);
    if (this.stats.frames.length > 500) this.stats.frames.shift();
  }

  drawMarkers(ctx, d) {
    for (const m of d.markers) {
      const x = this.x(m.t);
      if (x < LABEL_W || x > this.w) continue;
      ctx.strokeStyle = m.color;
      ctx.lineWidth = m.kind === "failure" ? 2 : 1.5;
      ctx.setLineDash(m.kind === "rendezvous" ? [4, 3] : []);
      ctx.beginPath();
      ctx.moveTo(x, AXIS_H);
      ctx.lineTo(x, this.h);
      ctx.stroke();
      ctx.fillStyle = m.color;
      ctx.beginPath();
      ctx.moveTo(x - 4, AXIS_H);
      ctx.lineTo(x + 4, AXIS_H);
      ctx.lineTo(x, AXIS_H + 6);
      ctx.fill();
    }
    ctx.setLineDash([]);
    ctx.lineWidth = 1;
  }

  drawAxis(ctx, c) {
    ctx.fillStyle = c.bg;
    ctx.fillRect(0, 0, this.w, AXIS_H);
    ctx.strokeStyle = c.line;
    ctx.beginPath();
    ctx.moveTo(0, AXIS_H - 0.5);
    ctx.lineTo(this.w, AXIS_H - 0.5);
    ctx.stroke();
    ctx.fillStyle = c.muted;
    ctx.textBaseline = "middle";
    const span = this.view.end - this.view.start;
    const ticks = Math.max(2, Math.floor((this.w - LABEL_W) / 120));
    for (let i = 0; i <= ticks; i++) {
      const t = this.view.start + (span * i) / ticks;
      const x = this.x(t);
      ctx.fillText(formatTime(t), Math.min(x, this.w - 50), AXIS_H / 2);
    }
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
    const t = this.timeAt(px);
    const bin = Math.floor((t - d.t0) / d.bin_s);
    const level = bin >= 0 && bin < d.bins && px >= LABEL_W ? d.cells[row * d.bins + bin] : 0;
    return { row, t, bin, level, px };
  }

  bindPointer() {
    let drag = null;
    const canvas = this.canvas;
    canvas.addEventListener(
      "wheel",
      (event) => {
        if (!this.view) return;
        event.preventDefault();
        const rect = canvas.getBoundingClientRect();
        const t = this.timeAt(event.clientX - rect.left);
        const f = Math.exp(event.deltaY * 0.0015);
        this.setView(t - (t - this.view.start) * f, t + (this.view.end - t) * f);
      },
      { passive: false }
    );
    canvas.addEventListener("mousedown", (event) => {
      if (event.button === 0 && this.view) drag = { x: event.clientX, view: { ...this.view }, moved: false };
    });
    window.addEventListener("mousemove", (event) => {
      if (drag) {
        const dx = event.clientX - drag.x;
        if (Math.abs(dx) > 3) drag.moved = true;
        if (drag.moved) {
          const dt = (dx / (this.w - LABEL_W)) * (drag.view.end - drag.view.start);
          this.setView(drag.view.start - dt, drag.view.end - dt);
        }
        return;
      }
      if (event.target === canvas) this.hover(event);
    });
    window.addEventListener("mouseup", (event) => {
      const moved = drag && drag.moved;
      drag = null;
      if (moved || event.target !== canvas) return;
      const cell = this.cellAt(event);
      if (cell) {
        const d = this.data;
        this.goToRank(cell.row, d.runs[cell.row], d.ranks[cell.row]);
      }
    });
    canvas.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
  }

  hover(event) {
    const cell = this.cellAt(event);
    const tip = this.tooltip;
    if (!cell) {
      tip.hidden = true;
      return;
    }
    const d = this.data;
    const marker = d.markers.find((m) => Math.abs(this.x(m.t) - cell.px) <= 3);
    const lines = [el("b", { text: `rank ${d.ranks[cell.row]}` }), el("br")];
    if (marker) lines.unshift(el("b", { text: `${formatTime(marker.t)} ${marker.label}` }), el("br"));
    if (cell.level) {
      const from = d.t0 + cell.bin * d.bin_s;
      lines.push(`${formatTime(from)}–${formatTime(from + d.bin_s)}: compute ${times(scoreOf(cell.level, d.scale))} the median rank`);
    } else {
      lines.push(el("span", { class: "tl-dim", text: "no window here" }));
    }
    const score = d.scores.find((s) => s.row === cell.row);
    if (score) {
      lines.push(el("br"), el("span", { class: "tl-dim", text: `median ${times(score.relative)}, compute ${formatDuration(score.compute_s || 0)} a step` }));
    }
    tip.replaceChildren(...lines);
    tip.hidden = false;
    tip.style.left = `${Math.max(4, Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8))}px`;
    tip.style.top = `${Math.max(4, Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 8))}px`;
  }

  setView(start, end) {
    const ext = this.data && this.data.extent;
    const max = ext ? (ext[1] - ext[0]) * 4 : Infinity;
    const min = this.data ? this.data.window_s * 4 : 1;
    const mid = (start + end) / 2;
    const span = Math.min(max, Math.max(min, end - start));
    this.view = { start: mid - span / 2, end: mid + span / 2 };
    this.userZoomed = true;
    this.requestDraw();
    clearTimeout(this.detailTimer);
    this.detailTimer = setTimeout(() => {
      const d = this.data;
      const loaded = d.bins * d.bin_s;
      const shown = this.view.end - this.view.start;
      const outside = this.view.start < d.t0 || this.view.end > d.t0 + loaded;
      // Coarser than two windows a pixel where finer ones exist: fetch the detail.
      const coarse = d.per_bin > 1 && loaded / shown > 3;
      if (outside || coarse) this.refetch();
    }, 150);
  }
}

export function createRanks(tl) {
  const view = new RanksView(tl);
  return { slot: "header", node: view.node, toolbar: view.toggle, redraw: () => view.requestDraw() };
}
