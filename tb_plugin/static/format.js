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

// ---------------------------------------------------------------- user text and bidi

// Text an event recorded (a host name, a run id, a message) may hold bidi controls: an override
// (U+202E) left open reorders everything after it on the line, so a FAILED attempt could read
// as SUCCEEDED. Such text is shown isolated (isolate() in a string, userText() in dom.js as a
// <bdi>) and balanced first: a stray closer (U+2069) would end the isolation early. A line of
// its own (a <select>'s option) needs it balanced only: nothing of it outlives the text.
const EMBEDDINGS = "\u202a\u202b\u202d\u202e"; // LRE RLE LRO RLO, closed by PDF
const ISOLATES = "\u2066\u2067\u2068"; // LRI RLI FSI, closed by PDI
const PDF = "\u202c";
const PDI = "\u2069";
const BIDI_CONTROL = /[\u202a-\u202e\u2066-\u2069]/;
const PARAGRAPH_END = /([\n\r\x1c-\x1e\x85\u2029])/; // bidi resets after each

// One paragraph with every scope it opens closed at its end, and an FSI before it for each
// closer that would close a scope opened outside it.
function balancedParagraph(text) {
  const closers = [];
  let stray = 0;
  for (const ch of text) {
    if (EMBEDDINGS.includes(ch)) closers.push(PDF);
    else if (ISOLATES.includes(ch)) closers.push(PDI);
    else if (ch === PDF && closers[closers.length - 1] === PDF) closers.pop();
    else if (ch === PDI) {
      const at = closers.lastIndexOf(PDI);
      if (at < 0) stray++; // it closes an FSI put before the text: every scope so far ends
      closers.length = Math.max(at, 0);
    }
  }
  return "\u2068".repeat(stray) + text + closers.reverse().join("");
}

// `text` with its bidi controls balanced (unchanged when it has none): it opens no scope that
// outlives it and closes none it did not open.
export function balanced(text) {
  text = String(text);
  if (!BIDI_CONTROL.test(text)) return text;
  return text.split(PARAGRAPH_END).map((part, i) => (i % 2 ? part : balancedParagraph(part))).join("");
}

// `text` as an isolate (FSI … PDI), for strings: titles, options, canvas labels, composed lines.
export const isolate = (text) => `\u2068${balanced(text)}\u2069`;

// A lane's label from its parts (the server's lane_labels.label_parts: ours and the records' in
// turn) as a string, each of the records' isolated on its own: a host name's override cannot turn
// the "(pid 4242)" after it around, as isolating the label whole would let it (dom.js labelNodes
// is the same in the DOM).
export const labelText = (parts) => parts.map((part, i) => (i % 2 ? isolate(part) : part)).join("");

// How far the server's first read is: "Loading events… 42%", and with a `unit` (the noun of
// what it reads) how many of them ("(1,200 records of 3,000 read)"); a read that counts the
// event files' bytes (`loading.unit` "byte") says so in MB ("(12 MB of 337 MB read)").
export function loadingText(what, loading, unit = null) {
  const pct = loading.expected ? Math.floor((100 * loading.done) / loading.expected) : 0;
  const text = `Loading ${what}… ${pct}%`;
  if (!unit) return text;
  if (loading.unit === "byte") {
    return `${text} (${megabytes(loading.done)} of ${megabytes(loading.expected)} read)`;
  }
  return `${text} (${count(loading.done, unit)} of ${loading.expected.toLocaleString("en-US")} read)`;
}

// Bytes in decimal megabytes, a tenth shown below 10 MB: "0.4 MB", "337 MB".
const megabytes = (n) =>
  `${(n / 1e6).toLocaleString("en-US", { maximumFractionDigits: n < 1e7 ? 1 : 0 })} MB`;
