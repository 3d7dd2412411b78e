// How counts, times, durations and sources read, the same in the header, axis, tooltip and panels.

export const KIND_TITLES = {
  rendezvous: "Rendezvous",
  agent: "Agents",
  worker: "Workers",
  monitor: "Monitor events",
};

export const count = (n, noun) => `${n.toLocaleString("en-US")} ${noun}${n === 1 ? "" : "s"}`;
const pad = (n, w = 2) => String(n).padStart(w, "0");

export function formatTime(t, withDate = false, ms = false) {
  const d = new Date(t * 1000);
  let s = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (ms) s += `.${pad(d.getMilliseconds(), 3)}`;
  if (withDate) s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${s}`;
  return s;
}

export function formatDuration(s) {
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

// How far the server's first read is: "Loading events… 42%", and with a `unit` how many of
// them ("(1,200 records of 3,000 read)").
export function loadingText(what, loading, unit = null) {
  const pct = loading.expected ? Math.floor((100 * loading.done) / loading.expected) : 0;
  const text = `Loading ${what}… ${pct}%`;
  if (!unit) return text;
  return `${text} (${count(loading.done, unit)} of ${loading.expected.toLocaleString("en-US")} read)`;
}
