// Canvas drawing of one frame: lane backgrounds and time grid, intervals, events or
// level-of-detail buckets, the selection, each attempt's header (on its job's Workers heading:
// outcome and duration), each root cause's mark and one-line reason on its lane, and the time
// axis. Colours are the payload's (`data.colors[state]`) and the stylesheet's (`tl.colors`);
// nothing here fetches or decides.

import { lowerBound } from "./api.js";
import { formatDuration, isolate } from "./format.js";

export const ROW_H = 20;
export const GROUP_H = 24;
export const AXIS_H = 30;
const ALPHA_LEVELS = 16; // shades of a level-of-detail bucket (by its event count)
const OPEN_DASH = [3, 2]; // the outline of an interval still in progress
const SOLID = [];

function batchOf(batches, key) {
  let p = batches.get(key);
  if (!p) batches.set(key, (p = []));
  return p;
}

// The per-colour coordinate lists of a frame: kept between frames so that a frame allocates
// nothing once they have grown.
const batchMap = new Map();

function emptyBatches() {
  for (const p of batchMap.values()) p.length = 0;
  return batchMap;
}

function visibleRows(tl) {
  const top = tl.scroll.scrollTop;
  const out = [];
  for (let i = 0; i < tl.rows.length; i++) {
    const r = tl.rows[i];
    if (r.y + r.h < top) continue;
    if (r.y > top + tl.height) break;
    out.push(r);
  }
  return out;
}

export function drawPlot(tl) {
  const ctx = tl.canvas.getContext("2d");
  const dpr = window.devicePixelRatio || 1;
  const c = tl.colors;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = c.bg;
  ctx.fillRect(0, 0, tl.width, tl.height);
  if (!tl.data) return;
  const top = tl.scroll.scrollTop;
  const rows = visibleRows(tl);
  // Row backgrounds and the time grid.
  for (const r of rows) {
    const y = r.y - top;
    if (r.group) {
      ctx.fillStyle = c["header-bg"];
      ctx.fillRect(0, y, tl.width, r.h);
    } else if (tl.hover && tl.hover.row === r) {
      ctx.fillStyle = c.band;
      ctx.fillRect(0, y, tl.width, r.h);
    }
  }
  tl.time.drawGrid(ctx, 0, tl.height, c.line);
  const laneRows = rows.filter((r) => !r.group);
  const scale = 1 / tl.time.perPixel(); // pixels per second
  drawIntervals(tl, ctx, laneRows, top);
  if (tl.data.events) drawEvents(tl, ctx, laneRows, top, scale);
  else drawBuckets(tl, ctx, laneRows, top, scale);
  drawAttempts(tl, ctx, rows, top);
}

function colorOf(data, state) {
  const i = data.states.indexOf(state);
  return i >= 0 ? data.colors[i] : null;
}

// Each attempt's header on its job's Workers heading, and its root cause on the failed rank's
// lane: a diamond at the time of the failure, then the one-line reason.
function drawAttempts(tl, ctx, rows, top) {
  const attempts = tl.data.attempts || [];
  if (!attempts.length) return;
  const c = tl.colors;
  ctx.font = "11px Roboto, Arial, sans-serif";
  ctx.textBaseline = "middle";
  for (const r of rows) {
    if (!r.group || r.kind !== "worker") continue;
    const y = r.y - top;
    for (const a of attempts) {
      if (a.job !== r.job || a.end < tl.view.start || a.start > tl.view.end) continue;
      const x0 = Math.max(0, tl.x(a.start));
      const x1 = Math.min(tl.width, tl.x(a.end));
      const color = colorOf(tl.data, a.outcome) || c.muted;
      ctx.fillStyle = color;
      ctx.fillRect(x0, y + r.h - 4, Math.max(2, x1 - x0), 3);
      if (x1 - x0 > 40) {
        ctx.fillStyle = c.fg;
        const text = `attempt ${a.attempt} · ${isolate(a.outcome)} · ${formatDuration(a.duration_s)}`;
        ctx.fillText(text, x0 + 4, y + r.h / 2 - 1, x1 - x0 - 8);
      }
    }
  }
  const failed = colorOf(tl.data, "FAILED") || c.accent;
  for (const a of attempts) {
    const cause = a.root_cause;
    if (!cause || cause.lane === undefined || cause.lane < 0) continue;
    const r = tl.rows[tl.rowOfLane[cause.lane]];
    if (!r || !rows.includes(r)) continue;
    if (cause.time < tl.view.start - 1e-9 || cause.time > tl.view.end) continue;
    const x = tl.x(cause.time);
    const y = r.y - top + ROW_H / 2;
    const s = ROW_H / 2 - 2;
    ctx.beginPath();
    ctx.moveTo(x, y - s);
    ctx.lineTo(x + s, y);
    ctx.lineTo(x, y + s);
    ctx.lineTo(x - s, y);
    ctx.closePath();
    ctx.fillStyle = failed;
    ctx.fill();
    ctx.strokeStyle = c.fg;
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineWidth = 1;
    const room = tl.width - (x + s + 6) - 4;
    if (room > 30) {
      const text = `root cause: ${isolate(cause.reason)}`;
      const w = Math.min(room, ctx.measureText(text).width);
      ctx.fillStyle = c.bg;
      ctx.globalAlpha = 0.85;
      ctx.fillRect(x + s + 4, y - 7, w + 4, 14);
      ctx.globalAlpha = 1;
      ctx.fillStyle = c.fg;
      ctx.fillText(text, x + s + 6, y + 0.5, room);
    }
  }
}

