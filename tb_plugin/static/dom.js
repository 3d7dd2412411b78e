// Building DOM nodes. Text goes in through textContent only (never HTML), so a message taken
// from an event can never inject markup.

import { balanced } from "./format.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

// Text an event recorded, in a <bdi> of its own: its bidi controls reorder nothing around it
// (format.js balanced).
export const userText = (text, attrs = {}) => el("bdi", { ...attrs, text: balanced(text) });

// A lane's label from its parts (ours and the records' in turn, format.js labelText) as nodes:
// ours as text, each of the records' in a <bdi> of its own.
export const labelNodes = (parts) => parts.map((part, i) => (i % 2 ? userText(part) : part));

// Size `canvas` to `w` x `h` CSS pixels at the screen's pixel ratio (only when that changed:
// resizing clears it).
export function sizeCanvas(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  if (canvas.width === Math.round(w * dpr) && canvas.height === Math.round(h * dpr)) return;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
}
