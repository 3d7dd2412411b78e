"""Timeline records, decoded once into columns, because the data provider is slow to read.

TensorBoard hands back every record as a numpy-wrapped protobuf (about 10 µs a record: seconds
per request for a 100k-event job). :class:`TimelineStore` decodes each record once, identical
payloads (keep-alive heartbeats) only once in all, reads only what a refresh finds new, in chunks
so a query during a long first decode answers with what is there, and hands
:mod:`tb_plugin.query` a :class:`Snapshot` of sorted numpy columns.

A record under a timeline tag whose payload cannot be decoded (not JSON, not an object, not
text) is skipped, never fatal: it is logged with its run, tag and step (the provider knows no
file or offset) and counted in :meth:`TimelineStore.skipped` (the ``status`` route says how
many). Damage in the files themselves is the data provider's to skip: what it hands over is
kept whole.

Lanes, intervals and the order of states are :mod:`tb_monitor.timeline`'s (``lane_of``,
``spans``, ``STATES``), so the tab, the Perfetto export and the notebook figure always agree.
"""

from __future__ import annotations

import array
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor import contract, timeline
from tb_monitor.analysis.restarts import (
    STOPPED_BY_RESTART,
    Attempt,
    attempt_dict,
    attempts,
    mark_restarts,
)

__all__ = [
    "CHUNK_RECORDS",
    "ProviderStore",
    "REFRESH_INTERVAL_S",
    "Columns",
    "Snapshot",
    "TimelineStore",
    "UnknownEventError",
]

#: A refresh lists the provider's series at most this often (seconds); each request may trigger it.
REFRESH_INTERVAL_S = 1.0
#: About this many records are read from the provider at a time, so a first decode shows progress.
CHUNK_RECORDS = 50_000
#: Distinct payloads whose decoding is remembered; past it the memory starts over.
_MEMO_LIMIT = 100_000
_MAX_STEPS = 2**31 - 1
#: Skipped records remembered with their details (all of them are counted).
_SKIPPED_DETAILS = 100
_log = logging.getLogger(__name__)


class UnknownEventError(LookupError):
    """An event id that the store does not hold."""


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


@dataclass(frozen=True)
class Columns:
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


@dataclass(frozen=True)
class Snapshot:
    """The columns at one generation, and the values their integer ids stand for.

    A state listed in :data:`tb_monitor.timeline.STATES` has its index there as its id.
    """

    columns: Columns
    generation: int
    loading: dict[str, int] | None
    lanes: list[timeline.Lane]
    lane_runs: list[str]  # per lane: the first run it was seen in
    states: list[str]
    runs: list[str]
    names: Sequence[str]
    msgs: Sequence[str]
    texts: Sequence[str]  # per distinct record: its searchable text, lower case
    labels: list[str]  # interval labels
    #: Per attempt, ``tb_monitor.analysis.restarts.attempt_dict`` (no traceback); a root cause
    #: also names its event id (``event``) and its lane id (``lane``).
    attempts: list[dict[str, Any]] = field(default_factory=list)


def _column(values: array.array, dtype: type) -> np.ndarray:
    # A copy: the array keeps growing, and a buffer it exports could not be resized.
    return np.frombuffer(values, dtype=dtype).copy()


def _chunks(
    stale: dict[str, list[str]], listing: Mapping[str, Mapping[str, Any]], limit: int
) -> list[tuple[list[str], list[str], int]]:
    """Stale runs grouped into reads of about ``limit`` points: (runs, their tags, points)."""
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


class ProviderStore:
    """What a store refreshed from TensorBoard's data provider shares (the timeline's, the
    Ranks view's): the data provider, the time of its last refresh, and reads in chunks whose
    progress a request can see while a long first read goes on."""

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._provider = data_provider
        self._eid = experiment_id
        self._clock = clock
        self._last_refresh = -math.inf
        self._progress: tuple[int, int] | None = None

    def refreshed_within(self, seconds: float) -> bool:
        """Whether a full refresh started less than ``seconds`` ago."""
        return self._clock() - self._last_refresh < seconds

    def loading(self) -> dict[str, int] | None:
        """How far a refresh that is reading is, or None when none is."""
        progress = self._progress
        return None if progress is None else {"done": progress[0], "expected": progress[1]}

    def _read_in_chunks(
        self,
        stale: dict[str, list[str]],
        listing: Mapping[str, Mapping[str, Any]],
        limit: int,
        expected: int,
        read: Callable[[list[str], list[str]], None],
    ) -> None:
        """``read(runs, tags)`` for every stale run, about ``limit`` points at a time."""
        self._progress = (0, expected)
        try:
            for runs, tags, size in _chunks(stale, listing, limit):
                read(runs, tags)
                self._progress = (self._progress[0] + size, expected)
        finally:
            self._progress = None


