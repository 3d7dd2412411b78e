"""Timeline records, decoded once into columns and served as compact windows.

TensorBoard's data provider hands back every record as a numpy-wrapped protobuf, which costs
about 10 µs a record; a 100k-event job would spend seconds per request. :class:`TimelineStore`
therefore decodes each (run, tag) once, keeps plain columns (time, lane, state, kind, ...) and, on
each refresh, reads only the series whose ``max_step`` moved and appends the records above the
step it already holds. Identical payloads (a node's keep-alive heartbeats, most of a long job's
records) are decoded once, and the provider is read in chunks so a query during a long first
decode answers with what is there. Queries filter those columns with numpy and return either every event in
the visible window or, when too many, per-lane time buckets (level of detail), as base64 typed
arrays the browser maps straight onto ``Float64Array``/``Uint32Array``.

Lanes and intervals are :mod:`tb_monitor.export`'s (``lane_of``, ``spans``), so the tab, the
Perfetto export and the notebook figure always agree.
"""

from __future__ import annotations

import array
import base64
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor import contract, timeline

__all__ = [
    "DETAIL_LIMIT",
    "Query",
    "QueryError",
    "TimelineStore",
    "UnknownEventError",
    "UnknownRunError",
]

#: Most events sent one by one for a window; above it, the window is bucketed per lane.
DETAIL_LIMIT = 150_000
#: Width, in pixels, of one level-of-detail bucket.
BUCKET_PX = 2
#: A refresh lists the provider's series at most this often (seconds); each request may trigger it.
REFRESH_INTERVAL_S = 1.0
#: About this many records are read from the provider at a time, so a first decode shows progress.
CHUNK_RECORDS = 50_000
#: Distinct payloads whose decoding is remembered; past it the memory starts over.
_MEMO_LIMIT = 100_000

#: States in the order their colour wins a bucket: the most alarming one shows.
STATE_SEVERITY = (
    "",
    "INIT",
    "START",
    "RUNNING",
    "RENDEZVOUS",
    "ASSIGN_WORKER_RANKS",
    "HEALTHY",
    "SUCCEEDED",
    "STOPPED",
    "TERMINATED",
    "UNHEALTHY",
    "FAILED",
)
_MAX_STEPS = 2**31 - 1


class QueryError(ValueError):
    """A request parameter the timeline cannot honour; the message names it."""


class UnknownRunError(QueryError):
    """A run filter naming a run that holds no timeline records."""


class UnknownEventError(LookupError):
    """An event id that the store does not hold."""


@dataclass(frozen=True)
class Query:
    """A window of the timeline with its filters, as validated from a request."""

    start: float | None = None
    end: float | None = None
    width: int = 1000
    run: str | None = None
    run_id: str | None = None
    kind: str | None = None
    state: str | None = None
    text: str | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> Query:
        """Validate request arguments; raise :class:`QueryError` naming the bad one."""
        start = _float_arg(args, "start")
        end = _float_arg(args, "end")
        if start is not None and end is not None and not start < end:
            raise QueryError(f"start {start!r} must be before end {end!r}")
        if start is not None and end is not None and not math.isfinite(end - start):
            raise QueryError(f"the window from {start!r} to {end!r} is too wide")
        width = args.get("width", "1000")
        if not width.isdecimal() or not 1 <= int(width) <= 20000:
            raise QueryError(f"width must be an integer from 1 to 20000, got {width!r:.80}")
        kind = args.get("kind") or None
        if kind is not None and kind not in contract.KINDS:
            raise QueryError(f"kind must be one of {contract.KINDS}, got {kind!r:.80}")
        state = args.get("state") or None
        if state is not None and not re.fullmatch(r"[A-Za-z_]{1,64}", state):
            raise QueryError(f"state must be a state name, got {state!r:.80}")
        text = args.get("q") or None
        if text is not None and len(text) > 500:
            raise QueryError(f"q must be at most 500 characters, got {len(text)}")
        return cls(
            start=start,
            end=end,
            width=int(width),
            run=args.get("run") or None,
            run_id=args.get("run_id") or None,
            kind=kind,
            state=state,
            text=text,
        )


def _float_arg(args: Mapping[str, str], name: str) -> float | None:
    raw = args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise QueryError(f"{name} must be a number, got {raw!r:.80}") from None
    if not math.isfinite(value):
        raise QueryError(f"{name} must be finite, got {raw!r:.80}")
    return value


class _Interner:
    """Values to dense ids, so columns hold small integers."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found


@dataclass(frozen=True)
class _Decoded:
    """One distinct record's interned columns, and its fields when it may bound an interval."""

    lane: int
    state: int
    kind: int
    run: int
    name: int
    msg: int
    text: int
    row: dict[str, Any] | None


