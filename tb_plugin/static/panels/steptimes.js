// The Ranks view's step times in seconds, under the heatmap and on its time axis: every rank's
// median step time as a faint line (a rank apart from the others is a lone line), the median
// rank's median (bold) and p95 (dashed) as the line to read them against, and one rank's own
// median and p95 in the accent colour: the rank hovered (in the heatmap or its curve here), else
// the one clicked, else the worst straggler. One overlay rather than a chart per rank: at 64
// ranks small multiples are a few pixels tall each and no longer share a y scale one can read.
// Past LINES_MAX ranks the faint lines only blur into each other (and cost the frame), so the
// ranks' medians are drawn as one band from the fastest rank's to the slowest's; the server
// then sends that band and only the highlighted ranks' curves (a hovered one's on demand).
// The jobs' rendezvous, failures and restarts are the heatmap's markers, drawn across both.
//
// The server buckets the curves exactly as the heatmap's columns (tb_plugin/step_times.py:
// per rank base64 float32, NaN where the rank recorded no window), so both line up bucket for
// bucket; this module only decodes, scales and strokes.

import { decode } from "../api.js";
import { el, sizeCanvas } from "../dom.js";
import { formatDuration, formatTime } from "../format.js";

export const STEPS_H = 150; // the chart's height, CSS pixels
const PAD_TOP = 16; // room for the markers' labels
const PAD_BOTTOM = 8;
const NEAR_PX = 6; // a curve this close to the pointer is the one hovered
const LINES_MAX = 128; // more ranks: a band, not a line each (tb_plugin/step_times.py BAND_RANKS)
const MARKER_TEXT = { rendezvous: "start", restart: "restart", failure: "failure" };

// The jobs' markers as vertical lines from y0 to y1 over [left, right], with a tick at y0 and
// (`labels`) their kind beside it where it does not run into the previous one.
export function drawMarkers(ctx, time, markers, { y0, y1, left, right, labels = false }) {
  ctx.font = "10px Roboto, Arial, sans-serif";
  ctx.textBaseline = "top";
  let free = left; // where the next label may start
  for (const m of [...markers].sort((a, b) => a.t - b.t)) {
    const x = time.x(m.t);
    if (x < left || x > right) continue;
    ctx.strokeStyle = m.color;
    ctx.fillStyle = m.color;
    ctx.lineWidth = m.kind === "failure" ? 2 : 1.5;
    ctx.setLineDash(m.kind === "rendezvous" ? [4, 3] : []);
    ctx.beginPath();
    ctx.moveTo(x, y0);
    ctx.lineTo(x, y1);
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(x - 4, y0);
    ctx.lineTo(x + 4, y0);
    ctx.lineTo(x, y0 + 6);
    ctx.fill();
    const text = MARKER_TEXT[m.kind] || m.kind;
    const w = ctx.measureText(text).width;
    if (labels && x + 5 >= free && x + 5 + w < right) {
      ctx.fillText(text, x + 5, y0 + 1);
      free = x + 5 + w + 4;
    }
  }
  ctx.setLineDash([]);
  ctx.lineWidth = 1;
}

// The top of the y scale for `curves` over buckets b0..b1: per bucket the highest of them,
// and a little over the 99th percentile of that over time, so the slowest rank's median (and the
// median rank's p95) fit while one startup step does not flatten every curve (higher points
// are drawn at the top edge). Rows x buckets comparisons, one sort of the buckets.
function ceiling(curves, b0, b1) {
  const n = Math.max(0, b1 - b0);
  const top = new Float64Array(n); // step times are positive: 0 is "none"
  for (const values of curves) {
    for (let i = 0; i < n; i++) if (values[b0 + i] > top[i]) top[i] = values[b0 + i];
  }
  const sorted = top.filter((v) => v > 0).sort();
  if (!sorted.length) return 1;
  return Math.max(1e-3, sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] * 1.15);
}

// Per bucket, the smallest and largest of `rows`' values (NaN where none has one).
function spread(rows, bins) {
  const lo = new Float32Array(bins).fill(NaN);
  const hi = new Float32Array(bins).fill(NaN);
  for (const values of rows) {
    for (let i = 0; i < bins; i++) {
      const v = values[i];
      if (Number.isNaN(v)) continue;
      if (!(v >= lo[i])) lo[i] = v; // true too while lo[i] is NaN
      if (!(v <= hi[i])) hi[i] = v;
    }
  }
  return { lo, hi };
}

export class StepTimes {
  // `time`: the heatmap's TimeAxis, shared; `left`: where its plot starts (the labels' column).
  constructor(time, left) {
    this.time = time;
    this.left = left;
    this.curves = null;
    this.drawn = null; // what the last frame drew, for tests and the console
    this.caption = el("div", { class: "tl-steps-caption" });
    this.canvas = el("canvas", {
      role: "img",
      "aria-label": "Step time per rank in seconds: each rank's median, the median rank's median and p95, and the highlighted rank's.",
    });
    this.node = el("div", { class: "tl-steps", hidden: "" }, this.caption, this.canvas);
  }

