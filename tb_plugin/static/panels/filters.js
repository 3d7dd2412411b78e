// The toolbar's filters: run, job, source and state menus, and the free-text search. The menus
// list what the payload's facets offer; a change sets the timeline's filter and fetches again.

import { Timer } from "../api.js";
import { el } from "../dom.js";
import { balanced, KIND_TITLES } from "../format.js";

export function createFilters(tl) {
  const runSelect = el("select", { title: "Run (directory in the logdir)" });
  const runIdSelect = el("select", { title: "Job (torchelastic run id)" });
  const kindSelect = el("select", { title: "Source of the events" });
  const stateSelect = el("select", { title: "State of the events" });
  const search = el("input", {
    type: "search",
    placeholder: "Search events…",
    "aria-label": "Search events",
  });
  const option = (value, text) => el("option", { value, text });
  kindSelect.append(option("", "All sources"));
  for (const kind of Object.keys(KIND_TITLES)) kindSelect.append(option(kind, KIND_TITLES[kind]));
  const onSelect = (select, key) =>
    select.addEventListener("change", () => tl.setFilter(key, select.value));
  onSelect(runSelect, "run");
  onSelect(runIdSelect, "run_id");
  onSelect(kindSelect, "kind");
  onSelect(stateSelect, "state");
  const typing = new Timer(); // searches once the typing pauses
  search.addEventListener("input", () => typing.set(() => tl.setFilter("q", search.value.trim()), 250));
  const field = (text, control) => {
    control.id = `tl-${text.toLowerCase()}`;
    return el("span", { class: "tl-field" }, el("label", { for: control.id, text }), control);
  };
  // A fragment: the fields sit directly among the toolbar's controls.
  const node = document.createDocumentFragment();
  node.append(
    field("Run", runSelect),
    field("Job", runIdSelect),
    field("Source", kindSelect),
    field("State", stateSelect),
    search
  );

  const fill = (select, values, allText, current, label = (v) => v) => {
    const signature = values.join("\u0000");
    if (select.dataset.signature !== signature) {
      select.replaceChildren(el("option", { value: "", text: allText }));
      for (const v of values) select.append(el("option", { value: v, text: balanced(label(v)) }));
      select.dataset.signature = signature;
    }
    select.value = current;
  };

  return {
    slot: "toolbar",
    node,
    update(data) {
      const f = tl.filters;
      fill(runSelect, data.facets.runs, "All runs", f.run, (v) => v || ".");
      fill(runIdSelect, data.facets.run_ids, "All jobs", f.run_id);
      fill(stateSelect, data.facets.states, "All states", f.state);
      kindSelect.value = f.kind;
    },
  };
}