@dataclass
class _Snapshot:
    """Numpy columns of every event at one generation, sorted by (lane order, time)."""

    t: np.ndarray
    lane: np.ndarray
    state: np.ndarray
    kind: np.ndarray
    run: np.ndarray
    text: np.ndarray
    name: np.ndarray
    msg: np.ndarray
    ids: np.ndarray  # position in the store's append-only columns
    lane_rank: np.ndarray  # lane id -> display position
    intervals: dict[str, np.ndarray]


def _b64(values: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def _column(values: array.array, dtype: type) -> np.ndarray:
    # A copy: the array keeps growing, and a buffer it exports could not be resized.
    return np.frombuffer(values, dtype=dtype).copy()


def _chunks(
    stale: dict[str, list[str]], listing: Mapping[str, Mapping[str, Any]], limit: int
) -> list[tuple[list[str], list[str], int]]:
    """Stale runs grouped into reads of about ``limit`` records: (runs, their tags, records)."""
    out: list[tuple[list[str], list[str], int]] = []
    runs: list[str] = []
    tags: set[str] = set()
    size = 0
    for run in sorted(stale):
        runs.append(run)
        tags.update(stale[run])
        size += sum(listing[run][tag].max_step + 1 for tag in stale[run])
        if size >= limit:
            out.append((runs, sorted(tags), size))
            runs, tags, size = [], set(), 0
    if runs:
        out.append((runs, sorted(tags), size))
    return out


class TimelineStore:
    """Every timeline record of one experiment, decoded once and extended as files grow.

    :meth:`refresh` may run on a background thread (:class:`tb_plugin.refresher.Refresher`) while
    requests query: it reads the provider in chunks outside the data lock, so a query during a
    long first decode answers at once with what is decoded so far (:meth:`loading` says how far).
    """

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._provider = data_provider
        self._eid = experiment_id
        self._clock = clock
        self._lock = threading.RLock()  # the columns, interners and snapshot
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._last_refresh = -math.inf
        self._last_step: dict[tuple[str, str], int] = {}
        self._listed: dict[tuple[str, str], int] = {}  # max_step at the previous listing
        self._progress: tuple[int, int] | None = None
        self.generation = 0
        # Append-only columns, one entry per record; an event's id is its position here.
        self._t = array.array("d")
        self._lane = array.array("q")
        self._state = array.array("q")
        self._kind = array.array("q")
        self._run = array.array("q")
        self._step = array.array("q")
        self._text = array.array("q")
        self._name = array.array("q")
        self._msg = array.array("q")
        self._lanes = _Interner()  # tb_monitor.timeline.Lane values
        self._lane_runs: list[str] = []  # the first run each lane was seen in
        self._runs = _Interner()
        self._states = _Interner()
        self._names = _Interner()
        self._msgs = _Interner()
        self._texts = _Interner()
        self._labels = _Interner()
        for state in STATE_SEVERITY:
            self._states(state)
        # Records that may open or close an interval, for timeline.spans: every one but the
        # keep-alive heartbeats, which are most of a long job's records and never do.
        self._span_rows: list[dict[str, Any]] = []
        # (run, kind, payload) -> its decoded columns: a node's heartbeats, most of a job's
        # records, are one identical rendezvous payload, decoded once.
        self._decoded: dict[tuple[str, str, Any], _Decoded] = {}
        self._snapshot: _Snapshot | None = None

    # -- ingestion -------------------------------------------------------------------------

    def refresh(self, ctx: Any, force: bool = False, settled_only: bool = False) -> int:
        """Read what is new since the last refresh; return the generation (bumped on change).

        ``settled_only`` reads only the series whose ``max_step`` has not moved since the
        previous listing: the provider hands back whole series, so a background warm-up that
        read each series while TensorBoard is still loading it would decode it many times.
        """
        with self._refresh_lock:
            now = self._clock()
            if not force and now - self._last_refresh < REFRESH_INTERVAL_S:
                return self.generation
            if not settled_only:  # a settled-only pass may leave growing series behind
                self._last_refresh = now
            listing = self._provider.list_tensors(
                ctx, experiment_id=self._eid, plugin_name=contract.PLUGIN_NAME
            )
            stale: dict[str, list[str]] = {}
            expected = 0
            for run, tags in listing.items():
                for tag, series in tags.items():
                    if contract.kind_of_tag(tag) is None:
                        continue
                    key = (run, tag)
                    listed, self._listed[key] = self._listed.get(key), series.max_step
                    if series.max_step <= self._last_step.get(key, -1):
                        continue
                    if settled_only and listed != series.max_step:
                        continue
                    stale.setdefault(run, []).append(tag)
                    expected += series.max_step + 1
            if stale:
                self._progress = (0, expected)
                try:
                    for runs, tags, size in _chunks(stale, listing, CHUNK_RECORDS):
                        self._read(ctx, runs, tags)
                        self._progress = (self._progress[0] + size, expected)
                finally:
                    self._progress = None
            return self.generation

    def refreshed_within(self, seconds: float) -> bool:
        """Whether a full refresh started less than ``seconds`` ago."""
        return self._clock() - self._last_refresh < seconds

    def loading(self) -> dict[str, int] | None:
        """How far a refresh that is reading records has come, or None when none is."""
        progress = self._progress
        return None if progress is None else {"done": progress[0], "expected": progress[1]}

    def _read(self, ctx: Any, runs: list[str], tags: list[str]) -> None:
        data = self._provider.read_tensors(
            ctx,
            experiment_id=self._eid,
            plugin_name=contract.PLUGIN_NAME,
            downsample=_MAX_STEPS,
            run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
        )
        with self._lock:
            added = 0
            for run in runs:
                for tag in tags:
                    added += self._ingest(run, tag, data.get(run, {}).get(tag, []))
            if added:
                self.generation += 1
                self._snapshot = None

    def _ingest(self, run: str, tag: str, series: list[tb_provider.TensorDatum]) -> int:
        kind = contract.kind_of_tag(tag)
        last = self._last_step.get((run, tag), -1)
        if kind is None or not series:
            return 0
        memo = self._decoded
        added = 0
        for datum in series:
            if datum.step <= last:
                continue
            raw = datum.numpy.item()
            key = (run, kind, raw)
            decoded = memo.get(key)
            if decoded is None:
                try:
                    row = contract.decode_record(kind, raw)
                except (ValueError, TypeError, AttributeError):
                    # A foreign or corrupt record under our tag: skip it rather than fail the view.
                    continue
                row.update(run=run, kind=kind, wall_time=0.0)
                decoded = self._decode(row)
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                memo[key] = decoded
            self._append(decoded, float(datum.wall_time), datum.step)
            added += 1
        self._last_step[(run, tag)] = max(last, series[-1].step)
        return added

    def _decode(self, row: dict[str, Any]) -> _Decoded:
        """Intern a decoded record's fields; keep it when it may open or close an interval."""
        kind, run = row["kind"], row["run"]
        state = str(row["state"] or "")
        name = str(row["name"] or "")
        message = row["message"]
        if kind == contract.MONITOR and not message:
            message = ", ".join(f"{k}={v}" for k, v in sorted(row["metadata"].items()))
        message = str(message or "")
        lane_id = self._lanes(timeline.lane_of(row))
        if lane_id == len(self._lane_runs):
            self._lane_runs.append(run)
        heartbeat = state == "RUNNING" and name.endswith("._keep_alive")
        spans = kind == contract.WORKER or (kind == contract.RENDEZVOUS and not heartbeat)
        parts = (name, message, state, row["hostname"] or "", row["error_trace"] or "", run)
        return _Decoded(
            lane=lane_id,
            state=self._states(state),
            kind=contract.KINDS.index(kind),
            run=self._runs(run),
            name=self._names(name),
            msg=self._msgs(message),
            text=self._texts(" ".join(str(p) for p in parts).lower()),
            row=row if spans else None,
        )

    def _append(self, d: _Decoded, wall_time: float, step: int) -> None:
        self._t.append(wall_time)
        self._lane.append(d.lane)
        self._state.append(d.state)
        self._kind.append(d.kind)
        self._run.append(d.run)
        self._step.append(int(step))
        self._name.append(d.name)
        self._msg.append(d.msg)
        self._text.append(d.text)
        if d.row is not None:
            self._span_rows.append({**d.row, "wall_time": wall_time})

    # -- snapshots -------------------------------------------------------------------------

    def _snap(self) -> _Snapshot:
        if self._snapshot is not None:
            return self._snapshot
        t = _column(self._t, np.float64)
        lane = _column(self._lane, np.int64)
        lanes = self._lanes.values
        lane_rank = np.empty(len(lanes), dtype=np.int64)
        lane_rank[sorted(range(len(lanes)), key=lambda i: lanes[i].sort_key())] = np.arange(
            len(lanes)
        )
        order = np.lexsort((t, lane_rank[lane])) if len(t) else np.zeros(0, dtype=np.int64)

        def column(values: array.array) -> np.ndarray:
            return _column(values, np.int64)[order]

        self._snapshot = _Snapshot(
            t=t[order],
            lane=lane[order],
            state=column(self._state),
            kind=column(self._kind),
            run=column(self._run),
            text=column(self._text),
            name=column(self._name),
            msg=column(self._msg),
            ids=order.astype(np.int64),
            lane_rank=lane_rank,
            intervals=self._intervals(float(t.max()) if len(t) else 0.0),
        )
        return self._snapshot

    def _intervals(self, last_time: float) -> dict[str, np.ndarray]:
        """Worker attempts and rendezvous rounds, exactly as tb_monitor.timeline.spans finds them."""
        found = [span for span in timeline.spans(self._span_rows) if span.end is not None]
        return {
            "lane": np.asarray([self._lanes.ids[s.lane] for s in found], dtype=np.int64),
            "t0": np.asarray([s.begin for s in found], dtype=np.float64),
            # An open interval runs to the newest record of the job, not only of its own kind.
            "t1": np.asarray([last_time if s.open else s.end for s in found], dtype=np.float64),
            "state": np.asarray([self._states(s.state or "") for s in found], dtype=np.int64),
            "label": np.asarray([self._labels(s.label) for s in found], dtype=np.int64),
            "open": np.asarray([s.open for s in found], dtype=bool),
        }

    # -- queries ---------------------------------------------------------------------------

    def runs(self) -> list[str]:
        """Runs that hold timeline records."""
        with self._lock:
            return sorted(self._runs.values)

    def query(self, q: Query) -> dict[str, Any]:
        """The window ``q`` asks for, as the JSON-ready columnar payload the frontend draws."""
        with self._lock:
            if q.run is not None and q.run not in self._runs.ids and self._progress is None:
                # While loading, the run may simply not be decoded yet: it matches nothing so far.
                raise UnknownRunError(f"unknown run {q.run!r:.200}")
            snap = self._snap()
            lanes, lane_runs = list(self._lanes.values), list(self._lane_runs)
            states, runs = list(self._states.values), list(self._runs.values)
            names, msgs, texts = self._names.values, self._msgs.values, self._texts.values
            labels = list(self._labels.values)
            generation = self.generation
        mask = _filter(snap, q, states, texts, runs, lanes)
        shown = np.flatnonzero(mask)
        lane_ids = np.unique(snap.lane[shown])
        lane_ids = lane_ids[np.argsort(snap.lane_rank[lane_ids])]
        position = np.full(len(lanes), -1, dtype=np.int64)
        position[lane_ids] = np.arange(len(lane_ids))
        times = snap.t[shown]
        extent = (float(times.min()), float(times.max())) if len(shown) else None
        start, end = _window(q, extent)
        in_window = shown[(times >= start) & (times <= end)]
        payload: dict[str, Any] = {
            "generation": generation,
            "total": int(len(shown)),
            "extent": extent,
            "window": [start, end],
            "lanes": [
                {
                    "label": lanes[i].label,
                    "group": lanes[i].group,
                    "kind": lanes[i].kind,
                    "run": lane_runs[i],
                }
                for i in lane_ids.tolist()
            ],
            "states": states,
            "labels": labels,
            "kinds": list(contract.KINDS),
            "facets": {
                "runs": sorted(runs),
                "run_ids": sorted({lane.group for lane in lanes}),
                "states": sorted({states[s] for s in np.unique(snap.state).tolist()} - {""}),
            },
            "in_window": int(len(in_window)),
            "loading": self.loading(),
        }
        if len(in_window) <= DETAIL_LIMIT:
            payload["mode"] = "events"
            payload["events"] = _events(snap, in_window, position, names, msgs)
        else:
            payload["mode"] = "buckets"
            payload["buckets"] = _buckets(snap, in_window, position, start, end, q.width)
        payload["intervals"] = _intervals_payload(snap.intervals, position, start, end)
        return payload

    def event(self, ctx: Any, event_id: int) -> dict[str, Any]:
        """Every field of one event, read back from the provider for the details panel."""
        with self._lock:
            if not 0 <= event_id < len(self._t):
                raise UnknownEventError(f"unknown event id {event_id!r}")
            run = self._runs.values[self._run[event_id]]
            kind = contract.KINDS[self._kind[event_id]]
            step = self._step[event_id]
            lane = self._lanes.values[self._lane[event_id]]
        tag = contract.timeline_tag(kind)
        data = self._provider.read_tensors(
            ctx,
            experiment_id=self._eid,
            plugin_name=contract.PLUGIN_NAME,
            downsample=_MAX_STEPS,
            run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=[tag]),
        )
        for datum in data.get(run, {}).get(tag, []):
            if datum.step == step:
                raw = datum.numpy.item()
                raw = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                return {
                    "id": event_id,
                    "run": run,
                    "kind": kind,
                    "step": step,
                    "wall_time": datum.wall_time,
                    "lane": lane.label,
                    "fields": contract.decode_record(kind, raw),
                    "raw": raw,
                }
        raise UnknownEventError(f"event {event_id!r} ({run!r}, step {step}) is no longer stored")


