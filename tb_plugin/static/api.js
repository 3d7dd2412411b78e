// Data access: the plugin's routes (relative to the iframe's <base>), and a timeline payload's
// base64 columns decoded into typed arrays, indexed by lane for drawing and hit-testing.

async function getJson(url) {
  const res = await fetch(url);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

// One window of the timeline; `params` is the query string. Throws with the server's message.
export const fetchTimeline = (params) => getJson(`./timeline?${params}`);

// Every field of one event, for the details panel. Throws with the server's message.
export const fetchEvent = (id) => getJson(`./event?id=${encodeURIComponent(id)}`);

// {generation, loading}, or null when the server answers with an error.
export async function fetchStatus() {
  const res = await fetch("./status");
  if (!res.ok) return null;
  return res.json();
}

function decode(b64, Type) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

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

// The payload with its columns as typed arrays: `events` or `buckets` (with `laneStart`), and
// `intervals` (with their own `laneStart` and `order`). `states[i]` is drawn in `colors[i]`.
export function decodePayload(payload) {
  const d = { ...payload };
  if (payload.mode === "events") {
    const e = payload.events;
    d.events = {
      count: e.count,
      t: decode(e.t, Float64Array),
      lane: decode(e.lane, Uint32Array),
      state: decode(e.state, Uint16Array),
      id: decode(e.id, Uint32Array),
      name: decode(e.name, Uint32Array),
      msg: decode(e.msg, Uint32Array),
      names: e.names,
      msgs: e.msgs,
    };
    d.laneStart = offsets(d.events.lane, payload.lanes.length);
  } else {
    const b = payload.buckets;
    d.buckets = {
      count: b.count,
      bins: b.bins,
      binWidth: b.bin_width,
      lane: decode(b.lane, Uint32Array),
      bin: decode(b.bin, Uint32Array),
      n: decode(b.n, Uint32Array),
      state: decode(b.state, Uint16Array),
    };
    d.laneStart = offsets(d.buckets.lane, payload.lanes.length);
    let max = 1;
    for (const n of d.buckets.n) if (n > max) max = n;
    d.buckets.logMax = Math.log(max + 1);
  }
  const iv = payload.intervals;
  d.intervals = {
    count: iv.count,
    lane: decode(iv.lane, Uint32Array),
    t0: decode(iv.t0, Float64Array),
    t1: decode(iv.t1, Float64Array),
    state: decode(iv.state, Uint16Array),
    label: decode(iv.label, Uint32Array),
    open: decode(iv.open, Uint16Array),
  };
  // Each lane's intervals, in payload order: a frame and a hover visit only their lanes'.
  d.intervals.laneStart = offsets(d.intervals.lane, payload.lanes.length);
  d.intervals.order = laneOrder(d.intervals.lane, d.intervals.laneStart);
  // Complete data needs no refetch on zoom: every filtered event of the job is here.
  d.complete = payload.mode === "events" && payload.in_window === payload.total;
  return d;
}
