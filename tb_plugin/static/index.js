// Timeline dashboard: swimlanes of rendezvous, agent and worker events drawn on a canvas.
//
// TensorBoard loads this module in an iframe and calls render(). Data comes from the plugin's
// routes as columnar base64 typed arrays (api.js), state colours included; everything taken from
// an event is shown through textContent (never HTML), so a message can never inject markup.
// Modules: timeline.js (state, layout, fetching, zoom), draw.js (canvas), input.js (pointer and
// keys), host.js (the TensorBoard page), panels/ (what sits around the plot, and the Ranks view).

import { el } from "./dom.js";
import { followTheme, listenToHost } from "./host.js";
import { createAttempts } from "./panels/attempts.js";
import { createDetails } from "./panels/details.js";
import { createFilters } from "./panels/filters.js";
import { createLegend } from "./panels/legend.js";
import { createRanks } from "./panels/ranks.js";
import { Timeline } from "./timeline.js";

// The panels around the plot, each placed in its slot in this order (see timeline.js).
// The Ranks view (panels/ranks.js) sits under the toolbar and replaces the plot when toggled.
const PANELS = [createFilters, createLegend, createAttempts, createRanks, createDetails];

// The stylesheets: the page's, and the Ranks view's (which uses the page's colour variables).
const STYLESHEETS = ["style.css", "ranks.css"];

function addStylesheet(name) {
  return new Promise((resolve) => {
    const link = el("link", { rel: "stylesheet", href: `./static/${name}` });
    link.addEventListener("load", resolve);
    link.addEventListener("error", resolve);
    document.head.append(link);
  });
}

export async function render() {
  const stylesheet = Promise.all(STYLESHEETS.map(addStylesheet));
  const timeline = new Timeline(document.body, PANELS);
  // The first request goes out while the stylesheet loads; drawing waits for the styles.
  const first = timeline.refetch({ fit: true, ready: stylesheet });
  await stylesheet;
  followTheme((colors) => timeline.setColors(colors));
  listenToHost(() => timeline.refetch({}));
  await first;
  timeline.startPolling();
}
