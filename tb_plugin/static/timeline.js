// The Timeline: its state (data, filters, the time window shown, the selected event), the page's
// layout with the panels' slots, the fetch-and-load cycle, the lane rows and zoom and pan.
//
// A panel is made by a function (timeline) => {slot, node, toolbar?, update(data)?,
// select(id, focus)?, redraw()?}: its node goes in its slot ("toolbar": among the toolbar's controls,
// "header": under the toolbar, "side": beside the plot), its `toolbar` node (if any) among the
// toolbar's controls; update() runs on every loaded payload, before the lanes are laid out,
// select() on every change of the selected event (id, or null), redraw() on a theme change.

import { decodePayload, every, fetchStatus, fetchTimeline, Latest, LOADING_POLL_MS, Timer } from "./api.js";
import { clampSpan, TimeAxis, wantsDetail } from "./axis.js";
import { el, labelNodes, sizeCanvas, userText } from "./dom.js";
import { AXIS_H, drawAxis, drawPlot, GROUP_H, ROW_H } from "./draw.js";
import { count, isolate, KIND_TITLES, labelText, loadingText } from "./format.js";
import { Frames } from "./frames.js";
import { bindKeys, bindPointer } from "./input.js";

const POLL_MS = 5000;
const EMPTY_POLL_MS = 1000; // while there is nothing to show: TensorBoard may still be starting
const LABEL_W = 230; // the lane labels' column (style.css --label-w), for the first request
const MIN_SPAN_S = 0.001;

export class Timeline {
  constructor(root, panels = []) {
    this.root = root;
    this.time = new TimeAxis(0); // the window shown, {start, end} in epoch seconds: this.view
    this.userZoomed = false;
    this.data = null;
    this.rows = [];
    this.rowOfLane = [];
    this.selected = null; // event id
    this.hover = null;
    this.filters = { run: "", run_id: "", kind: "", state: "", q: "" };
    this.generation = -1;
    this.requests = new Latest(fetchTimeline);
    this.loadingRetry = new Timer(); // asks again while the server is still reading
    this.emptyRetry = new Timer(); // looks again soon while there is nothing to show
    this.detailFetch = new Timer(); // fetches detail once a zoom or pan has settled
    this.frames = new Frames(() => this.draw());
    this.colors = {};
    // firstPaint: the first events drawn; firstRender: the first complete (not loading) view.
    this.stats = { frames: this.frames.times, firstPaint: null, firstRender: null, fetches: 0 };
    window.tbTimeline = this; // for the benchmark and for debugging from the console
    this.panels = panels.map((create) => create(this));
    this.build();
  }

  get view() {
    return this.time.view;
  }

  set view(view) {
    this.time.view = view;
  }

  // ---------------------------------------------------------------- DOM
  build() {
    const slots = { toolbar: [], header: [], side: [] };
    for (const panel of this.panels) {
      slots[panel.slot].push(panel.node);
      if (panel.toolbar) slots.toolbar.push(panel.toolbar);
    }
    this.summary = el("span", { class: "tl-summary", role: "status", "aria-live": "polite" });
    const button = (text, label, action) => {
      const b = el("button", { type: "button", "aria-label": label, title: label, text });
      b.addEventListener("click", action);
      return b;
    };
    this.resetButton = button("Reset", "Reset zoom (0)", () => this.resetView());
    const toolbar = el(
      "div",
      { class: "tl-toolbar", role: "toolbar", "aria-label": "Timeline filters and zoom" },
      el("h1", { class: "tl-title", text: "Timeline" }),
      this.summary,
      ...slots.toolbar,
      button("−", "Zoom out (-)", () => this.zoomBy(1.6)),
      button("+", "Zoom in (+)", () => this.zoomBy(1 / 1.6)),
      this.resetButton
    );

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
    this.tooltip = el("div", { class: "tl-tooltip", hidden: "", role: "tooltip" });
    this.status = el("div", { class: "tl-status" });
    const body = el("div", { class: "tl-body" }, this.scroll, ...slots.side);
    this.app = el(
      "div",
      { class: "tl-app" },
      toolbar,
      ...slots.header,
      this.empty,
      body,
      this.status
    );
    this.root.append(this.app, this.tooltip);

    this.scroll.addEventListener("scroll", () => this.requestDraw());
    new ResizeObserver(() => this.resize()).observe(this.scroll);
    bindPointer(this);
    bindKeys(this);
  }

  // The stylesheet's colours for the canvas (see host.js followTheme).
  setColors(colors) {
    this.colors = colors;
    this.requestDraw();
    for (const panel of this.panels) if (panel.redraw) panel.redraw();
  }

  // ---------------------------------------------------------------- data
  startPolling() {
    every(POLL_MS, () => this.poll());
  }

