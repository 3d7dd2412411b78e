"""Many version-4 and -5 records' events merged into one set of numpy columns.

The contract reads each record (``contract.decode_records(..., columnar=True)``: a
:class:`~tb_monitor.contract.ParsedRecord`, or a run of them as a
:class:`~tb_monitor.contract.SteppedRecords`); only the plugin's store wants many series'
records as one set of columns, to decode one payload per group of alike events
(:mod:`tb_plugin.batch_events`). So the merge is the plugin's: numpy calls per column, Python
per record only where a column varies within it, and per distinct values (records sharing one
parsed values, a memo's, share them here).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tb_monitor import contract

__all__ = ["ColumnarEvents", "merge_columnar"]

#: A record as the contract reads it: one record, or a run of alike records read at once.
_Record = contract.ParsedRecord | contract.SteppedRecords


@dataclass(frozen=True)
class ColumnarEvents:
    """The events of many version-4 records as numpy columns, in *segments*: a record whose
    events are all alike (a node's keep-alive run) is one segment, each event of another record
    one; so a run of keep-alives costs numpy work per record, not per event."""

    times: np.ndarray  # float64, per event
    length: np.ndarray  # int64, per segment: its events
    segment_record: np.ndarray  # int64, per segment: its record's index
    shapes: list[tuple[str, ...]]
    shape: np.ndarray  # int32, per segment: its shape
    values: dict[str, list[Any]]  # per column: every record's distinct values, one after another
    position: dict[str, np.ndarray]  # int32, per column, per segment: its value's (-1: none)

    def __len__(self) -> int:
        return len(self.times)

    def record(self) -> np.ndarray:
        """Per event, its record's index in the list merged: made when asked, as the segments
        tell it (kept, it would cost 8 bytes an event wherever the columns go)."""
        return np.repeat(self.segment_record, self.length)

    def payload(self, event: int) -> str:
        """Event ``event``'s JSON, byte for byte as it was written."""
        segment = int(np.searchsorted(np.cumsum(self.length), event, side="right"))
        values, position = self.values, self.position
        shape = self.shapes[int(self.shape[segment])]
        return json.dumps({key: values[key][int(position[key][segment])] for key in shape})


@dataclass
class _Scanned:
    """What one pass over the records finds: per record its time, its events, and the number
    of its (values, shapes) pair; per pair its first holder; and the records a column varies
    within, with their positions."""

    t0: np.ndarray  # float64, per record
    counts: np.ndarray  # int64, per record
    which: list[int]  # per record: its pair's number, first seen first
    owners: list[Any]  # per pair: the first record (or parsed values) holding it
    mixed: list[tuple[int, contract.ParsedRecord]]  # (position, record) where a column varies


def merge_columnar(records: Sequence[_Record]) -> ColumnarEvents:
    """Records as one set of columns. A :class:`~tb_monitor.contract.SteppedRecords` counts as
    its records, in its place."""
    found = _scan(records)
    counts, total = found.counts, len(found.counts)
    times = np.repeat(found.t0, counts)
    times += contract.event_offsets(records, counts) * 1e-6
    mixed = np.zeros(total, dtype=bool)
    mixed[[n for n, _ in found.mixed]] = True
    segments = np.where(mixed, counts, 1)  # a record a column varies within: one per event
    first = np.concatenate([[0], np.cumsum(segments)])  # each record's first segment
    segment_record = np.repeat(np.arange(total), segments)
    length = np.where(mixed[segment_record], 1, counts[segment_record])
    per_segment = np.array(found.which, dtype=np.int64)[segment_record]
    shape_ids: dict[tuple[str, ...], int] = {}
    first_shape = [shape_ids.setdefault(r.shapes[0], len(shape_ids)) for r in found.owners]
    shape = np.array(first_shape, dtype=np.int32)[per_segment]
    values, bases = _joined_values(found.owners)
    position = {key: base[per_segment] for key, base in bases.items()}
    for n, r in found.mixed:  # the varying columns, event by event
        span = slice(int(first[n]), int(first[n + 1]))
        if r.shape_ix is not None:
            local = np.array([shape_ids.setdefault(s, len(shape_ids)) for s in r.shapes])
            shape[span] = local[r.shape_ix]
        for key, ix in r.ix.items():
            moved = ix.astype(np.int32) + bases[key][found.which[n]]
            position[key][span] = np.where(ix == len(r.values[key]), -1, moved)
    return ColumnarEvents(times, length, segment_record, list(shape_ids), shape, values, position)


def _scan(records: Sequence[_Record]) -> _Scanned:
    """One pass over ``records``: Python per record, or per run of a stepped record's records
    that share parsed values (a node's run shares them)."""
    t0_parts: list[Any] = []
    count_parts: list[Any] = []
    which: list[int] = []
    number: dict[tuple[int, int], int] = {}
    owners: list[Any] = []
    mixed: list[tuple[int, contract.ParsedRecord]] = []
    total = 0
    for r in records:
        if type(r) is contract.SteppedRecords:
            t0_parts.append(r.t0)
            count_parts.append(r.events)
            last, pair = None, -1
            for found in r.values:
                if found is not last:
                    last, pair = found, _pair_number(found, number, owners)
                which.append(pair)
            total += len(r)
            continue
        t0_parts.append((r.t0,))
        count_parts.append((r.events,))
        which.append(_pair_number(r, number, owners))
        if r.ix or r.shape_ix is not None:
            mixed.append((total, r))
        total += 1
    counts = np.concatenate([np.zeros(0, dtype=np.int64), *count_parts])
    t0 = np.concatenate([np.zeros(0), *t0_parts])
    return _Scanned(t0, counts, which, owners, mixed)


def _joined_values(owners: list[Any]) -> tuple[dict[str, list[Any]], dict[str, np.ndarray]]:
    """Every pair's values, column by column, one pair's after another; and per column, per
    pair, where its first value is (-1: the pair lacks the column)."""
    values: dict[str, list[Any]] = {}
    bases: dict[str, np.ndarray] = {}
    for d, r in enumerate(owners):
        for key, found in r.values.items():
            if key not in values:
                values[key], bases[key] = [], np.full(len(owners), -1, dtype=np.int32)
            bases[key][d] = len(values[key])
            values[key].extend(found)
    return values, bases


def _pair_number(holder: Any, number: dict[tuple[int, int], int], owners: list[Any]) -> int:
    """The number of ``holder``'s (values, shapes) pair (a record's, or its parsed values'),
    numbered first seen first; its first holder kept in ``owners``."""
    key = (id(holder.values), id(holder.shapes))
    found = number.get(key)
    if found is None:
        found = number[key] = len(owners)
        owners.append(holder)
    return found