def _filter(snap: _Snapshot, q: Query, states, texts, runs, lanes) -> np.ndarray:
    mask = np.ones(len(snap.t), dtype=bool)
    if q.run is not None:
        mask &= snap.run == (runs.index(q.run) if q.run in runs else -1)
    if q.kind is not None:
        mask &= snap.kind == contract.KINDS.index(q.kind)
    if q.state is not None:
        wanted = [i for i, s in enumerate(states) if s.upper() == q.state.upper()]
        mask &= np.isin(snap.state, wanted)
    if q.run_id is not None:
        wanted = [i for i, lane in enumerate(lanes) if lane.group == q.run_id]
        mask &= np.isin(snap.lane, wanted)
    if q.text is not None:
        needle = q.text.lower()
        hits = [i for i, text in enumerate(texts) if needle in text]
        lane_hits = [i for i, lane in enumerate(lanes) if needle in lane.label.lower()]
        mask &= np.isin(snap.text, hits) | np.isin(snap.lane, lane_hits)
    return mask


def _window(q: Query, extent: tuple[float, float] | None) -> tuple[float, float]:
    if extent is None:
        lo, hi = 0.0, 1.0
    else:
        lo, hi = extent
        pad = max((hi - lo) * 0.02, 0.5)
        lo, hi = lo - pad, hi + pad
    start = q.start if q.start is not None else lo
    end = q.end if q.end is not None else hi
    if not start < end:
        end = start + 1.0
    return start, end