class TimelineStore(ProviderStore):
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
        super().__init__(data_provider, experiment_id, clock)
        self._lock = threading.RLock()  # the columns, interners and snapshot
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._last_step: dict[tuple[str, str], int] = {}
        self._listed: dict[tuple[str, str], int] = {}  # max_step at the previous listing
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
        for state in timeline.STATES:  # first, so a known state's id is its severity
            self._states(state.name)
        # Records that may open or close an interval, for timeline.spans, and that the restart
        # analysis reads: every one but the keep-alive heartbeats, which are most of a long
        # job's records and neither; each with its event id, ``_id``.
        self._span_rows: list[dict[str, Any]] = []
        # (run, kind, payload) -> its decoded columns: a node's heartbeats, most of a job's
        # records, are one identical rendezvous payload, decoded once.
        self._decoded: dict[tuple[str, str, Any], _Decoded] = {}
        self._columns: Columns | None = None
        self._attempts: list[dict[str, Any]] = []
        self._skipped_count = 0
        self._skipped: list[dict[str, Any]] = []  # the first _SKIPPED_DETAILS of them

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
                read = functools.partial(self._read, ctx)
                self._read_in_chunks(stale, listing, CHUNK_RECORDS, expected, read)
            return self.generation

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
                self._columns = None

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
                except (ValueError, TypeError, AttributeError) as exc:
                    # A foreign or corrupt record under our tag: skip it rather than fail the view.
                    self._skip(run, tag, datum.step, exc)
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

    def _skip(self, run: str, tag: str, step: int, exc: Exception) -> None:
        self._skipped_count += 1
        error = f"{type(exc).__name__}: {exc}"[:300]
        if len(self._skipped) < _SKIPPED_DETAILS:
            self._skipped.append({"run": run, "tag": tag, "step": int(step), "error": error})
        _log.warning(
            "run %r, tag %r, step %d: undecodable record skipped: %s", run, tag, step, error
        )

    def skipped(self) -> dict[str, Any]:
        """Records skipped as undecodable: ``count``, and the first ones' run, tag, step, error."""
        with self._lock:
            return {"count": self._skipped_count, "records": list(self._skipped)}

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
        spans = kind in (contract.WORKER, contract.AGENT) or (
            kind == contract.RENDEZVOUS and not heartbeat
        )
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
            self._span_rows.append({**d.row, "wall_time": wall_time, "_id": len(self._t) - 1})

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every event decoded so far, as sorted numpy columns and the values they stand for."""
        with self._lock:
            columns = self._sorted_columns()  # first: it interns the intervals' labels
            return Snapshot(
                columns=columns,
                generation=self.generation,
                loading=self.loading(),
                lanes=list(self._lanes.values),
                lane_runs=list(self._lane_runs),
                states=list(self._states.values),
                runs=list(self._runs.values),
                # Append-only, and far longer: the ids in the columns stay valid without a copy.
                names=self._names.values,
                msgs=self._msgs.values,
                texts=self._texts.values,
                labels=list(self._labels.values),
                attempts=self._attempts,
            )

    def _sorted_columns(self) -> Columns:
        if self._columns is not None:
            return self._columns
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

        marks = timeline.spans(self._span_rows)
        found = attempts(self._span_rows, marks)
        marks = mark_restarts(marks, found)
        state = column(self._state)
        # Collateral ranks' ending records are drawn as stopped by the restart, not as failures.
        stopped = [row["_id"] for a in found for row in a.collateral_records]
        if stopped:
            position = np.empty(len(order), dtype=np.int64)
            position[order] = np.arange(len(order))
            state[position[np.asarray(stopped, dtype=np.int64)]] = self._states(STOPPED_BY_RESTART)
        self._attempts = [self._attempt_payload(a) for a in found]
        self._columns = Columns(
            t=t[order],
            lane=lane[order],
            state=state,
            kind=column(self._kind),
            run=column(self._run),
            text=column(self._text),
            name=column(self._name),
            msg=column(self._msg),
            ids=order.astype(np.int64),
            lane_rank=lane_rank,
            intervals=self._intervals(marks, float(t.max()) if len(t) else 0.0),
        )
        return self._columns

    def _attempt_payload(self, attempt: Attempt) -> dict[str, Any]:
        out = attempt_dict(attempt, traceback=False)
        cause = attempt.root_cause
        if cause is not None and cause.record is not None:
            out["root_cause"]["event"] = int(cause.record["_id"])
            out["root_cause"]["lane"] = self._lanes.ids[timeline.lane_of(cause.record)]
        return out

    def _intervals(self, marks: list[timeline.Span], last_time: float) -> dict[str, np.ndarray]:
        """Worker attempts and rendezvous rounds, as tb_monitor.timeline.spans finds them, and
        collateral ranks' attempts stopped by the restart (``tb_monitor.analysis.restarts.mark_restarts``)."""
        found = [span for span in marks if span.end is not None]
        return {
            "lane": np.asarray([self._lanes.ids[s.lane] for s in found], dtype=np.int64),
            "t0": np.asarray([s.begin for s in found], dtype=np.float64),
            # An open interval runs to the newest record of the job, not only of its own kind.
            "t1": np.asarray([last_time if s.open else s.end for s in found], dtype=np.float64),
            "state": np.asarray([self._states(s.state or "") for s in found], dtype=np.int64),
            "label": np.asarray([self._labels(s.label) for s in found], dtype=np.int64),
            "open": np.asarray([s.open for s in found], dtype=bool),
        }

    # -- lookups ---------------------------------------------------------------------------

    def runs(self) -> list[str]:
        """Runs that hold timeline records."""
        with self._lock:
            return sorted(self._runs.values)

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
