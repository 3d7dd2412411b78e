// The Ranks view's job picker: where the logdir holds several jobs (two jobs under torchrun's
// default run id "none" are told apart by their start, "none@HH:MM:SS"), the server scores
// one job's ranks at a time (tb_plugin/rank_jobs.py) and the view asks for the one picked here;
// shown only when there is more than one. The payload lists the jobs and names the one shown.

import { el } from "../dom.js";
import { balanced, count, formatTime } from "../format.js";

export class JobPicker {
  // `onPick(job)`: a job was chosen.
  constructor(onPick) {
    this.job = null; // the job asked for; null: the server's default, the newest
    // Named apart from the Timeline's "Job" filter (a run id): this one picks a job to score.
    this.select = el("select", { class: "tl-ranks-job", "aria-label": "Ranks of job", title: "The job whose ranks are shown" });
    this.select.addEventListener("change", () => {
      this.job = this.select.value;
      onPick(this.job);
    });
    this.node = el("label", { class: "tl-ranks-job-pick", hidden: "" }, "Ranks of ", this.select);
  }

  // The payload's `jobs` and `job` (the one shown).
  load(d) {
    const jobs = d.jobs || [];
    this.node.hidden = jobs.length < 2;
    if (this.node.hidden) return;
    const options = jobs.map((j) => {
      const started = j.start === null ? "" : ` · started ${formatTime(j.start)}`;
      return el("option", { value: j.job, text: `${balanced(j.job)}${started} · ${count(j.ranks, "rank")}` });
    });
    this.select.replaceChildren(...options);
    this.select.value = d.job;
  }
}