  query(extra) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(this.filters)) if (v) params.set(k, v);
    for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== null) params.set(k, v);
    return params.toString();
  }

  async poll() {
    try {
      const status = await fetchStatus();
      if (!status) return;
      const { generation, loading } = status;
      // A read under way that this view has not shown yet: say how far it is at once (the
      // status is cheap, a first picture of millions of events is not), and show it growing
      // (refetch asks again while it lasts). Otherwise only news, fitted when nothing was shown.
      const retrying = this.loadingRetry.pending;
      if (loading && !retrying) this.showLoading(loading);
      if (loading ? !retrying : generation !== this.generation) {
        await this.refetch({ fit: !this.total && !this.userZoomed });
      }
    } catch {
      // The server may be restarting; the next poll tries again.
    }
  }

  // Ask for the current view; without a zoom, let the server fit the window to the data.
  // `ready`: a promise to wait for before drawing (the stylesheet, on the first request).
  async refetch({ fit = false, ready = null } = {}) {
    this.loadingRetry.clear();
    this.emptyRetry.clear();
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
    if (!this.loadingShown) this.setStatus("Loading…"); // a read's progress stays up meanwhile
    let payload;
    try {
      payload = await this.requests.get(params, ready);
    } catch (err) {
      this.loadingShown = false;
      this.setStatus(`Could not load the timeline: ${err.message}`, true);
      return;
    }
    if (!payload) return; // a newer request superseded this one
    this.stats.fetches++;
    this.load(payload, fit || !this.view);
    const loading = payload.loading;
    if (loading) {
      // Partial data: show it, say how far the server is, and ask again soon.
      this.showLoading(loading);
      this.loadingRetry.set(() => this.refetch({ fit: fit && !this.userZoomed }), LOADING_POLL_MS);
    } else {
      this.loadingShown = false;
      this.setStatus("");
      // Nothing yet (TensorBoard may not have loaded the logdir): look again soon, not at the
      // next regular poll, so a first read's progress shows from its first second.
      if (!payload.total) this.emptyRetry.set(() => this.poll(), EMPTY_POLL_MS);
    }
  }

  showLoading(loading) {
    this.loadingShown = true;
    this.setStatus(loadingText("events", loading, "record"));
    if (!this.total) this.empty.textContent = "Loading events…";
  }

  load(payload, fit) {
    this.generation = payload.generation;
    this.total = payload.total;
    this.data = decodePayload(payload);
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
    for (const panel of this.panels) if (panel.update) panel.update(this.data);
    this.buildRows(this.data.lanes);
    this.summary.textContent = `${count(payload.total, "event")}, ${count(this.data.lanes.length, "lane")}`;
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
  }

  // Filter on one field ("run", "run_id", "kind", "state", "q"; "" for all) and fetch again.
  setFilter(key, value) {
    this.filters[key] = value;
    this.refetch({ fit: !this.userZoomed });
  }

  anyFilter() {
    return Object.values(this.filters).some(Boolean);
  }

  // Select an event by id (null: none); `focus` moves the keyboard focus to what shows it.
  select(id, focus = false) {
    this.selected = id;
    this.requestDraw();
    for (const panel of this.panels) if (panel.select) panel.select(id, focus);
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
        const kind = ` · ${KIND_TITLES[lane.kind] || lane.kind}`;
        this.rows.push({ y, h: GROUP_H, group: true, job: lane.group, kind: lane.kind });
        fragment.append(el("div", { class: "tl-group", role: "heading", "aria-level": "2" }, userText(lane.group), kind));
        y += GROUP_H;
      }
      const title = `${isolate(labelText(lane.parts))} — ${isolate(lane.run || ".")}`;
      const label = el("div", { class: "tl-row", role: "listitem", title }, ...labelNodes(lane.parts));
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
    const w = this.plotWidth();
    const h = Math.max(1, Math.min(this.scroll.clientHeight - AXIS_H - 1, Math.max(this.contentHeight || 0, 1)));
    sizeCanvas(this.canvas, w, h);
    sizeCanvas(this.axisCanvas, w, AXIS_H);
    this.width = this.time.width = w;
    this.height = h;
    this.drawNow();
  }

  x(t) {
    return this.time.x(t);
  }

  timeAt(px) {
    return this.time.timeAt(px);
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
    this.frames.request();
  }

  drawNow() {
    this.frames.now();
  }

  draw() {
    if (!this.view || !this.width) return false;
    drawPlot(this);
    drawAxis(this);
    return true;
  }

  // ---------------------------------------------------------------- view changes
  setView(start, end, user = true) {
    const home = this.home || this.view;
    this.view = clampSpan(start, end, MIN_SPAN_S, (home.end - home.start) * 20);
    if (user) this.userZoomed = true;
    this.requestDraw();
    this.scheduleDetailFetch();
  }

  zoomBy(factor, px = this.width / 2) {
    const { start, end } = this.time.zoomed(factor, px);
    this.setView(start, end);
  }

  panBy(px) {
    const { start, end } = this.time.panned(px);
    this.setView(start, end);
  }

  resetView() {
    if (!this.home) return;
    this.userZoomed = false;
    this.refetch({ fit: true });
  }

  // Complete data redraws at any zoom; otherwise fetch detail for the new window once idle.
  scheduleDetailFetch() {
    if (!this.data || this.data.complete) return;
    this.detailFetch.set(() => {
      const loaded = this.data.window;
      if (wantsDetail(this.view, loaded, { coarse: Boolean(this.data.buckets), margin: true })) this.refetch({});
    }, 150);
  }
}
