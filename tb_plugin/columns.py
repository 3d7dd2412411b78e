"""The timeline's sorted events as numpy columns: what a sort makes and a query reads.

A :class:`Snapshot` is the sorted :class:`Columns` of one generation with the values their
ids stand for (:mod:`tb_plugin.interned`), and :class:`LaneFields` what a payload says of each
lane; :mod:`tb_plugin.query` filters and buckets it. :class:`SortedEvents` is the store's one
sorted copy of its events, which the next sort starts from.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tb_monitor import contract, timeline
from tb_plugin.lane_labels import label_parts
from tb_plugin.lane_order import search_segments
from tb_plugin.runlength import EventIds, EventRecords

__all__ = ["Columns", "LaneFields", "Snapshot", "SortedEvents"]

_RUNNING = [state.name for state in timeline.STATES].index("RUNNING")


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
        over every event's time a query."""
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
        lane's sorted times (no pass over every event)."""
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
    """Per lane id, what a payload says of it: its label, the label's pieces, ours and the
    records' in turn (``parts``: ``lane_labels.label_parts``, so the page isolates each of
    the records'), and its group (run id), kind and run as positions in ``run_ids`` (every
    lane's run id, once each, sorted), ``contract.KINDS`` and ``sorted(runs)``. A store makes
    them again only when lanes or runs were added (a big job's lanes are not walked per
    request)."""

    columns: dict[str, np.ndarray]
    run_ids: list[str]

    @classmethod
    def of(
        cls,
        lanes: Sequence[timeline.Lane],
        lane_runs: Sequence[str],
        runs: Sequence[str],
        parts: Sequence[list[str]] | None = None,
    ) -> LaneFields:
        """The fields of ``lanes``, each first seen in its ``lane_runs`` entry, of ``runs``
        (``parts``: each lane's ``label_parts`` made already, else made here)."""
        run_ids = sorted({lane.group for lane in lanes})
        group = {g: i for i, g in enumerate(run_ids)}
        run = {r: i for i, r in enumerate(sorted(runs))}
        kind = {k: i for i, k in enumerate(contract.KINDS)}
        made = map(label_parts, lanes) if parts is None else parts
        pieces = np.empty(len(lanes), dtype=object)  # lists of strings, not a 2-d array
        for i, found in enumerate(made):
            pieces[i] = found
        columns = {
            "label": np.array([lane.label for lane in lanes], dtype=object),
            "parts": pieces,
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