def _events(snap: _Snapshot, rows: np.ndarray, position, names, msgs) -> dict[str, Any]:
    used_names, name_idx = np.unique(snap.name[rows], return_inverse=True)
    used_msgs, msg_idx = np.unique(snap.msg[rows], return_inverse=True)
    return {
        "count": int(len(rows)),
        "t": _b64(snap.t[rows], "<f8"),
        "lane": _b64(position[snap.lane[rows]], "<u4"),
        "state": _b64(snap.state[rows], "<u2"),
        "id": _b64(snap.ids[rows], "<u4"),
        "name": _b64(name_idx, "<u4"),
        "msg": _b64(msg_idx, "<u4"),
        "names": [names[i] for i in used_names.tolist()],
        "msgs": [msgs[i][:300] for i in used_msgs.tolist()],
    }


def _buckets(snap: _Snapshot, rows, position, start: float, end: float, width: int) -> dict:
    bins = max(1, width // BUCKET_PX)
    span = end - start
    b = np.minimum(((snap.t[rows] - start) / span * bins).astype(np.int64), bins - 1)
    key = position[snap.lane[rows]] * bins + b
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    worst = np.zeros(len(uniq), dtype=np.int64)
    np.maximum.at(worst, inverse, _severity_of(snap.state[rows]))
    return {
        "count": int(len(uniq)),
        "bins": bins,
        "bin_width": span / bins,
        "lane": _b64(uniq // bins, "<u4"),
        "bin": _b64(uniq % bins, "<u4"),
        "n": _b64(counts, "<u4"),
        "state": _b64(worst, "<u2"),
    }


def _severity_of(state: np.ndarray) -> np.ndarray:
    # STATE_SEVERITY is interned first, so a known state's id is its severity; any other state
    # ranks as RUNNING (a bucket's colour then shows the alarming states above it).
    return np.where(state < len(STATE_SEVERITY), state, STATE_SEVERITY.index("RUNNING"))


def _intervals_payload(iv: dict[str, np.ndarray], position, start: float, end: float) -> dict:
    pos = position[iv["lane"]] if len(iv["lane"]) else np.zeros(0, dtype=np.int64)
    keep = (pos >= 0) & (iv["t1"] >= start) & (iv["t0"] <= end)
    return {
        "count": int(keep.sum()),
        "lane": _b64(pos[keep], "<u4"),
        "t0": _b64(iv["t0"][keep], "<f8"),
        "t1": _b64(iv["t1"][keep], "<f8"),
        "state": _b64(iv["state"][keep], "<u2"),
        "label": _b64(iv["label"][keep], "<u4"),
        "open": _b64(iv["open"][keep], "<u2"),
    }
