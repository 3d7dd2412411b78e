"""The timeline's decoded events as columns: what the store appends to and what a query reads.

:class:`Records` holds each distinct record once (a node's keep-alives, most of a long job's
events, are one record), :class:`Interner` turns values into the small integers the columns
hold, and a :class:`Snapshot` is the sorted numpy :class:`Columns` of one generation with the
values their ids stand for; :mod:`tb_plugin.query` filters and buckets it.
"""

from __future__ import annotations

import array
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count, repeat
from typing import Any

import numpy as np

from tb_monitor import contract, timeline

__all__ = [
    "FIELDS",
    "Columns",
    "EventIds",
    "EventRecords",
    "Interner",
    "LaneFields",
    "Records",
    "Snapshot",
    "SortedEvents",
    "Texts",
    "column",
    "exact_time_order",
    "lane_time_order",
    "ranges",
    "search_segments",
]

#: What a record holds as an interned id, in the order :meth:`Records.add` takes them; each is
#: the ``rec_<name>`` column of :class:`Columns`.
FIELDS = ("lane", "state", "kind", "run", "name", "msg", "text")
_RUNNING = [state.name for state in timeline.STATES].index("RUNNING")


class Interner:
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

    def many(self, values: list[Any]) -> np.ndarray:
        """The ids of ``values``, new ones interned: C calls, no Python per value (a million
        distinct messages). One pass over the dict: each value takes its id, or a new one
        numbered by its position (its first one); those are then made dense, in order."""
        ids, known = self.ids, len(self.values)
        try:
            out = np.fromiter(
                map(ids.setdefault, values, count(known)), dtype=np.int64, count=len(values)
            )
        except BaseException:  # an unhashable value: the interner as it was
            for value in [value for value, found in ids.items() if found >= known]:
                del ids[value]
            raise
        new = out >= known
        if new.any():
            first, dense = np.unique(out[new], return_inverse=True)
            out[new] = known + dense.reshape(-1)
            fresh = [values[at] for at in (first - known).tolist()]
            ids.update(zip(fresh, range(known, known + len(fresh)), strict=True))
            self.values.extend(fresh)
        return out


