// The pointer on a time plot, the same in both views: the wheel zooms around the pointer (with
// shift, or a sideways wheel, it pans), a drag of more than a few pixels pans, a press without
// one is a click, and any other move is a hover.

import { wheelFactor } from "./axis.js";

const DRAG_PX = 3; // a press that moves less than this is a click

// `canvas`'s wheel and mouse, handed to `on`: {ready() (a view to move, else the wheel scrolls
// the page), zoom(factor, px), pan(px), grab() (what a drag starts from), drag(grabbed, dx, dy),
// hover(event), click(event), leave()}.
export function bindPlotPointer(canvas, on) {
  let drag = null;
  const wheel = (event) => {
    if (!on.ready()) return;
    event.preventDefault();
    const px = event.clientX - canvas.getBoundingClientRect().left;
    if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
      on.pan(event.shiftKey ? event.deltaY || event.deltaX : event.deltaX);
    } else {
      on.zoom(wheelFactor(event), px);
    }
  };
  canvas.addEventListener("wheel", wheel, { passive: false });
  canvas.addEventListener("mousedown", (event) => {
    if (event.button !== 0 || !on.ready()) return;
    drag = { x: event.clientX, y: event.clientY, moved: false, grabbed: on.grab() };
    canvas.classList.add("dragging");
  });
  window.addEventListener("mousemove", (event) => {
    if (!drag) {
      on.hover(event);
      return;
    }
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > DRAG_PX) drag.moved = true;
    if (drag.moved) on.drag(drag.grabbed, dx, dy);
  });
  window.addEventListener("mouseup", (event) => {
    if (!drag) return;
    const click = !drag.moved;
    drag = null;
    canvas.classList.remove("dragging");
    if (click) on.click(event);
  });
  canvas.addEventListener("mouseleave", () => on.leave());
}

// Show `tip` beside the pointer, kept inside the window.
export function placeTooltip(tip, event) {
  tip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  const y = Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${Math.max(4, y)}px`;
}
