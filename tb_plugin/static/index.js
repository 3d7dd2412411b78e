// Timeline dashboard: swimlanes of rendezvous, agent and worker events drawn on a canvas.
//
// TensorBoard loads this module in an iframe and calls render(). Data comes from the plugin's
// routes as columnar base64 typed arrays; everything taken from an event is shown through
// textContent (never HTML), so a message can never inject markup.

const ROW_H = 20;
const GROUP_H = 24;
const AXIS_H = 30;
const POLL_MS = 5000;
const LOADING_POLL_MS = 700; // while the server is still decoding the job's first records
const LABEL_W = 230; // the lane labels' column (style.css --label-w), for the first request
const MIN_SPAN_S = 0.001;
const ALPHA_LEVELS = 16; // shades of a level-of-detail bucket (by its event count)
const OPEN_DASH = [3, 2]; // the outline of an interval still in progress
const SOLID = [];

const STATE_COLORS = {
  INIT: "#9aa0a6",
  START: "#4fc3f7",
  RUNNING: "#1e88e5",
  RENDEZVOUS: "#5c6bc0",
  ASSIGN_WORKER_RANKS: "#9575cd",
  HEALTHY: "#26a69a",
  SUCCEEDED: "#43a047",
  STOPPED: "#8d6e63",
  TERMINATED: "#ab47bc",
  UNHEALTHY: "#fb8c00",
  FAILED: "#e53935",
  "": "#78909c",
};
const EXTRA_COLORS = ["#00897b", "#c0ca33", "#6d4c41", "#d81b60", "#3949ab", "#7cb342"];
const KIND_TITLES = {
  rendezvous: "Rendezvous",
  agent: "Agents",
  worker: "Workers",
  monitor: "Monitor events",
};

function colorOf(state) {
  if (state in STATE_COLORS) return STATE_COLORS[state];
  let h = 0;
  for (const c of state) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return EXTRA_COLORS[h % EXTRA_COLORS.length];
}

function batchOf(batches, key) {
  let p = batches.get(key);
  if (!p) batches.set(key, (p = []));
  return p;
}

function decode(b64, Type) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

const count = (n, noun) => `${n.toLocaleString("en-US")} ${noun}${n === 1 ? "" : "s"}`;
const pad = (n, w = 2) => String(n).padStart(w, "0");

