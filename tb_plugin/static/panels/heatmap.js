// The Ranks heatmap's colours: the server's diverging scale (tb_plugin/ranks.py `scale`) as a
// 256-entry lookup table, a grid of one-byte levels as one image through it, and the key.

import { el } from "../dom.js";

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

export class HeatColors {
  // `scale`: {min, max, colors} from the server.
  constructor(scale) {
    this.scale = scale;
    this.lut32 = new Uint32Array(lookupTable(scale).buffer);
  }

  // Whether these colours are the ones of `scale` (a payload's).
  fits(scale) {
    return scale.colors.join() === this.scale.colors.join();
  }

  // The relative score a level stands for (the inverse of tb_plugin.ranks.levels).
  scoreOf(level) {
    return Math.pow(this.scale.max, (level - 128) / 127);
  }

  // `cells` (rows x bins levels, row-major) as an image of one pixel per cell, or null if empty.
  image(cells, bins, rows) {
    if (!rows || !bins) return null;
    const canvas = document.createElement("canvas");
    canvas.width = bins;
    canvas.height = rows;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(bins, rows);
    const px = new Uint32Array(img.data.buffer);
    for (let i = 0; i < cells.length; i++) px[i] = this.lut32[cells[i]];
    ctx.putImageData(img, 0, 0);
    return canvas;
  }

  // The key's nodes: the faster end, the gradient, the slower end.
  key() {
    const gradient = el("span", { class: "tl-ranks-gradient" });
    gradient.style.background = `linear-gradient(to right, ${this.scale.colors.join(", ")})`;
    return [
      el("span", { text: `×${this.scale.min} faster` }),
      gradient,
      el("span", { text: `×${this.scale.max} slower than the median rank` }),
    ];
  }
}
