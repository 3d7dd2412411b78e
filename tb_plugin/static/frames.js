// Drawing a view at most once an animation frame, and how long each drawing took (a view's
// `stats.frames`, which the benchmark reads).

const KEPT = 500; // the newest frames' times kept

export class Frames {
  // `draw()` draws a whole frame; it returns false when there is nothing to draw yet.
  constructor(draw) {
    this.draw = draw;
    this.pending = 0;
    this.times = [];
  }

  // Draw at the next animation frame, once however often asked before it.
  request() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = 0;
      this.now();
    });
  }

  // Draw now, and keep the time it took.
  now() {
    const t0 = performance.now();
    if (this.draw() === false) return;
    this.times.push(performance.now() - t0);
    if (this.times.length > KEPT) this.times.shift();
  }
}