function formatTime(t, withDate = false, ms = false) {
  const d = new Date(t * 1000);
  let s = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (ms) s += `.${pad(d.getMilliseconds(), 3)}`;
  if (withDate) s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${s}`;
  return s;
}

function formatDuration(s) {
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

const TICK_STEPS = [
  0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
  900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
];

function tickStep(span, width) {
  const target = span / Math.max(1, width / 110);
  return TICK_STEPS.find((s) => s >= target) || TICK_STEPS[TICK_STEPS.length - 1];
}

// Binary search: first index in [lo, hi) of sorted `arr` with arr[i] >= value.
function lowerBound(arr, value, lo, hi) {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The TensorBoard host talks to plugin iframes over a MessageChannel; its reload button
// broadcasts "experimental.DataReloaded". Every message expects a reply.
function listenToHost(onReload) {
  if (!window.parent || window.parent === window) return;
  const channel = new MessageChannel();
  channel.port1.onmessage = (event) => {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    if (message.isReply) return;
    if (message.type === "experimental.DataReloaded") onReload();
    const reply = { type: message.type, id: message.id, payload: null, error: null, isReply: true };
    channel.port1.postMessage(JSON.stringify(reply));
  };
  window.parent.postMessage("experimental.bootstrap", "*", [channel.port2]);
}

class Timeline {
  constructor(root) {
    this.root = root;
    this.view = null; // {start, end} in epoch seconds
    this.userZoomed = false;
    this.data = null;
    this.rows = [];
    this.rowOfLane = [];
    this.selected = null; // event id
    this.hover = null;
    this.filters = { run: "", run_id: "", kind: "", state: "", q: "" };
    this.generation = -1;
    this.fetchSeq = 0;
    this.colors = {};
    // firstPaint: the first events drawn; firstRender: the first complete (not loading) view.
    this.stats = { frames: [], firstPaint: null, firstRender: null, fetches: 0 };
    window.tbTimeline = this; // for the benchmark and for debugging from the console
    this.build();
  }

  // ---------------------------------------------------------------- DOM
  build() {
    const f = this.filters;
    this.summary = el("span", { class: "tl-summary", role: "status", "aria-live": "polite" });
    this.runSelect = el("select", { title: "Run (directory in the logdir)" });
    this.runIdSelect = el("select", { title: "Job (torchelastic run id)" });
    this.kindSelect = el("select", { title: "Source of the events" });
    this.stateSelect = el("select", { title: "State of the events" });
    this.search = el("input", {
      type: "search",
      placeholder: "Search events…",
      "aria-label": "Search events",
    });
    const option = (value, text) => el("option", { value, text });
    this.kindSelect.append(option("", "All sources"));
    for (const kind of Object.keys(KIND_TITLES)) this.kindSelect.append(option(kind, KIND_TITLES[kind]));
    const onSelect = (select, key) =>
      select.addEventListener("change", () => {
        f[key] = select.value;
        this.refetch({ fit: !this.userZoomed });
      });
    onSelect(this.runSelect, "run");
    onSelect(this.runIdSelect, "run_id");
    onSelect(this.kindSelect, "kind");
    onSelect(this.stateSelect, "state");
    let searchTimer = 0;
    this.search.addEventListener("input", () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => {
        f.q = this.search.value.trim();
        this.refetch({ fit: !this.userZoomed });
      }, 250);
    });
    const button = (text, label, action) => {
      const b = el("button", { type: "button", "aria-label": label, title: label, text });
      b.addEventListener("click", action);
      return b;
    };
    const field = (text, control) => {
      control.id = `tl-${text.toLowerCase()}`;
      return el("span", { class: "tl-field" }, el("label", { for: control.id, text }), control);
    };
    this.resetButton = button("Reset", "Reset zoom (0)", () => this.resetView());
    const toolbar = el(
      "div",
      { class: "tl-toolbar", role: "toolbar", "aria-label": "Timeline filters and zoom" },
      el("h1", { class: "tl-title", text: "Timeline" }),
      this.summary,
      field("Run", this.runSelect),
      field("Job", this.runIdSelect),
      field("Source", this.kindSelect),
      field("State", this.stateSelect),
      this.search,
      button("−", "Zoom out (-)", () => this.zoomBy(1.6)),
      button("+", "Zoom in (+)", () => this.zoomBy(1 / 1.6)),
      this.resetButton
    );
    this.legend = el("div", { class: "tl-legend", "aria-label": "Legend" });

    this.axisCanvas = el("canvas", { "aria-hidden": "true" });
    this.canvas = el("canvas", {
      role: "img",
      "aria-label":
        "Timeline plot. Wheel zooms around the pointer, drag pans; keys: + and - zoom, arrows pan, 0 resets.",
    });
    this.labels = el("div", { class: "tl-labels", role: "list", "aria-label": "Lanes" });
    this.plot = el("div", { class: "tl-plot" }, this.canvas);
    this.axisCorner = el("div", { class: "tl-axis-corner", text: "Lane" });
    this.axis = el("div", { class: "tl-axis" }, this.axisCanvas);
    this.grid = el("div", { class: "tl-grid" }, this.axisCorner, this.axis, this.labels, this.plot);
    this.scroll = el("div", { class: "tl-scroll", tabindex: "0" }, this.grid);
    this.empty = el("div", { class: "tl-empty", hidden: "" });
    this.details = el("aside", { class: "tl-details", hidden: "", "aria-label": "Event details" });
    this.tooltip = el("div", { class: "tl-tooltip", hidden: "", role: "tooltip" });
    this.status = el("div", { class: "tl-status" });
    const body = el("div", { class: "tl-body" }, this.scroll, this.details);
    this.app = el("div", { class: "tl-app" }, toolbar, this.legend, this.empty, body, this.status);
    this.root.append(this.app, this.tooltip);

    this.scroll.addEventListener("scroll", () => this.requestDraw());
    new ResizeObserver(() => this.resize()).observe(this.scroll);
    this.bindPointer();
    this.bindKeys();
  }

  applyTheme() {
    let dark;
    try {
      dark = window.parent.document.body.classList.contains("dark-mode");
    } catch {
      dark = window.matchMedia("(prefers-color-scheme: dark)").matches;
    }
    document.documentElement.classList.toggle("dark", dark);
    const css = getComputedStyle(document.documentElement);
    for (const name of ["bg", "fg", "muted", "line", "band", "header-bg", "accent"]) {
      this.colors[name] = css.getPropertyValue(`--${name}`).trim();
    }
    this.requestDraw();
  }

  watchTheme() {
    this.applyTheme();
    try {
      new MutationObserver(() => this.applyTheme()).observe(window.parent.document.body, {
        attributes: true,
        attributeFilter: ["class"],
      });
    } catch {
      // Not same-origin (never the case inside TensorBoard): follow the system setting.
    }
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => this.applyTheme());
  }

  // ---------------------------------------------------------------- data
  // The first request goes out while the stylesheet loads; drawing waits for the styles.
  async start(stylesheet) {
    const first = this.refetch({ fit: true, ready: stylesheet });
    await stylesheet;
    this.watchTheme();
    listenToHost(() => this.refetch({}));
    await first;
    setInterval(() => this.poll(), POLL_MS);
  }

  query(extra) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(this.filters)) if (v) params.set(k, v);
    for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) params.set(k, v);
    return params.toString();
  }

  async poll() {
    if (document.hidden) return;
    try {
      const res = await fetch("./status");
      if (!res.ok) return;
      const { generation, loading } = await res.json();
      if (generation !== this.generation && !loading) await this.refetch({});
    } catch {
      // The server may be restarting; the next poll tries again.
    }
  }

  // Ask for the current view; without a zoom, let the server fit the window to the data.
  async refetch({ fit = false, ready = null } = {}) {
    const seq = ++this.fetchSeq;
    clearTimeout(this.loadingTimer);
    // Before the stylesheet lays the page out, the plot's width is estimated from the window.
    const width = Math.max(200, this.width || window.innerWidth - LABEL_W);
    let params;
    if (fit || !this.view) {
      params = this.query({ width });
    } else {
      const span = this.view.end - this.view.start;
      params = this.query({
        start: this.view.start - span / 2,
        end: this.view.end + span / 2,
        width: width * 2,
      });
    }
    this.setStatus("Loading…");
    let payload;
    try {
      const res = await fetch(`./timeline?${params}`);
      payload = await res.json();
      if (!res.ok) throw new Error(payload.error || res.statusText);
    } catch (err) {
      if (seq === this.fetchSeq) this.setStatus(`Could not load the timeline: ${err.message}`, true);
      return;
    }
    await ready;
    if (seq !== this.fetchSeq) return; // a newer request superseded this one
    this.stats.fetches++;
    this.load(payload, fit || !this.view);
    const loading = payload.loading;
    if (loading) {
      // Partial data: show it, say how far the server is, and ask again soon.
      const pct = loading.expected ? Math.floor((100 * loading.done) / loading.expected) : 0;
      this.setStatus(`Loading events… ${pct}% (${count(loading.done, "record")} of ${loading.expected.toLocaleString("en-US")} read)`);
      this.loadingTimer = setTimeout(() => this.refetch({ fit: fit && !this.userZoomed }), LOADING_POLL_MS);
    } else {
      this.setStatus("");
    }
  }

  load(payload, fit) {
    this.generation = payload.generation;
    const d = { ...payload };
    if (payload.mode === "events") {
      const e = payload.events;
      d.events = {
        count: e.count,
        t: decode(e.t, Float64Array),
        lane: decode(e.lane, Uint32Array),
        state: decode(e.state, Uint16Array),
        id: decode(e.id, Uint32Array),
        name: decode(e.name, Uint32Array),
        msg: decode(e.msg, Uint32Array),
        names: e.names,
        msgs: e.msgs,
      };
      d.laneStart = this.offsets(d.events.lane, payload.lanes.length);
    } else {
      const b = payload.buckets;
      d.buckets = {
        count: b.count,
        bins: b.bins,
        binWidth: b.bin_width,
        lane: decode(b.lane, Uint32Array),
        bin: decode(b.bin, Uint32Array),
        n: decode(b.n, Uint32Array),
        state: decode(b.state, Uint16Array),
      };
      d.laneStart = this.offsets(d.buckets.lane, payload.lanes.length);
      let max = 1;
      for (const n of d.buckets.n) if (n > max) max = n;
      d.buckets.logMax = Math.log(max + 1);
    }
    const iv = payload.intervals;
    d.intervals = {
      count: iv.count,
      lane: decode(iv.lane, Uint32Array),
      t0: decode(iv.t0, Float64Array),
      t1: decode(iv.t1, Float64Array),
      state: decode(iv.state, Uint16Array),
      label: decode(iv.label, Uint32Array),
      open: decode(iv.open, Uint16Array),
    };
    // Each lane's intervals, in payload order: a frame and a hover visit only their lanes'.
    d.intervals.laneStart = this.offsets(d.intervals.lane, payload.lanes.length);
    d.intervals.order = this.laneOrder(d.intervals.lane, d.intervals.laneStart);
    // Complete data needs no refetch on zoom: every filtered event of the job is here.
    d.complete = payload.mode === "events" && payload.in_window === payload.total;
    this.data = d;
    if (fit || !this.view) {
      this.view = { start: payload.window[0], end: payload.window[1] };
      this.home = { ...this.view };
      this.userZoomed = false;
    } else if (!this.home) {
      this.home = { start: payload.window[0], end: payload.window[1] };
    }
    if (fit && payload.extent) {
      const padding = Math.max((payload.extent[1] - payload.extent[0]) * 0.02, 0.5);
      this.home = { start: payload.extent[0] - padding, end: payload.extent[1] + padding };
    }
    this.updateFilters(payload);
    this.updateLegend(payload);
    this.buildRows(payload.lanes);
    this.summary.textContent = `${count(payload.total, "event")}, ${count(payload.lanes.length, "lane")}`;
    this.empty.hidden = payload.total > 0;
    this.empty.textContent = payload.total
      ? ""
      : payload.loading
        ? "Loading events…"
        : this.anyFilter()
        ? "No event matches these filters."
        : "No timeline records yet. Runs written by tb-monitor appear here as they arrive.";
    this.resize();
    this.drawNow();
    const now = performance.timeOrigin + performance.now();
    if (this.stats.firstPaint === null && payload.total > 0) this.stats.firstPaint = now;
    if (this.stats.firstRender === null && payload.total > 0 && !payload.loading) {
      this.stats.firstRender = now;
    }
    if (this.selected !== null && !this.details.hidden) this.showDetails(this.selected, false);
  }

  anyFilter() {
    return Object.values(this.filters).some(Boolean);
  }

  offsets(laneColumn, lanes) {
    const start = new Uint32Array(lanes + 1);
    for (let i = 0; i < laneColumn.length; i++) start[laneColumn[i] + 1]++;
    for (let i = 0; i < lanes; i++) start[i + 1] += start[i];
    return start;
  }

  // Indices of the rows sorted by lane (a stable counting sort over the lane offsets).
  laneOrder(laneColumn, laneStart) {
    const next = laneStart.slice(0, -1);
    const order = new Uint32Array(laneColumn.length);
    for (let i = 0; i < laneColumn.length; i++) order[next[laneColumn[i]]++] = i;
    return order;
  }

  updateFilters(payload) {
    const fill = (select, values, allText, current, label = (v) => v) => {
      const signature = values.join("\u0000");
      if (select.dataset.signature !== signature) {
        select.replaceChildren(el("option", { value: "", text: allText }));
        for (const v of values) select.append(el("option", { value: v, text: label(v) }));
        select.dataset.signature = signature;
      }
      select.value = current;
    };
    fill(this.runSelect, payload.facets.runs, "All runs", this.filters.run, (v) => v || ".");
    fill(this.runIdSelect, payload.facets.run_ids, "All jobs", this.filters.run_id);
    fill(this.stateSelect, payload.facets.states, "All states", this.filters.state);
    this.kindSelect.value = this.filters.kind;
  }

  updateLegend(payload) {
    const states = payload.facets.states;
    const signature = states.join(",") + "|" + this.filters.state;
    if (this.legend.dataset.signature === signature) return;
    this.legend.dataset.signature = signature;
    const items = states.map((state) => {
      const b = el(
        "button",
        {
          type: "button",
          "aria-pressed": String(this.filters.state === state),
          title: `Show only ${state} events`,
        },
        el("span", { class: "tl-swatch" }),
        state
      );
      b.firstChild.style.background = colorOf(state);
      b.addEventListener("click", () => {
        this.filters.state = this.filters.state === state ? "" : state;
        this.refetch({ fit: !this.userZoomed });
      });
      return b;
    });
    const interval = el("span", { class: "tl-key" }, el("span", { class: "tl-swatch interval" }), "attempt / round");
    interval.firstChild.style.background = STATE_COLORS.RUNNING;
    const hint = el("span", {
      class: "tl-hint",
      text: "Wheel: zoom · Shift+wheel or drag: pan · +/−/←/→/0 keys",
    });
    this.legend.replaceChildren(...items, interval, hint);
  }

  buildRows(lanes) {
    const signature = lanes.map((l) => `${l.group}\u0001${l.kind}\u0001${l.label}`).join("\u0000");
    if (signature === this.rowSignature) return;
    this.rowSignature = signature;
    this.rows = [];
    this.rowOfLane = new Array(lanes.length);
    const fragment = document.createDocumentFragment();
    let y = 0;
    let section = null;
    lanes.forEach((lane, i) => {
      const key = `${lane.group}\u0001${lane.kind}`;
      if (key !== section) {
        section = key;
        const text = `${lane.group} · ${KIND_TITLES[lane.kind] || lane.kind}`;
        this.rows.push({ y, h: GROUP_H, group: true });
        fragment.append(el("div", { class: "tl-group", role: "heading", "aria-level": "2", text }));
        y += GROUP_H;
      }
      const label = el("div", { class: "tl-row", role: "listitem", title: `${lane.label} — ${lane.run || "."}`, text: lane.label });
      label.dataset.lane = String(i);
      this.rowOfLane[i] = this.rows.length;
      this.rows.push({ y, h: ROW_H, lane: i, node: label });
      fragment.append(label);
      y += ROW_H;
    });
    this.contentHeight = y;
    this.labels.replaceChildren(fragment);
    this.plot.style.height = `${Math.max(y, 1)}px`;
  }

  setStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("error", error);
  }

  // ---------------------------------------------------------------- geometry
  plotWidth() {
    return Math.max(1, this.scroll.clientWidth - this.labels.offsetWidth);
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = this.plotWidth();
    const h = Math.max(1, Math.min(this.scroll.clientHeight - AXIS_H - 1, Math.max(this.contentHeight || 0, 1)));
    for (const [canvas, cw, ch] of [
      [this.canvas, w, h],
      [this.axisCanvas, w, AXIS_H],
    ]) {
      if (canvas.width !== Math.round(cw * dpr) || canvas.height !== Math.round(ch * dpr)) {
        canvas.width = Math.round(cw * dpr);
        canvas.height = Math.round(ch * dpr);
        canvas.style.width = `${cw}px`;
        canvas.style.height = `${ch}px`;
      }
    }
    this.width = w;
    this.height = h;
    this.drawNow();
  }

  x(t) {
    return ((t - this.view.start) / (this.view.end - this.view.start)) * this.width;
  }

  timeAt(px) {
    return this.view.start + (px / this.width) * (this.view.end - this.view.start);
  }

  rowAtY(y) {
    let lo = 0;
    let hi = this.rows.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const r = this.rows[mid];
      if (y < r.y) hi = mid - 1;
      else if (y >= r.y + r.h) lo = mid + 1;
      else return r;
    }
    return null;
  }

  // ---------------------------------------------------------------- drawing
  requestDraw() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = 0;
      this.drawNow();
    });
  }

  drawNow() {
    if (!this.view || !this.width) return;
    const t0 = performance.now();
    this.drawPlot();
    this.drawAxis();
    const ms = performance.now() - t0;
    this.stats.frames.push(ms);
    if (this.stats.frames.length > 500) this.stats.frames.shift();
  }

  visibleRows() {
    const top = this.scroll.scrollTop;
    const out = [];
    for (let i = 0; i < this.rows.length; i++) {
      const r = this.rows[i];
      if (r.y + r.h < top) continue;
      if (r.y > top + this.height) break;
      out.push(r);
    }
    return out;
  }

  drawPlot() {
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    const c = this.colors;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = c.bg;
    ctx.fillRect(0, 0, this.width, this.height);
    if (!this.data) return;
    const top = this.scroll.scrollTop;
    const rows = this.visibleRows();
    // Row backgrounds and the time grid.
    for (const r of rows) {
      const y = r.y - top;
      if (r.group) {
        ctx.fillStyle = c["header-bg"];
        ctx.fillRect(0, y, this.width, r.h);
      } else if (this.hover && this.hover.row === r) {
        ctx.fillStyle = c.band;
        ctx.fillRect(0, y, this.width, r.h);
      }
    }
    const span = this.view.end - this.view.start;
    const step = tickStep(span, this.width);
    ctx.strokeStyle = c.line;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let t = Math.ceil(this.view.start / step) * step; t <= this.view.end; t += step) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, 0);
      ctx.lineTo(x, this.height);
    }
    ctx.stroke();
    const laneRows = rows.filter((r) => !r.group);
    this.drawIntervals(ctx, laneRows, top);
    if (this.data.events) this.drawEvents(ctx, laneRows, top);
    else this.drawBuckets(ctx, laneRows, top);
  }

  drawIntervals(ctx, rows, top) {
    const iv = this.data.intervals;
    if (!iv.count) return;
    const states = this.data.states;
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.textBaseline = "middle";
    ctx.lineWidth = 1;
    const h = ROW_H - 6;
    for (const r of rows) {
      const y = r.y - top + 3;
      for (let k = iv.laneStart[r.lane]; k < iv.laneStart[r.lane + 1]; k++) {
        const i = iv.order[k];
        if (iv.t1[i] < this.view.start || iv.t0[i] > this.view.end) continue;
        const x0 = Math.max(-1, this.x(iv.t0[i]));
        const x1 = Math.min(this.width + 1, this.x(iv.t1[i]));
        const w = Math.max(1, x1 - x0);
        const color = colorOf(states[iv.state[i]]);
        ctx.globalAlpha = 0.28;
        ctx.fillStyle = color;
        ctx.fillRect(x0, y, w, h);
        ctx.globalAlpha = 1;
        ctx.strokeStyle = color;
        if (iv.open[i]) ctx.setLineDash(OPEN_DASH);
        ctx.strokeRect(Math.round(x0) + 0.5, y + 0.5, Math.max(1, Math.round(w) - 1), h - 1);
        if (iv.open[i]) ctx.setLineDash(SOLID);
        if (w > 70) {
          const text = this.data.labels[iv.label[i]];
          ctx.fillStyle = this.colors.fg;
          ctx.globalAlpha = 0.75;
          ctx.fillText(text, Math.max(x0, 0) + 5, y + h / 2 + 0.5, w - 10);
          ctx.globalAlpha = 1;
        }
      }
    }
  }

  drawEvents(ctx, rows, top) {
    const e = this.data.events;
    const states = this.data.states;
    const start = this.data.laneStart;
    const scale = this.width / (this.view.end - this.view.start);
    const v0 = this.view.start;
    // One path per state colour: far fewer canvas state changes than one fill per mark.
    const paths = this.batches();
    const markW = scale * 0.05 > 3 ? 4 : 2;
    for (const r of rows) {
      const lo = lowerBound(e.t, v0 - 3 / scale, start[r.lane], start[r.lane + 1]);
      const hi = lowerBound(e.t, this.view.end + 3 / scale, lo, start[r.lane + 1]);
      const y = r.y - top + 4;
      let lastX = -10;
      let lastState = -1;
      for (let i = lo; i < hi; i++) {
        const x = Math.round((e.t[i] - v0) * scale);
        const s = e.state[i];
        if (x === lastX && s === lastState) continue; // same pixel, same colour: already drawn
        lastX = x;
        lastState = s;
        batchOf(paths, s).push(x, y);
      }
    }
    const h = ROW_H - 8;
    for (const [s, p] of paths) {
      if (!p.length) continue;
      ctx.fillStyle = colorOf(states[s]);
      ctx.beginPath();
      for (let k = 0; k < p.length; k += 2) ctx.rect(p[k] - markW / 2, p[k + 1], markW, h);
      ctx.fill();
    }
    this.drawSelection(ctx, rows, top);
  }

  drawSelection(ctx, rows, top) {
    if (this.selected === null || !this.data.events) return;
    const e = this.data.events;
    const i = e.id.indexOf(this.selected);
    if (i < 0) return;
    const r = this.rows[this.rowOfLane[e.lane[i]]];
    if (!rows.includes(r)) return;
    const x = this.x(e.t[i]);
    ctx.strokeStyle = this.colors.accent;
    ctx.lineWidth = 2;
    ctx.strokeRect(x - 4, r.y - top + 2, 8, ROW_H - 4);
    ctx.lineWidth = 1;
  }

  // Level of detail in few canvas calls: neighbouring buckets of one colour and shade become one
  // rect, buckets narrower than a pixel share their pixel column (the most severe state, their
  // summed count), and each colour and shade is one path. Only the bins in view are visited.
  drawBuckets(ctx, rows, top) {
    const b = this.data.buckets;
    const states = this.data.states;
    const start = this.data.laneStart;
    const scale = this.width / (this.view.end - this.view.start);
    const binW = b.binWidth * scale;
    const origin = (this.data.window[0] - this.view.start) * scale; // x of bin 0
    const firstBin = Math.floor(-origin / binW) - 1;
    const lastBin = Math.ceil((this.width - origin) / binW);
    const subPixel = binW < 1;
    const darkest = ALPHA_LEVELS - 1;
    const shade = darkest / b.logMax;
    const batches = this.batches();
    const h = ROW_H - 6;
    for (const r of rows) {
      const y = r.y - top + 3;
      const hi = start[r.lane + 1];
      let i = lowerBound(b.bin, firstBin, start[r.lane], hi);
      let runKey = -1;
      let runX0 = 0;
      let runX1 = 0;
      while (i < hi && b.bin[i] <= lastBin) {
        let x0 = origin + b.bin[i] * binW;
        let x1 = x0 + Math.max(1, binW);
        let state = b.state[i];
        let n = b.n[i];
        i++;
        if (subPixel) {
          x0 = Math.floor(x0);
          x1 = x0 + 1;
          for (; i < hi && Math.floor(origin + b.bin[i] * binW) === x0; i++) {
            if (b.state[i] > state) state = b.state[i];
            n += b.n[i];
          }
        }
        const key = state * ALPHA_LEVELS + Math.min(darkest, Math.round(Math.log(n + 1) * shade));
        if (key === runKey && x0 <= runX1 + 0.01) {
          runX1 = x1;
          continue;
        }
        if (runKey >= 0) batchOf(batches, runKey).push(runX0, y, runX1 - runX0);
        runKey = key;
        runX0 = x0;
        runX1 = x1;
      }
      if (runKey >= 0) batchOf(batches, runKey).push(runX0, y, runX1 - runX0);
    }
    for (const [key, p] of batches) {
      if (!p.length) continue;
      ctx.globalAlpha = 0.35 + (0.65 * (key % ALPHA_LEVELS)) / darkest;
      ctx.fillStyle = colorOf(states[Math.floor(key / ALPHA_LEVELS)]);
      ctx.beginPath();
      for (let k = 0; k < p.length; k += 3) ctx.rect(p[k], p[k + 1], p[k + 2], h);
      ctx.fill();
    }
    ctx.globalAlpha = 1;
  }

  // The per-colour coordinate lists of the frame, emptied: kept between frames so that a frame
  // allocates nothing once they have grown.
  batches() {
    if (!this.batchMap) this.batchMap = new Map();
    for (const p of this.batchMap.values()) p.length = 0;
    return this.batchMap;
  }

  drawAxis() {
    const ctx = this.axisCanvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    const c = this.colors;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = c.bg;
    ctx.fillRect(0, 0, this.width, AXIS_H);
    const span = this.view.end - this.view.start;
    const step = tickStep(span, this.width);
    const ms = step < 1;
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.textBaseline = "alphabetic";
    ctx.fillStyle = c.muted;
    ctx.strokeStyle = c.muted;
    ctx.beginPath();
    let lastDay = null;
    // Align ticks to the local clock (a 1-hour step lands on the hour in the user's zone).
    const offset = new Date(this.view.start * 1000).getTimezoneOffset() * -60;
    const first = Math.ceil((this.view.start + offset) / step) * step - offset;
    for (let t = first; t <= this.view.end; t += step) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, AXIS_H - 6);
      ctx.lineTo(x, AXIS_H);
      const day = new Date(t * 1000).toDateString();
      const label = formatTime(t, day !== lastDay && (lastDay !== null || step >= 3600), ms);
      lastDay = day;
      ctx.fillText(label, x + 3, AXIS_H - 10);
    }
    ctx.stroke();
    this.axisCorner.textContent = `${formatTime(this.view.start, true)}\nspan ${formatDuration(span)}`;
  }

  // ---------------------------------------------------------------- view changes
  setView(start, end, user = true) {
    const home = this.home || this.view;
    const maxSpan = (home.end - home.start) * 20;
    let span = Math.min(Math.max(end - start, MIN_SPAN_S), maxSpan);
    const mid = (start + end) / 2;
    start = mid - span / 2;
    end = mid + span / 2;
    this.view = { start, end };
    if (user) this.userZoomed = true;
    this.requestDraw();
    this.scheduleDetailFetch();
  }

  zoomBy(factor, px = this.width / 2) {
    const t = this.timeAt(px);
    const start = t - (t - this.view.start) * factor;
    const end = t + (this.view.end - t) * factor;
    this.setView(start, end);
  }

  panBy(px) {
    const dt = (px / this.width) * (this.view.end - this.view.start);
    this.setView(this.view.start + dt, this.view.end + dt);
  }

  resetView() {
    if (!this.home) return;
    this.userZoomed = false;
    this.refetch({ fit: true });
  }

  // Complete data redraws at any zoom; otherwise fetch detail for the new window once idle.
  scheduleDetailFetch() {
    if (!this.data || this.data.complete) return;
    clearTimeout(this.detailTimer);
    this.detailTimer = setTimeout(() => {
      const [w0, w1] = this.data.window;
      const span = this.view.end - this.view.start;
      const loadedSpan = w1 - w0;
      const outside = this.view.start < w0 || this.view.end > w1;
      const coarse = this.data.buckets && loadedSpan / span > 3;
      const fine = loadedSpan / span < 1.2;
      if (outside || coarse || fine) this.refetch({});
    }, 150);
  }

  bindPointer() {
    const canvas = this.canvas;
    let drag = null;
    canvas.addEventListener(
      "wheel",
      (event) => {
        event.preventDefault();
        const rect = canvas.getBoundingClientRect();
        const px = event.clientX - rect.left;
        if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
          this.panBy(event.shiftKey ? event.deltaY || event.deltaX : event.deltaX);
        } else {
          this.zoomBy(Math.exp(event.deltaY * 0.0015), px);
        }
      },
      { passive: false }
    );
    canvas.addEventListener("mousedown", (event) => {
      if (event.button !== 0) return;
      drag = { x: event.clientX, y: event.clientY, moved: false, view: { ...this.view }, top: this.scroll.scrollTop };
      canvas.classList.add("dragging");
    });
    window.addEventListener("mousemove", (event) => {
      if (drag) {
        const dx = event.clientX - drag.x;
        const dy = event.clientY - drag.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
        if (drag.moved) {
          const dt = (dx / this.width) * (drag.view.end - drag.view.start);
          this.setView(drag.view.start - dt, drag.view.end - dt);
          this.scroll.scrollTop = drag.top - dy;
        }
        return;
      }
      this.onHover(event);
    });
    window.addEventListener("mouseup", (event) => {
      if (!drag) return;
      const wasClick = !drag.moved;
      drag = null;
      canvas.classList.remove("dragging");
      if (wasClick) this.onClick(event);
    });
    canvas.addEventListener("mouseleave", () => this.hideTooltip());
  }

  bindKeys() {
    document.addEventListener("keydown", (event) => {
      const target = event.target;
      if (target instanceof HTMLInputElement || target instanceof HTMLSelectElement) return;
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      const page = this.width * 0.2;
      const actions = {
        "+": () => this.zoomBy(1 / 1.5),
        "=": () => this.zoomBy(1 / 1.5),
        w: () => this.zoomBy(1 / 1.5),
        "-": () => this.zoomBy(1.5),
        s: () => this.zoomBy(1.5),
        ArrowLeft: () => this.panBy(-page),
        a: () => this.panBy(-page),
        ArrowRight: () => this.panBy(page),
        d: () => this.panBy(page),
        0: () => this.resetView(),
        Home: () => this.resetView(),
        Escape: () => this.closeDetails(),
      };
      const action = actions[event.key];
      if (action) {
        event.preventDefault();
        action();
      }
    });
  }

  // The event, interval or bucket under the pointer, if any.
  hitTest(event) {
    if (!this.data) return null;
    const rect = this.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const py = event.clientY - rect.top;
    if (px < 0 || py < 0 || px > this.width || py > this.height) return null;
    const row = this.rowAtY(py + this.scroll.scrollTop);
    if (!row || row.group) return null;
    const t = this.timeAt(px);
    const slack = (6 / this.width) * (this.view.end - this.view.start);
    const start = this.data.laneStart;
    if (this.data.events) {
      const e = this.data.events;
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
      const b = this.data.buckets;
      const w0 = this.data.window[0];
      const first = Math.floor((t - slack / 2 - w0) / b.binWidth) - 1;
      for (let i = lowerBound(b.bin, first, start[row.lane], start[row.lane + 1]); i < start[row.lane + 1]; i++) {
        const t0 = w0 + b.bin[i] * b.binWidth;
        if (t0 - slack / 2 > t) break;
        if (t <= t0 + b.binWidth + slack / 2) return { row, bucket: i, px };
      }
    }
    const iv = this.data.intervals;
    for (let k = iv.laneStart[row.lane]; k < iv.laneStart[row.lane + 1]; k++) {
      const i = iv.order[k];
      if (iv.t0[i] <= t && t <= iv.t1[i]) return { row, interval: i, px };
    }
    return { row, px };
  }

  onHover(event) {
    const hit = this.hitTest(event);
    const prevRow = this.hover && this.hover.row;
    this.hover = hit;
    if (prevRow !== (hit && hit.row)) {
      if (prevRow && prevRow.node) prevRow.node.classList.remove("hover");
      if (hit && hit.row.node) hit.row.node.classList.add("hover");
      this.requestDraw();
    }
    if (!hit || (hit.event === undefined && hit.bucket === undefined && hit.interval === undefined)) {
      this.hideTooltip();
      return;
    }
    const d = this.data;
    const lane = d.lanes[hit.row.lane];
    const lines = [];
    if (hit.event !== undefined) {
      const e = d.events;
      const i = hit.event;
      lines.push([d.states[e.state[i]] || "no state", d.events.names[e.name[i]]]);
      lines.push([null, `${formatTime(e.t[i], true, true)} · ${lane.label}`]);
      const msg = e.msgs[e.msg[i]];
      if (msg) lines.push([null, msg]);
    } else if (hit.bucket !== undefined) {
      const b = d.buckets;
      const t0 = d.window[0] + b.bin[hit.bucket] * b.binWidth;
      lines.push([d.states[b.state[hit.bucket]] || "no state", `${b.n[hit.bucket].toLocaleString("en-US")} events`]);
      lines.push([null, `${formatTime(t0, true)} + ${formatDuration(b.binWidth)} · ${lane.label}`]);
      lines.push([null, "Zoom in to see each event."]);
    } else {
      const iv = d.intervals;
      const i = hit.interval;
      const what = d.labels[iv.label[i]];
      lines.push([iv.open[i] ? "in progress" : d.states[iv.state[i]] || "interval", what]);
      lines.push([null, `${formatTime(iv.t0[i], true)} → ${formatDuration(iv.t1[i] - iv.t0[i])} · ${lane.label}`]);
    }
    this.tooltip.replaceChildren(
      ...lines.map(([strong, text]) => {
        const line = el("div");
        if (strong) line.append(el("b", { text: strong }), " ");
        line.append(el("span", { class: strong ? "" : "tl-dim", text }));
        return line;
      })
    );
    this.tooltip.hidden = false;
    const x = Math.min(event.clientX + 14, window.innerWidth - this.tooltip.offsetWidth - 8);
    const y = Math.min(event.clientY + 14, window.innerHeight - this.tooltip.offsetHeight - 8);
    this.tooltip.style.left = `${Math.max(4, x)}px`;
    this.tooltip.style.top = `${Math.max(4, y)}px`;
  }

  hideTooltip() {
    this.tooltip.hidden = true;
  }

  onClick(event) {
    const hit = this.hitTest(event);
    if (!hit) return;
    if (hit.event !== undefined) {
      this.showDetails(this.data.events.id[hit.event], true);
    } else if (hit.bucket !== undefined) {
      const b = this.data.buckets;
      const t0 = this.data.window[0] + b.bin[hit.bucket] * b.binWidth;
      this.setView(t0 - b.binWidth * 2, t0 + b.binWidth * 3);
    } else if (hit.interval !== undefined) {
      const iv = this.data.intervals;
      const span = iv.t1[hit.interval] - iv.t0[hit.interval];
      this.setView(iv.t0[hit.interval] - span * 0.1, iv.t1[hit.interval] + span * 0.1);
    }
  }

  async showDetails(id, focus) {
    this.selected = id;
    this.requestDraw();
    let info;
    try {
      const res = await fetch(`./event?id=${encodeURIComponent(id)}`);
      info = await res.json();
      if (!res.ok) throw new Error(info.error || res.statusText);
    } catch (err) {
      this.details.replaceChildren(el("p", { text: `Could not load the event: ${err.message}` }));
      this.details.hidden = false;
      return;
    }
    if (this.selected !== id) return;
    const f = info.fields;
    const close = el("button", { type: "button", class: "tl-close", "aria-label": "Close details", text: "×" });
    close.addEventListener("click", () => this.closeDetails());
    const dl = el("dl");
    const row = (k, v) => {
      if (v === null || v === undefined || v === "") v = "—";
      dl.append(el("dt", { text: k }), el("dd", { text: typeof v === "object" ? JSON.stringify(v) : String(v) }));
    };
    row("time", formatTime(info.wall_time, true, true));
    row("lane", info.lane);
    row("run", info.run || ".");
    row("kind", info.kind);
    row("step", info.step);
    for (const key of ["name", "source", "state", "hostname", "pid", "rank", "local_id", "run_id", "message"]) {
      row(key, f[key]);
    }
    const parts = [close, el("h2", { text: f.name || "(unnamed event)" }), dl];
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
    this.details.replaceChildren(...parts);
    this.details.hidden = false;
    if (focus) close.focus({ preventScroll: true });
    this.resize();
  }

  closeDetails() {
    this.selected = null;
    this.details.hidden = true;
    this.resize();
    this.scroll.focus({ preventScroll: true });
  }
}

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

function addStylesheet() {
  return new Promise((resolve) => {
    const link = el("link", { rel: "stylesheet", href: "./static/style.css" });
    link.addEventListener("load", resolve);
    link.addEventListener("error", resolve);
    document.head.append(link);
  });
}

export async function render() {
  const stylesheet = addStylesheet();
  const timeline = new Timeline(document.body);
  await timeline.start(stylesheet);
}