  // The payload's curves (`d.step_times`, over `d`'s buckets), decoded once.
  load(d) {
    const s = d.step_times;
    this.node.hidden = !s || !d.bins; // no rank windows: no empty chart either
    if (this.node.hidden) {
      this.curves = null;
      return;
    }
    this.curves = {
      // Past the band threshold only the highlighted ranks' curves come (the others null).
      p50: s.p50.map((b) => b && decode(b, Float32Array)),
      p95: s.p95.map((b) => b && decode(b, Float32Array)),
      typical50: decode(s.typical_p50, Float32Array),
      typical95: decode(s.typical_p95, Float32Array),
      recorded: s.recorded,
      band: null,
      t0: d.t0,
      binS: d.bin_s,
      bins: d.bins,
    };
    if (s.band) this.curves.band = { lo: decode(s.band.lo, Float32Array), hi: decode(s.band.hi, Float32Array) };
    else if (d.ranks.length > LINES_MAX) this.curves.band = spread(this.curves.p50, d.bins);
  }

  resize(w) {
    this.w = w;
    sizeCanvas(this.canvas, w, STEPS_H);
  }

  // The buckets in view, one either side so lines leave the edges.
  span() {
    const c = this.curves;
    const v = this.time.view;
    const b0 = Math.max(0, Math.floor((v.start - c.t0) / c.binS) - 1);
    return [b0, Math.min(c.bins, Math.ceil((v.end - c.t0) / c.binS) + 1)];
  }

  x(bin) {
    return this.time.x(this.curves.t0 + (bin + 0.5) * this.curves.binS);
  }

  y(value) {
    const h = STEPS_H - PAD_TOP - PAD_BOTTOM;
    return PAD_TOP + (1 - Math.min(value, this.ymax) / this.ymax) * h;
  }

  // One curve over the buckets in view, broken where it has no value.
  stroke(ctx, values, [b0, b1]) {
    ctx.beginPath();
    let open = false;
    let points = 0;
    for (let i = b0; i < b1; i++) {
      const v = values[i];
      if (!Number.isFinite(v)) {
        open = false;
        continue;
      }
      const x = this.x(i);
      const y = this.y(v);
      if (open) ctx.lineTo(x, y);
      else ctx.moveTo(x, y);
      if (!open) ctx.lineTo(x + 0.5, y); // a lone bucket still shows
      open = true;
      points++;
    }
    ctx.stroke();
    return points;
  }

  // The y scale of the buckets in view, whichever rank is highlighted (hovering does not
  // rescale); found again only when those buckets change.
  scaleTo([b0, b1]) {
    const c = this.curves;
    if (c.scaled === `${b0}:${b1}`) return;
    c.scaled = `${b0}:${b1}`;
    this.ymax = ceiling([...(c.band ? [c.band.hi] : c.p50), c.typical95], b0, b1);
  }

