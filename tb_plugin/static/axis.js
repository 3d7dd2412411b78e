// The time axis both views share: a time window mapped onto a strip of pixels, its zoom and pan
// limits, the ticks (on round steps of the local clock) and the drawn axis with its labels. The
// Timeline (timeline.js, draw.js) and the Ranks view (panels/ranks.js) differ only in where the
// strip starts (`left`) and how tall their axis is.

import { formatDuration, formatTime } from "./format.js";

const TICK_STEPS = [
  0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
  900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
];
const TICK_PX = 110; // about one labelled tick this many pixels apart
const WHEEL_ZOOM = 0.0015; // per wheel delta unit, on a log scale

// A time window {start, end} (epoch seconds) drawn over `width` pixels from x = `left`.
export class TimeAxis {
  constructor(left = 0) {
    this.left = left;
    this.width = 1;
    this.view = null;
  }

  x(t) {
    return this.left + ((t - this.view.start) / (this.view.end - this.view.start)) * this.width;
  }

  timeAt(px) {
    return this.view.start + ((px - this.left) / this.width) * (this.view.end - this.view.start);
  }

  // Seconds per pixel.
  perPixel() {
    return (this.view.end - this.view.start) / this.width;
  }

  // The window zoomed by `factor` (< 1: in) around pixel `px`.
  zoomed(factor, px = this.left + this.width / 2) {
    const t = this.timeAt(px);
    return { start: t - (t - this.view.start) * factor, end: t + (this.view.end - t) * factor };
  }

  // The window panned by `px` pixels (> 0: later).
  panned(px) {
    const dt = px * this.perPixel();
    return { start: this.view.start + dt, end: this.view.end + dt };
  }

  // `view` (where a drag started) moved with the pointer by `dx` pixels.
  dragged(view, dx) {
    const dt = (dx / this.width) * (view.end - view.start);
    return { start: view.start - dt, end: view.end - dt };
  }

  // The times of the ticks in view, on one step of TICK_STEPS aligned to the local clock (a
  // 1-hour step lands on the hour in the user's zone), and that step.
  ticks() {
    const { start, end } = this.view;
    const target = (end - start) / Math.max(1, this.width / TICK_PX);
    const step = TICK_STEPS.find((s) => s >= target) || TICK_STEPS[TICK_STEPS.length - 1];
    const offset = new Date(start * 1000).getTimezoneOffset() * -60;
    const out = [];
    for (let t = Math.ceil((start + offset) / step) * step - offset; t <= end; t += step) out.push(t);
    return { step, times: out };
  }

  // The axis in a strip of `height` pixels at the top of `ctx`: ticks and their labels, the
  // date where the day changes, and (`rule`) a line under them; `colors` are the stylesheet's
  // (host.js followTheme).
  draw(ctx, height, colors, { rule = true } = {}) {
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, this.left + this.width, height);
    const { step, times } = this.ticks();
    ctx.font = "11px Roboto, Arial, sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillStyle = colors.muted;
    ctx.strokeStyle = colors.muted;
    ctx.beginPath();
    let lastDay = null;
    for (const t of times) {
      const x = Math.round(this.x(t)) + 0.5;
      if (x < this.left) continue;
      ctx.moveTo(x, height - 6);
      ctx.lineTo(x, height);
      const day = new Date(t * 1000).toDateString();
      const label = formatTime(t, day !== lastDay && (lastDay !== null || step >= 3600), step < 1);
      lastDay = day;
      ctx.fillText(label, x + 3, (height - 6) / 2);
    }
    ctx.stroke();
    if (!rule) return;
    ctx.strokeStyle = colors.line;
    ctx.beginPath();
    ctx.moveTo(0, height - 0.5);
    ctx.lineTo(this.left + this.width, height - 0.5);
    ctx.stroke();
  }

  // Vertical grid lines at the ticks, from y0 to y1.
  drawGrid(ctx, y0, y1, color) {
    ctx.strokeStyle = color;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const t of this.ticks().times) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, y0);
      ctx.lineTo(x, y1);
    }
    ctx.stroke();
  }

  // Where the window starts and how wide it is, for a caption.
  caption() {
    return `${formatTime(this.view.start, true)}\nspan ${formatDuration(this.view.end - this.view.start)}`;
  }
}

// The zoom factor of one wheel event (> 1: out).
export const wheelFactor = (event) => Math.exp(event.deltaY * WHEEL_ZOOM);

// A window of `start`..`end` with its span clamped to [min, max], about the same middle.
export function clampSpan(start, end, min, max) {
  const span = Math.min(Math.max(end - start, min), max);
  const mid = (start + end) / 2;
  return { start: mid - span / 2, end: mid + span / 2 };
}

// Whether a view moved to `view` should fetch again: it leaves the window loaded, [w0, w1],
// the data loaded is `coarse` (bucketed) over a window more than 3x wider than the view, or
// (with `margin`) the loaded window leaves the view almost no room to pan into.
export function wantsDetail(view, [w0, w1], { coarse, margin = false }) {
  const ratio = (w1 - w0) / (view.end - view.start);
  return view.start < w0 || view.end > w1 || (coarse && ratio > 3) || (margin && ratio < 1.2);
}
