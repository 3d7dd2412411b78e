"""Sorted int32 columns kept as runs: the sorted events' ids and records.

Sorted by (lane, time), a TensorBoard record's events lie in a row, and a node's keep-alives
are runs of one record's events; so the sorted events' id and record columns are kept as runs
(where each begins, and what it holds), a few bytes a run instead of four an event, and read
back like the int32 columns they stand for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EventIds", "EventRecords", "ranges"]


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
        span made run by run, a search per span, not per event."""
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
    appended in a row and sorted in a row (a node's lane, in time), so a long job's ids are
    far fewer runs than ids. Indexed like the int32 column it stands for."""

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
    node's keep-alives are runs of a record's events, so a long job's events are far fewer
    runs than events. Where runs would cost more than the column (distinct events, a record
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


def ranges(firsts: np.ndarray, lasts: np.ndarray) -> np.ndarray:
    """``firsts[i] .. lasts[i] - 1`` for each i, one after another."""
    lengths = lasts - firsts
    return np.repeat(firsts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