function drawIntervals(tl, ctx, rows, top) {
  const iv = tl.data.intervals;
  if (!iv.count) return;
  const colors = tl.data.colors;
  ctx.font = "11px Roboto, Arial, sans-serif";
  ctx.textBaseline = "middle";
  ctx.lineWidth = 1;
  const h = ROW_H - 6;
  for (const r of rows) {
    const y = r.y - top + 3;
    for (let k = iv.laneStart[r.lane]; k < iv.laneStart[r.lane + 1]; k++) {
      const i = iv.order[k];
      if (iv.t1[i] < tl.view.start || iv.t0[i] > tl.view.end) continue;
      const x0 = Math.max(-1, tl.x(iv.t0[i]));
      const x1 = Math.min(tl.width + 1, tl.x(iv.t1[i]));
      const w = Math.max(1, x1 - x0);
      const color = colors[iv.state[i]];
      ctx.globalAlpha = 0.28;
      ctx.fillStyle = color;
      ctx.fillRect(x0, y, w, h);
      ctx.globalAlpha = 1;
      ctx.strokeStyle = color;
      if (iv.open[i]) ctx.setLineDash(OPEN_DASH);
      ctx.strokeRect(Math.round(x0) + 0.5, y + 0.5, Math.max(1, Math.round(w) - 1), h - 1);
      if (iv.open[i]) ctx.setLineDash(SOLID);
      if (w > 70) {
        const text = tl.data.labels[iv.label[i]];
        ctx.fillStyle = tl.colors.fg;
        ctx.globalAlpha = 0.75;
        ctx.fillText(text, Math.max(x0, 0) + 5, y + h / 2 + 0.5, w - 10);
        ctx.globalAlpha = 1;
      }
    }
  }
}

function drawEvents(tl, ctx, rows, top, scale) {
  const { events: e, colors, laneStart: start } = tl.data;
  const v0 = tl.view.start;
  // One path per state colour: far fewer canvas state changes than one fill per mark.
  const paths = emptyBatches();
  const markW = scale * 0.05 > 3 ? 4 : 2;
  for (const r of rows) {
    const lo = lowerBound(e.t, v0 - 3 / scale, start[r.lane], start[r.lane + 1]);
    const hi = lowerBound(e.t, tl.view.end + 3 / scale, lo, start[r.lane + 1]);
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
    ctx.fillStyle = colors[s];
    ctx.beginPath();
    for (let k = 0; k < p.length; k += 2) ctx.rect(p[k] - markW / 2, p[k + 1], markW, h);
    ctx.fill();
  }
  drawSelection(tl, ctx, rows, top);
}

function drawSelection(tl, ctx, rows, top) {
  if (tl.selected === null || !tl.data.events) return;
  const e = tl.data.events;
  const i = e.id.indexOf(tl.selected);
  if (i < 0) return;
  const r = tl.rows[tl.rowOfLane[e.lane[i]]];
  if (!rows.includes(r)) return;
  const x = tl.x(e.t[i]);
  ctx.strokeStyle = tl.colors.accent;
  ctx.lineWidth = 2;
  ctx.strokeRect(x - 4, r.y - top + 2, 8, ROW_H - 4);
  ctx.lineWidth = 1;
}

// Level of detail in few canvas calls: neighbouring buckets of one colour and shade become one
// rect, buckets narrower than a pixel share their pixel column (the most severe state, their
// summed count), and each colour and shade is one path. Only the bins in view are visited.
function drawBuckets(tl, ctx, rows, top, scale) {
  const { buckets: b, colors, laneStart: start } = tl.data;
  const binW = b.binWidth * scale;
  const origin = (tl.data.window[0] - tl.view.start) * scale; // x of bin 0
  const firstBin = Math.floor(-origin / binW) - 1;
  const lastBin = Math.ceil((tl.width - origin) / binW);
  const subPixel = binW < 1;
  const darkest = ALPHA_LEVELS - 1;
  const shade = darkest / b.logMax;
  const batches = emptyBatches();
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
    ctx.fillStyle = colors[Math.floor(key / ALPHA_LEVELS)];
    ctx.beginPath();
    for (let k = 0; k < p.length; k += 3) ctx.rect(p[k], p[k + 1], p[k + 2], h);
    ctx.fill();
  }
  ctx.globalAlpha = 1;
}

// The time axis over the plot (axis.js), and where the window starts and how wide it is.
export function drawAxis(tl) {
  const ctx = tl.axisCanvas.getContext("2d");
  const dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  tl.time.draw(ctx, AXIS_H, tl.colors, { rule: false });
  tl.axisCorner.textContent = tl.time.caption();
}
