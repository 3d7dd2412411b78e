// Data access for both views: the plugin's routes (relative to the iframe's <base>), the
// payloads' base64 columns decoded into typed arrays, and the polling both views do (only the
// newest request's reply counts; polls pause while the page is hidden).

// The reply's JSON; an error reply throws with the server's message, and with `retryAfterMs`
// when the server is still reading what was asked (a 503 with Retry-After).
async function getJson(url) {
  const res = await fetch(url);
  const body = await res.json();
  if (!res.ok) {
    const err = new Error(body.error || res.statusText);
    const retryAfter = res.headers.get("Retry-After");
    if (res.status === 503 && retryAfter !== null) err.retryAfterMs = 1000 * (Number(retryAfter) || 0);
    throw err;
  }
  return body;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One window of the timeline; `params` is the query string. Throws with the server's message.
export const fetchTimeline = (params) => getJson(`./timeline?${params}`);

// One window of the Ranks heatmap; `params` is the query string. Throws like fetchTimeline.
export const fetchRanks = (params) => getJson(`./ranks?${params}`);

// Every field of one event, for the details panel. While the server is still reading its
// records (503, Retry-After) it asks again after the wait, telling `onWait(message)` first, for
// as long as `wanted()` holds (null once it does not). Throws with the server's message.
export async function fetchEvent(id, { wanted = () => true, onWait = () => {} } = {}) {
  for (;;) {
    try {
      return await getJson(`./event?id=${encodeURIComponent(id)}`);
    } catch (err) {
      if (err.retryAfterMs === undefined) throw err;
      onWait(err.message);
      await sleep(err.retryAfterMs);
      if (!wanted()) return null;
    }
  }
}

// {generation, loading}, or null when the server answers with an error.
export async function fetchStatus() {
  const res = await fetch("./status");
  if (!res.ok) return null;
  return res.json();
}

// ---------------------------------------------------------------- polling

// While the server is still reading a job's first records, a view asks again this soon (ms).
export const LOADING_POLL_MS = 700;

// Run `fn` every `ms` while the page is visible and `when()` holds.
export function every(ms, fn, when = () => true) {
  return setInterval(() => {
    if (!document.hidden && when()) fn();
  }, ms);
}

// One pending timeout at a time: setting it again replaces it (a retry, a debounce).
export class Timer {
  constructor() {
    this.id = null;
  }

  get pending() {
    return this.id !== null;
  }

  set(fn, ms) {
    this.clear();
    this.id = setTimeout(() => {
      this.id = null;
      fn();
    }, ms);
  }

  clear() {
    clearTimeout(this.id);
    this.id = null;
  }
}

// A view's requests of one route, of which only the newest counts.
export class Latest {
  constructor(fetchJson) {
    this.fetchJson = fetchJson;
    this.seq = 0;
  }

  // The reply to `params`, or null when a newer request went out before it came (or, given
  // `ready`, before that promise resolved). A failure throws only when it is the newest's.
  async get(params, ready = null) {
    const seq = ++this.seq;
    let payload;
    try {
      payload = await this.fetchJson(params);
    } catch (err) {
      if (seq === this.seq) throw err;
      return null;
    }
    await ready;
    return seq === this.seq ? payload : null;
  }
}

// ---------------------------------------------------------------- decoding

// Base64 bytes as a typed array of `Type` (the server's little-endian columns).
export function decode(b64, Type = Uint8Array) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

// Each listed column of `part` decoded as its type, with its `count`.
function columns(part, types) {
  const out = { count: part.count };
  for (const [name, Type] of Object.entries(types)) out[name] = decode(part[name], Type);
  return out;
}

const EVENT_COLUMNS = {
  t: Float64Array,
  lane: Uint32Array,
  state: Uint16Array,
  id: Uint32Array,
  name: Uint32Array,
  msg: Uint32Array,
};
// A part whose columns each come in the narrowest unsigned type holding them, named in
// `part.types` (the server's `payloads.narrow`).
const UNSIGNED = { u1: Uint8Array, u2: Uint16Array, u4: Uint32Array };
function narrowColumns(part) {
  const out = { count: part.count };
  for (const [name, type] of Object.entries(part.types)) out[name] = decode(part[name], UNSIGNED[type]);
  return out;
}
const INTERVAL_COLUMNS = {
  lane: Uint32Array,
  t0: Float64Array,
  t1: Float64Array,
  state: Uint16Array,
  label: Uint32Array,
  open: Uint16Array,
};

// Where each lane's rows start in a column sorted (or counted) by lane: lane i is [s[i], s[i+1]).
function offsets(laneColumn, lanes) {
  const start = new Uint32Array(lanes + 1);
  for (let i = 0; i < laneColumn.length; i++) start[laneColumn[i] + 1]++;
  for (let i = 0; i < lanes; i++) start[i + 1] += start[i];
  return start;
}

// Indices of the rows sorted by lane (a stable counting sort over the lane offsets).
function laneOrder(laneColumn, laneStart) {
  const next = laneStart.slice(0, -1);
  const order = new Uint32Array(laneColumn.length);
  for (let i = 0; i < laneColumn.length; i++) order[next[laneColumn[i]]++] = i;
  return order;
}

// Binary search: first index in [lo, hi) of sorted `arr` with arr[i] >= value.
export function lowerBound(arr, value, lo, hi) {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// The payload's lanes, sent as columns (labels and their parts, ours and the records' in turn;
// group, kind and run as positions in the facets' run ids, the kinds and the facets' runs), as
// one object per lane. A label sent without parts is shown as the records' whole.
function laneObjects(payload) {
  const l = payload.lanes;
  const { run_ids: groups, runs } = payload.facets;
  return Array.from({ length: l.count }, (_, i) => ({
    label: l.label[i],
    parts: l.parts ? l.parts[i] : ["", l.label[i]],
    group: groups[l.group[i]],
    kind: payload.kinds[l.kind[i]],
    run: runs[l.run[i]],
  }));
}

// The timeline payload with its columns as typed arrays: `events` or `buckets` (with
// `laneStart`), and `intervals` (with their own `laneStart` and `order`). `states[i]` is drawn
// in `colors[i]`.
export function decodePayload(payload) {
  const d = { ...payload, lanes: laneObjects(payload) };
  const lanes = d.lanes.length;
  if (payload.mode === "events") {
    d.events = { ...columns(payload.events, EVENT_COLUMNS), names: payload.events.names, msgs: payload.events.msgs };
    d.laneStart = offsets(d.events.lane, lanes);
  } else {
    const b = payload.buckets;
    d.buckets = { ...narrowColumns(b), bins: b.bins, binWidth: b.bin_width };
    d.laneStart = d.buckets.lane_start;
    let max = 1;
    for (const n of d.buckets.n) if (n > max) max = n;
    d.buckets.logMax = Math.log(max + 1);
  }
  d.intervals = columns(payload.intervals, INTERVAL_COLUMNS);
  // Each lane's intervals, in payload order: a frame and a hover visit only their lanes'.
  d.intervals.laneStart = offsets(d.intervals.lane, lanes);
  d.intervals.order = laneOrder(d.intervals.lane, d.intervals.laneStart);
  // Complete data needs no refetch on zoom: every filtered event of the job is here.
  d.complete = payload.mode === "events" && payload.in_window === payload.total;
  return d;
}