  // One frame: the axis' grid and labels, the curves, the markers. `d`: the payload (ranks,
  // markers); `colors`: the stylesheet's; `highlight`: a row or null.
  draw(d, colors, highlight) {
    if (!this.w || !this.time.view) return;
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, this.w, STEPS_H);
    const c = this.curves;
    this.drawn = { ranks: [], band: false, highlighted: null, markers: [], ymax: null };
    if (!c) {
      this.caption.textContent = "";
      return;
    }
    const span = this.span();
    this.scaleTo(span);
    this.drawAxis(ctx, colors);
    ctx.save();
    ctx.beginPath();
    ctx.rect(this.left, 0, this.w - this.left, STEPS_H);
    ctx.clip();
    this.time.drawGrid(ctx, PAD_TOP, STEPS_H - PAD_BOTTOM, colors.line); // the heatmap's ticks
    ctx.lineJoin = "round";
    this.drawRanks(ctx, d, colors, span);
    this.line(ctx, c.typical50, span, colors.fg, 2, []);
    this.line(ctx, c.typical95, span, colors.fg, 1, [4, 3]);
    if (highlight !== null && c.p50[highlight]) {
      this.line(ctx, c.p50[highlight], span, colors.accent, 2, []);
      this.line(ctx, c.p95[highlight], span, colors.accent, 1.5, [4, 3]);
      this.drawn.highlighted = d.ranks[highlight];
    }
    ctx.restore();
    drawMarkers(ctx, this.time, d.markers, { y0: 0, y1: STEPS_H, left: this.left, right: this.w, labels: true });
    for (const m of d.markers) this.drawn.markers.push({ t: m.t, kind: m.kind, x: this.time.x(m.t) });
    this.drawn.ymax = this.ymax;
    this.caption.textContent = this.captionText(d, highlight);
  }

  // Every rank's median: a faint line each, or the band of them all.
  drawRanks(ctx, d, colors, span) {
    const c = this.curves;
    ctx.strokeStyle = colors.muted;
    ctx.fillStyle = colors.muted;
    ctx.globalAlpha = d.ranks.length > 16 ? 0.25 : 0.45;
    ctx.lineWidth = 1;
    if (c.band) {
      this.fillBand(ctx, c.band, span);
      this.drawn.band = true;
    } else {
      c.p50.forEach((values, row) => {
        if (this.stroke(ctx, values, span)) this.drawn.ranks.push(d.ranks[row]);
      });
    }
    ctx.globalAlpha = 1;
  }

  // The area between `band.lo` and `band.hi`, one polygon per run of buckets with values.
  fillBand(ctx, { lo, hi }, [b0, b1]) {
    ctx.beginPath();
    for (let i = b0; i < b1; ) {
      if (!Number.isFinite(lo[i])) {
        i++;
        continue;
      }
      let j = i;
      while (j + 1 < b1 && Number.isFinite(lo[j + 1])) j++;
      ctx.moveTo(this.x(i), this.y(hi[i]));
      for (let k = i + 1; k <= j; k++) ctx.lineTo(this.x(k), this.y(hi[k]));
      for (let k = j; k >= i; k--) ctx.lineTo(this.x(k), this.y(lo[k]));
      ctx.closePath();
      i = j + 1;
    }
    ctx.fill();
  }

  line(ctx, values, span, color, width, dash) {
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    ctx.setLineDash(dash);
    this.stroke(ctx, values, span);
    ctx.setLineDash([]);
    ctx.lineWidth = 1;
  }

  drawAxis(ctx, colors) {
    ctx.font = "10px Roboto, Arial, sans-serif";
    ctx.textBaseline = "middle";
    ctx.strokeStyle = colors.line;
    ctx.fillStyle = colors.muted;
    ctx.beginPath();
    for (const f of [0, 0.5, 1]) {
      const y = Math.round(this.y(f * this.ymax)) + 0.5;
      ctx.moveTo(this.left, y);
      ctx.lineTo(this.w, y);
      ctx.fillText(f ? formatDuration(f * this.ymax) : "0 s", 6, y);
    }
    ctx.stroke();
  }

  captionText(d, highlight) {
    const what = this.curves.recorded ? "median" : "mean (no quantiles recorded)";
    const rank = highlight === null ? "" : ` · rank ${d.ranks[highlight]} highlighted`;
    return `Step time per rank: grey each rank's ${what}, bold the median rank's, dashed its p95${rank}`;
  }

  // Whether `row`'s own curves are here (past the band threshold, only the highlighted ranks').
  has(row) {
    return Boolean(this.curves && this.curves.p50[row]);
  }

  // The bucket at pixel `px`, or -1.
  binAt(px) {
    const c = this.curves;
    if (!c || px < this.left) return -1;
    const bin = Math.floor((this.time.timeAt(px) - c.t0) / c.binS);
    return bin >= 0 && bin < c.bins ? bin : -1;
  }

  // The row whose median curve passes nearest (px, py), within a few pixels; else null.
  rowNear(px, py) {
    const bin = this.binAt(px);
    if (bin < 0 || !this.ymax) return null;
    let best = null;
    let dist = NEAR_PX;
    this.curves.p50.forEach((values, row) => {
      const v = values ? values[bin] : NaN; // a rank without its curves here is not near
      if (Number.isFinite(v) && Math.abs(this.y(v) - py) <= dist) {
        dist = Math.abs(this.y(v) - py);
        best = row;
      }
    });
    return best;
  }

  // Where `event` points: the row whose curve is there (or null) and the tooltip's lines (or
  // null off the data). `d`: the payload, or null before one.
  pointAt(event, d) {
    const rect = this.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    if (!d || !this.curves) return { row: null, lines: null };
    const row = this.rowNear(px, event.clientY - rect.top);
    return { row, lines: this.tooltip(d, px, row) };
  }

  // The tooltip's lines at pixel `px` for `row` (or null): a marker there, the bucket, the
  // row's median and p95, and the median rank's.
  tooltip(d, px, row) {
    const bin = this.binAt(px);
    if (bin < 0) return null;
    const c = this.curves;
    const from = c.t0 + bin * c.binS;
    const s = (v) => (Number.isFinite(v) ? formatDuration(v) : "–");
    const lines = [`${formatTime(from)}–${formatTime(from + c.binS)}`, el("br")];
    if (row !== null) {
      lines.unshift(el("b", { text: `rank ${d.ranks[row]}` }), el("br"));
      lines.push(`step median ${s(c.p50[row][bin])}, p95 ${s(c.p95[row][bin])}`, el("br"));
    }
    lines.push(el("span", { class: "tl-dim", text: `median rank: ${s(c.typical50[bin])}, p95 ${s(c.typical95[bin])}` }));
    const marker = d.markers.find((m) => Math.abs(this.time.x(m.t) - px) <= 3);
    if (marker) lines.unshift(el("b", { text: `${formatTime(marker.t)} ${marker.label}` }), el("br"));
    return lines;
  }
}
