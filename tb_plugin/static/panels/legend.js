// The legend under the toolbar: a swatch per state present (a button that filters on it), the
// interval key and the controls hint. Colours are the server's (the payload's `colors`).

import { el } from "../dom.js";

export function createLegend(tl) {
  const node = el("div", { class: "tl-legend", "aria-label": "Legend" });

  function update(data) {
    const states = data.facets.states;
    const signature = states.join(",") + "|" + tl.filters.state;
    if (node.dataset.signature === signature) return;
    node.dataset.signature = signature;
    const colorOf = new Map(data.states.map((state, i) => [state, data.colors[i]]));
    const items = states.map((state) => {
      const b = el(
        "button",
        {
          type: "button",
          "aria-pressed": String(tl.filters.state === state),
          title: `Show only ${state} events`,
        },
        el("span", { class: "tl-swatch" }),
        state
      );
      b.firstChild.style.background = colorOf.get(state);
      b.addEventListener("click", () => tl.setFilter("state", tl.filters.state === state ? "" : state));
      return b;
    });
    const interval = el("span", { class: "tl-key" }, el("span", { class: "tl-swatch interval" }), "attempt / round");
    interval.firstChild.style.background = colorOf.get("RUNNING");
    const hint = el("span", {
      class: "tl-hint",
      text: "Wheel: zoom · Shift+wheel or drag: pan · +/−/←/→/0 keys",
    });
    node.replaceChildren(...items, interval, hint);
  }

  return { slot: "header", node, update };
}
