// The time axis both views share: a time window mapped onto a strip of pixels, its zoom and pan
// limits, the ticks (on round steps of the local clock and calendar: up to weeks, then months,
// then years, so a view of years labels years) and the drawn axis with its labels. The
// Timeline (timeline.js, draw.js) and the Ranks view (panels/ranks.js) differ only in where the
// strip starts (`left`) and how tall their axis is.

import { formatDuration, formatTime } from "./format.js";

const DAY = 86400;
const TICK_STEPS = [
  0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
  900, 1800, 3600, 7200, 10800, 21600, 43200, DAY, 2 * DAY, 7 * DAY,
];
// Past a week, ticks fall on the first of every k-th month, then on the first of January of
// every k-th year (lengths are the average month's and year's, for choosing k).
const MONTH_S = 30.44 * DAY;
const MONTH_STEPS = [1, 2, 3, 6];
const YEAR_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
const TICK_PX = 110; // about one labelled tick this many pixels apart
export const AXIS_FONT = "11px Roboto, Arial, sans-serif";
const LABEL_DX = 3; // a label starts this far right of its tick
const LABEL_GAP = 4; // and at least this far right of the label before it
const pad2 = (n) => String(n).padStart(2, "0");
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

  // The times of the ticks in view and their step (seconds; a month's or year's average past
  // a week) and unit: a step of TICK_STEPS aligned to the local clock (a 1-hour step lands on
  // the hour in the user's zone), or every k-th month or year of the local calendar.
  ticks() {
    const { start, end } = this.view;
    const target = (end - start) / Math.max(1, this.width / TICK_PX);
    const step = TICK_STEPS.find((s) => s >= target);
    if (step !== undefined) {
      const offset = new Date(start * 1000).getTimezoneOffset() * -60;
      const out = [];
      for (let t = Math.ceil((start + offset) / step) * step - offset; t <= end; t += step) out.push(t);
      return { step, unit: "s", times: out };
    }
    const months = MONTH_STEPS.find((k) => k * MONTH_S >= target);
    if (months !== undefined) return { step: months * MONTH_S, unit: "month", times: calendarTicks(start, end, months) };
    const years = YEAR_STEPS.find((k) => 12 * k * MONTH_S >= target) || YEAR_STEPS[YEAR_STEPS.length - 1];
    return { step: 12 * years * MONTH_S, unit: "year", times: calendarTicks(start, end, 12 * years) };
  }

  // Each tick's x and label: the time (with the date where the day changes), the date alone
  // for steps of days, the month or the year past that. Given `measure` (text -> px), a label
  // that would overlap the one before it is left out (a wide font), its tick kept.
  labels(measure = null) {
    const { step, unit, times } = this.ticks();
    const out = [];
    let lastDay = null;
    let free = -Infinity; // where the previous label ends
    for (const t of times) {
      const x = Math.round(this.x(t)) + 0.5;
      if (x < this.left) continue;
      const d = new Date(t * 1000);
      let text;
      if (unit === "year") text = String(d.getFullYear());
      else if (unit === "month") text = `${d.getFullYear()}-${pad2(d.getMonth() + 1)}`;
      else if (step >= DAY) text = `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}`;
      else {
        const day = d.toDateString();
        text = formatTime(t, day !== lastDay && (lastDay !== null || step >= 3600), step < 1);
        lastDay = day;
      }
      if (measure === null) out.push({ t, x, text });
      else if (x + LABEL_DX >= free) {
        out.push({ t, x, text });
        free = x + LABEL_DX + measure(text) + LABEL_GAP;
      }
    }
    return out;
  }

  // The axis in a strip of `height` pixels at the top of `ctx`: ticks and their labels, the
  // date where the day changes, and (`rule`) a line under them; `colors` are the stylesheet's
  // (host.js followTheme).
  draw(ctx, height, colors, { rule = true } = {}) {
    ctx.fillStyle = colors.bg;
    ctx.fillRect(0, 0, this.left + this.width, height);
    ctx.font = AXIS_FONT;
    ctx.textBaseline = "middle";
    ctx.fillStyle = colors.muted;
    ctx.strokeStyle = colors.muted;
    ctx.beginPath();
    for (const { x } of this.labels()) {
      ctx.moveTo(x, height - 6);
      ctx.lineTo(x, height);
    }
    for (const { x, text } of this.labels((label) => ctx.measureText(label).width)) {
      ctx.fillText(text, x + LABEL_DX, (height - 6) / 2);
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

// The first of every `months`-th month (of the year: January, and every `months` after it) of
// the local calendar from `start` to `end`, as epoch seconds.
function calendarTicks(start, end, months) {
  const from = new Date(start * 1000);
  let month = Math.ceil((from.getFullYear() * 12 + from.getMonth()) / months) * months;
  const out = [];
  for (;;) {
    const t = new Date(Math.floor(month / 12), month % 12, 1).getTime() / 1000;
    if (t > end) return out;
    if (t >= start) out.push(t);
    month += months;
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