class Records:
    """Each distinct record (a run's payload of one kind), decoded once: the per-event columns
    hold its id, and every field an event shows is a lookup here. A node's keep-alives, most of
    a long job's events, are one record; so an event costs its time and one integer. Its JSON
    is not kept: the details panel reads an event's back from the data provider
    (``TimelineStore.event``)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str, str], int] = {}  # (run, kind, payload) -> record id
        #: Per field of :data:`FIELDS`, each record's interned id.
        self.columns = {name: array.array("q") for name in FIELDS}
        self.row: list[dict[str, Any] | None] = []  # when it may open or close an interval
        #: (record id, field, value) -> its twin with that field changed (``twin``)
        self.twins: dict[tuple[int, str, int], int] = {}

    def __len__(self) -> int:
        return len(self.row)

    def add(self, fields: tuple[int, ...], row: dict[str, Any] | None) -> int:
        """Append a record (``fields`` in the order of :data:`FIELDS`); return its id."""
        for values, value in zip(self.columns.values(), fields, strict=True):
            values.append(value)
        self.row.append(row)
        return len(self.row) - 1

    def extend(self, fields: np.ndarray, rows: list[dict[str, Any] | None]) -> int:
        """Append records (``fields``: one row of ids per record, in the order of
        :data:`FIELDS`); return the first one's id. Whole columns at a time."""
        first = len(self.row)
        for values, ids in zip(self.columns.values(), fields.T, strict=True):
            values.frombytes(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
        self.row.extend(rows)
        return first

    def twin(self, rec: int, name: str, value: int) -> int:
        """The record drawn like ``rec`` but with field ``name``'s id ``value`` (made once): a
        collateral rank's end drawn in its own state, a job's event on its own lane."""
        return int(self.twins_of(np.asarray([rec]), name, np.asarray([value]))[0])

    def twins_of(self, recs: np.ndarray, name: str, values: np.ndarray) -> np.ndarray:
        """:meth:`twin` of each ``recs[i]`` with ``values[i]``, the new ones appended as whole
        columns (a day's 12k collateral ends drawn stopped: no Python record per twin)."""
        keys = list(zip(recs.tolist(), repeat(name), values.tolist()))
        out = np.fromiter((self.twins.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        missing = np.flatnonzero(out < 0)
        if len(missing):
            fresh = list(dict.fromkeys(keys[i] for i in missing.tolist()))
            of = np.fromiter((rec for rec, _, _ in fresh), dtype=np.int64, count=len(fresh))
            columns = [np.frombuffer(ids, dtype=np.int64)[of] for ids in self.columns.values()]
            fields = np.stack(columns, axis=1)
            fields[:, FIELDS.index(name)] = [value for _, _, value in fresh]
            first = self.extend(fields, [None] * len(fresh))
            self.twins.update(zip(fresh, range(first, first + len(fresh)), strict=True))
            out[missing] = [self.twins[keys[i]] for i in missing.tolist()]
        return out

    def get(self, name: str, rec: int) -> int:
        """Record ``rec``'s id of field ``name``."""
        return self.columns[name][rec]


class Texts(Sequence[str]):
    """Each record's search text, lower case: its message between two parts (its name before;
    its state, host, error and run after), joined only when read: a million distinct
    rendezvous messages cost three integers each here, not a second, longer copy of each."""

    def __init__(self, msgs: Sequence[str]) -> None:
        self._msgs = msgs
        self._parts = Interner()
        self._ids = {name: array.array("i") for name in ("pre", "msg", "post")}

    def part(self, text: str) -> int:
        """The id of a lower-case part."""
        return self._parts(text)

    def extend(self, pre: np.ndarray, msg: np.ndarray, post: np.ndarray) -> int:
        """Texts ``parts[pre] + msgs[msg].lower() + parts[post]``; the first one's id."""
        first = len(self)
        for name, ids in (("pre", pre), ("msg", msg), ("post", post)):
            self._ids[name].frombytes(np.ascontiguousarray(ids, dtype=np.intc).tobytes())
        return first

    def __len__(self) -> int:
        return len(self._ids["post"])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        pre, msg, post = (self._ids[name][i] for name in ("pre", "msg", "post"))
        parts = self._parts.values
        return parts[pre] + self._msgs[msg].lower() + parts[post]

    def __iter__(self) -> Any:
        parts, msgs, n = self._parts.values, self._msgs, len(self)
        ids = (self._ids[name][:n] for name in ("pre", "msg", "post"))
        return (parts[p] + msgs[m].lower() + parts[q] for p, m, q in zip(*ids, strict=True))


class _Runs:
    """A sorted int32 column kept as runs of events (``starts``: where each begins, ascending,
    the first 0; ``length``: the events), indexed like the column it stands for. A subclass
    says what a run holds (:meth:`_at`)."""

    starts: np.ndarray
    length: int

    def _at(self, positions: np.ndarray, run: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: Any) -> Any:
        """The values at ``key`` (an integer, a slice, an index or boolean array)."""
        if isinstance(key, (int, np.integer)):
            position = int(key) + (self.length if key < 0 else 0)
            if not 0 <= position < self.length:
                raise IndexError(f"event position {key!r} out of range for {self.length} events")
            at = np.array([position])
            return np.int32(self._at(at, self.run_of(at))[0])
        if isinstance(key, slice):
            start, stop, step = key.indices(self.length)
            if step == 1:
                return self._span(start, stop) if start < stop else np.zeros(0, np.int32)
            positions = np.arange(start, stop, step)
        else:
            key = np.asarray(key)
            if key.dtype == bool:
                if key.shape != (self.length,):
                    raise IndexError(f"a mask of {key.shape} for {self.length} events")
                positions = np.flatnonzero(key)
            else:
                positions = np.where(key < 0, key + self.length, key)
                if len(positions) and not 0 <= positions.min() <= positions.max() < self.length:
                    raise IndexError(f"event positions out of range for {self.length} events")
        runs = self.length if self.starts is None else len(self.starts)
        if len(positions) * runs.bit_length() > self.length:
            # Many positions (a wide window's events): the whole column made run by run and
            # gathered from costs less than a binary search each.
            return self._span(0, self.length)[positions] if self.length else positions
        return self._at(positions, self.run_of(positions)).astype(np.int32)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """The values at ``start`` .. ``stop - 1`` (``start < stop``)."""
        raise NotImplementedError

    def _pieces(
        self, firsts: np.ndarray, lasts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of spans ``firsts[i]`` .. ``lasts[i] - 1`` (each non-empty, in turn): every run they
        cross, span by span, where each begins there and how many of its events are there. A
        span made run by run, a search per span, not per event (a day's 18M in tens of ms)."""
        first_run, last_run = self.run_of(firsts), self.run_of(lasts - 1)
        runs = ranges(first_run, last_run + 1)
        crossed = last_run - first_run + 1
        begins = np.maximum(self.starts[runs], np.repeat(firsts, crossed))
        ends = np.minimum(np.append(self.starts, self.length)[runs + 1], np.repeat(lasts, crossed))
        return runs, begins, ends - begins

    def run_of(self, positions: np.ndarray) -> np.ndarray:
        """The run each (valid) event position is in."""
        return np.searchsorted(self.starts, positions, side="right") - 1

    def lengths(self) -> np.ndarray:
        """How many events each run holds."""
        return np.diff(self.starts, append=self.length)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)

    def tolist(self) -> list[int]:
        return self[:].tolist()


def _run_starts(breaks: np.ndarray, length: int) -> np.ndarray:
    """Run starts (int32) from where consecutive values break (``breaks[i]``: between i, i+1)."""
    starts = np.flatnonzero(breaks).astype(np.int32)
    starts += 1
    return np.concatenate((np.zeros(min(length, 1), np.int32), starts))


@dataclass(frozen=True)
class EventIds(_Runs):
    """Sorted events' ids, kept as runs of consecutive ids: a TensorBoard record's events are
    appended in a row and sorted in a row (a node's lane, in time), so a day's 17.8M ids are
    ~300k runs, 2 MB instead of 71. Indexed like the int32 column it stands for."""

    starts: np.ndarray  # int32: the position where each run begins (ascending; the first 0)
    firsts: np.ndarray  # int32: each run's first id
    length: int

    @classmethod
    def of(cls, ids: np.ndarray) -> EventIds:
        """The runs of an id column."""
        starts = _run_starts(np.diff(ids) != 1, len(ids))
        return cls(starts, ids[starts].astype(np.int32), len(ids))

    def _at(self, positions: np.ndarray, run: np.ndarray) -> np.ndarray:
        return self.firsts[run] + (positions - self.starts[run])

    def _span(self, start: int, stop: int) -> np.ndarray:
        runs, begins, lengths = self._pieces(np.array([start]), np.array([stop]))
        # Each run's first id here, less where it lands in the span, plus each one's place.
        base = self._at(begins, runs) - (np.cumsum(lengths) - lengths)
        out = np.arange(stop - start, dtype=np.int32)
        out += np.repeat(base.astype(np.int32), lengths)
        return out

    def position(self, event_id: int) -> int:
        """Where the event with this id is; a KeyError naming it when none is."""
        order = self._by_first
        at = int(np.searchsorted(self.firsts[order], event_id, side="right")) - 1
        if at >= 0:
            run = int(order[at])
            end = self.starts[run + 1] if run + 1 < len(self.starts) else self.length
            offset = event_id - int(self.firsts[run])
            if offset < end - self.starts[run]:
                return int(self.starts[run]) + offset
        raise KeyError(f"no event has id {event_id!r}")

    @functools.cached_property
    def _by_first(self) -> np.ndarray:
        """The runs in the order of their ids (made on the first ``position``)."""
        return np.argsort(self.firsts, kind="stable")

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.firsts.nbytes


@dataclass(frozen=True)
class EventRecords(_Runs):
    """Sorted events' records, kept as runs of events on one record: sorted by (lane, time), a
    node's keep-alives are runs of a record's events, so a day's 17.8M are ~300k runs, 2.4 MB
    instead of 71. Where runs would cost more than the column (distinct events, a record
    each), every event is its own run and no starts are kept (``starts`` None): never more
    than 4 bytes an event. Indexed like the int32 column it stands for; per-record columns
    are gathered per event by run (:meth:`per_event`)."""

    starts: np.ndarray | None  # int32: where each run begins (None: at every event)
    records: np.ndarray  # int32: each run's record
    length: int

    @classmethod
    def of(cls, rec: np.ndarray) -> EventRecords:
        """The runs of a record column."""
        starts = _run_starts(np.diff(rec) != 0, len(rec))
        if 2 * len(starts) > len(rec):
            return cls(None, rec.astype(np.int32), len(rec))
        return cls(starts, rec[starts].astype(np.int32), len(rec))

    def _at(self, positions: np.ndarray, run: np.ndarray) -> np.ndarray:
        return self.records[run]

    def run_of(self, positions: np.ndarray) -> np.ndarray:
        return positions if self.starts is None else super().run_of(positions)

    def _span(self, start: int, stop: int) -> np.ndarray:
        return self.spans(np.array([start]), np.array([stop]))

    def lengths(self) -> np.ndarray:
        if self.starts is None:
            return np.ones(self.length, dtype=np.int64)
        return super().lengths()

    def spans(self, firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
        """The records of events ``firsts[i]`` .. ``lasts[i] - 1`` for each i, one span after
        another (a window's events, lane by lane), made run by run: a search per span, not
        per event."""
        keep = lasts > firsts
        firsts, lasts = firsts[keep], lasts[keep]
        if self.starts is None or not len(firsts):
            return self.records[ranges(firsts, lasts)]
        runs, _, lengths = self._pieces(firsts, lasts)
        return np.repeat(self.records[runs], lengths)

    def per_event(self, per_record: np.ndarray) -> np.ndarray:
        """``per_record[rec]`` for every event, made run by run."""
        if self.starts is None:
            return per_record[self.records]
        return np.repeat(per_record[self.records], self.lengths())

    @property
    def nbytes(self) -> int:
        return self.records.nbytes + (0 if self.starts is None else self.starts.nbytes)


def _per_event(name: str) -> property:
    """The ``rec_<name>`` column gathered per event (sorted like ``t``)."""
    return property(
        lambda self: self.rec.per_event(getattr(self, f"rec_{name}")), doc=f"Per event: {name}."
    )


@dataclass(frozen=True)
class Columns:
    """Numpy columns of every event at one generation, sorted by (lane order, time).

    Per event only its time, its record (``rec``) and its id; an event's lane, state, kind,
    run, name, message and search text are its record's (``rec_*``, one entry per record),
    gathered on access (``lane``, ``state``, ...) or, faster, filtered per record.
    """

    t: np.ndarray
    rec: EventRecords
    ids: EventIds  # each one's position in the order the store read them
    lane_rank: np.ndarray  # lane id -> display position
    rank_start: np.ndarray  # display position -> its first event (one more: the end)
    intervals: dict[str, np.ndarray]
    rec_lane: np.ndarray
    rec_state: np.ndarray
    rec_kind: np.ndarray
    rec_run: np.ndarray
    rec_text: np.ndarray
    rec_name: np.ndarray
    rec_msg: np.ndarray
    rec_count: np.ndarray  # events per record

    lane = _per_event("lane")
    state = _per_event("state")
    kind = _per_event("kind")
    run = _per_event("run")
    text = _per_event("text")
    name = _per_event("name")
    msg = _per_event("msg")

    @functools.cached_property
    def rec_severity(self) -> np.ndarray:
        """Per record, how alarming its state is: its id, as the store interns
        ``timeline.STATES`` first in order of severity; a state outside them ranks as RUNNING,
        so the alarming ones still show in a bucket that holds it."""
        known = self.rec_state < len(timeline.STATES)
        return np.where(known, self.rec_state, _RUNNING).astype(np.uint8)

    @functools.cached_property
    def extent(self) -> tuple[float, float] | None:
        """The first and last event's times (None for no events): made once, not two passes
        over a day's 18M times a query."""
        return (float(self.t.min()), float(self.t.max())) if len(self.t) else None

    @functools.cached_property
    def lanes_shown(self) -> np.ndarray:
        """The ids of the lanes holding events, in display order: what an unfiltered query
        shows, made once."""
        lane_ids = np.unique(self.rec_lane[self.rec_count > 0])
        return lane_ids[np.argsort(self.lane_rank[lane_ids])]

    @functools.cached_property
    def states_shown(self) -> list[int]:
        """The ids of the states some event is in, ascending; made once."""
        return np.unique(self.rec_state[self.rec_count > 0]).tolist()

    def between(self, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """Per display position, where its events from ``start`` on begin and where its
        events after ``end`` begin: a window's events lane by lane, found by bisecting each
        lane's sorted times (no pass over a day's 18M events)."""
        firsts, lasts = self.rank_start[:-1], self.rank_start[1:]
        return (
            search_segments(self.t, firsts, lasts, start, "left"),
            search_segments(self.t, firsts, lasts, end, "right"),
        )

    @functools.cached_property
    def run_severity(self) -> np.ndarray:
        """Per run of ``rec``, its record's severity, and a 0 after the last run (so a range of
        runs may end with them): what a bucket's most severe state is a max over. Made once."""
        return np.append(self.rec_severity[self.rec.records], np.uint8(0))


@dataclass(frozen=True)
class LaneFields:
    """Per lane id, what a payload says of it: its label, and its group (run id), kind and run
    as positions in ``run_ids`` (every lane's run id, once each, sorted), ``contract.KINDS``
    and ``sorted(runs)``. A store makes them again only when lanes or runs were added (a
    day's 5,000 lanes are not walked per request)."""

    columns: dict[str, np.ndarray]
    run_ids: list[str]

    @classmethod
    def of(
        cls, lanes: Sequence[timeline.Lane], lane_runs: Sequence[str], runs: Sequence[str]
    ) -> LaneFields:
        """The fields of ``lanes``, each first seen in its ``lane_runs`` entry, of ``runs``."""
        run_ids = sorted({lane.group for lane in lanes})
        group = {g: i for i, g in enumerate(run_ids)}
        run = {r: i for i, r in enumerate(sorted(runs))}
        kind = {k: i for i, k in enumerate(contract.KINDS)}
        columns = {
            "label": np.array([lane.label for lane in lanes], dtype=object),
            "group": np.array([group[lane.group] for lane in lanes], dtype=np.int64),
            "kind": np.array([kind[lane.kind] for lane in lanes], dtype=np.int64),
            "run": np.array([run[r] for r in lane_runs], dtype=np.int64),
        }
        return cls(columns, run_ids)


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
    #: Per attempt, ``tb_monitor.analysis.attempts.attempt_dict`` (no traceback); a root cause
    #: also names its event id (``event``) and its lane id (``lane``).
    attempts: list[dict[str, Any]] = field(default_factory=list)
    #: ``LaneFields.of(lanes, lane_runs, runs)``: what a payload says of each lane.
    lane_fields: LaneFields | None = None


@dataclass(frozen=True)
class SortedEvents:
    """Events sorted as the columns show them, kept once: their times, the records drawn
    (``rec``), their ids, and for the events drawn on a record not their own (a collateral
    rank's end drawn as stopped, an event moved to its job's lane) their positions
    (``redrawn``, ascending) and own records (``own``), which a new sort starts from."""

    t: np.ndarray
    rec: EventRecords
    ids: EventIds
    redrawn: np.ndarray
    own: np.ndarray

    @classmethod
    def empty(cls) -> SortedEvents:
        """No events: a store's before its first sort."""
        none = np.zeros(0, np.int32)
        return cls(
            np.zeros(0), EventRecords.of(none), EventIds.of(none), np.zeros(0, np.int64), none
        )

    @classmethod
    def of(
        cls,
        t: np.ndarray,
        drawn: np.ndarray,
        ids: EventIds,
        own: np.ndarray,
        runs: EventRecords | None = None,
    ) -> SortedEvents:
        """Sorted events drawn on ``drawn`` (as runs: ``runs``, made if not given), whose own
        records are ``own``."""
        redrawn = np.flatnonzero(drawn != own)
        runs = EventRecords.of(drawn) if runs is None else runs
        return cls(t, runs, ids, redrawn, own[redrawn])

    def __len__(self) -> int:
        return len(self.t)

    def with_appended(
        self, t: np.ndarray, rec: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """These events, each on its own record, then ``t`` and ``rec`` appended (their ids
        following on): times, records, ids; new arrays, but for a first sort's ``t`` and
        ``rec``, handed back as they came (to be read, not written)."""
        ids = np.arange(len(self), len(self) + len(t), dtype=np.int32)
        if not len(self):  # a first sort: nothing to join (the caller's arrays, as they are)
            return t, rec, ids
        own = np.concatenate([self.rec[:], rec])
        own[self.redrawn] = self.own
        return np.concatenate([self.t, t]), own, np.concatenate([self.ids[:], ids])

    def find(self, event_id: int) -> tuple[float, int]:
        """An event's time and own record, by id."""
        position = self.ids.position(event_id)
        at = int(np.searchsorted(self.redrawn, position))
        if at < len(self.redrawn) and self.redrawn[at] == position:
            return float(self.t[position]), int(self.own[at])
        return float(self.t[position]), int(self.rec[position])


def column(values: array.array, dtype: type) -> np.ndarray:
    """A numpy copy of an append-only array: it keeps growing, and a buffer it exported
    could not be resized."""
    return np.frombuffer(values, dtype=dtype).copy()


def ranges(firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
    """``firsts[i] .. lasts[i] - 1`` for each i, one after another."""
    lengths = lasts - firsts
    return np.repeat(firsts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())


def search_segments(
    t: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, value: float, side: str = "left"
) -> np.ndarray:
    """Per segment ``t[first:last]`` (each sorted), ``first + np.searchsorted(t[first:last],
    value, side)``: every segment bisected at once, a few numpy calls a step and as many steps
    as the longest segment has bits, not a Python call per segment."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    lo = np.array(firsts, dtype=np.int64)
    hi = np.array(lasts, dtype=np.int64)
    if not len(t):
        return lo
    last = len(t) - 1
    while True:
        searching = lo < hi
        if not searching.any():
            return lo
        mid = (lo + hi) >> 1
        probe = t[np.minimum(mid, last)]  # a finished segment's mid may be past the end
        before = probe < value if side == "left" else probe <= value
        lo = np.where(searching & before, mid + 1, lo)
        hi = np.where(searching & ~before, mid, hi)


def exact_time_order(t: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> None:
    """Sort each segment ``t[bounds[i]:bounds[i + 1]]``, and ``order`` with it, exactly by time,
    in place, where it is not: :func:`lane_time_order` keys whole microseconds, so events less
    than one apart keep the order they were read in (two records' events on one lane, each
    record's times offsets from its own start). Bisecting a lane needs its times sorted. One
    pass finds them (rarely any); only their lanes are sorted again."""
    if len(t) < 2:
        return
    back = t[1:] < t[:-1]  # one pass, no float difference of every neighbour made
    between = bounds[(bounds > 0) & (bounds < len(t))] - 1  # a lane's first after another's last
    back[between] = False
    if not back.any():
        return
    for lane in np.unique(np.searchsorted(bounds, np.flatnonzero(back), side="right") - 1):
        a, b = int(bounds[lane]), int(bounds[lane + 1])
        fix = np.argsort(t[a:b], kind="stable")
        t[a:b], order[a:b] = t[a:b][fix], order[a:b][fix]


def lane_time_order(
    t: np.ndarray, rec: np.ndarray, rec_lane: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting events (times ``t``, records ``rec``) by their record's lane
    (``rec_lane``, per record) and time, and their times in that order: one stable sort of a
    64-bit key of lane and microseconds (events arrive in runs already sorted, which a stable
    sort merges in near linear time: 4x faster than ``np.lexsort`` at 18M events), unless the
    key would not fit."""
    if not len(t):  # a copy: ``t`` may be a view of the store's append-only column
        return np.zeros(0, dtype=np.int64), np.empty(0, dtype=t.dtype)
    lo, hi = float(t.min()), float(t.max())
    time_bits = max(1, math.ceil(math.log2((hi - lo) * 1e6 + 2)))
    lane_bits = max(1, int(rec_lane.max()).bit_length())
    if time_bits + lane_bits > 62 or not math.isfinite(hi - lo):
        order = np.lexsort((t, rec_lane[rec]))
        return order, t[order]
    # Whole columns in few numpy calls (the analysis, Python, runs beside this sort, and each
    # call's end waits for the GIL), in place from here (a pass over 18M events: ~30 ms), in
    # doubles whatever ``t`` is: the buffer takes the 64-bit lanes below.
    micros = np.subtract(t, lo, dtype=np.float64)
    micros *= 1e6
    key = micros.astype(np.int64)  # truncated: in time order, ties kept as read (see
    # exact_time_order for events less than a microsecond apart)
    # Below 2**time_bits: no carry into the lane. Shifted per record, gathered once per event
    # into the times' buffer, done with: a new array costs its first touch (a 1,024-node
    # day's 142 MB: ~80 ms of page faults), so the sorted times take that buffer too.
    # "clip": every id is in range, and the default ("raise") copies through a buffer when
    # given ``out``.
    shifted = rec_lane.astype(np.int64) << time_bits
    key |= np.take(shifted, rec, out=micros.view(np.int64), mode="clip")
    order = np.argsort(key, kind="stable")
    reuse = micros if t.dtype == micros.dtype else None  # else the times keep their own type
    return order, np.take(t, order, out=reuse, mode="clip")
