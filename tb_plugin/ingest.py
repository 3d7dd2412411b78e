"""How the timeline store turns a chunk of records into events: decoding, then keeping.

Decoding is pure (:func:`decode_chunk`: records in, numpy columns and payloads out, no store
state), so it may run anywhere: in TensorBoard's process, or in a helper process on another
core (:mod:`tb_plugin.read_workers`) while the store keeps the chunk before. Keeping is
:class:`Ingest`'s, a part of :class:`~tb_plugin.store.TimelineStore` (its base): it appends a
decoded chunk's events to the store's append-only columns, interning each distinct record's
fields once. Versions 1 to 3 come as distinct payloads, each decoded once
(``contract.decode_record``); versions 4 and 5 as numpy columns (:mod:`tb_plugin.batch_events`),
one decode per group of alike events, made with the chunk (in the helper that read it). The store owns the state it works on (see
``TimelineStore.__init__``) and the lock it runs under.
"""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tb_monitor import contract
from tb_plugin.batch_events import Described, Groups, add_records, group_events
from tb_plugin.columnar_merge import ColumnarEvents, merge_columnar
from tb_plugin.interned import Interner, Records, Texts
from tb_plugin.records import Series

if TYPE_CHECKING:
    from tb_plugin.event_files import Places

__all__ = ["ColumnarChunk", "DecodedChunk", "Ingest", "SeriesEvents", "decode_chunk", "kept_events"]

#: What ``contract.decode_record`` raises on a payload the store leaves out (a foreign or
#: corrupt record under a timeline tag): one rule for keeping events and reading them back.
_UNDECODABLE = (ValueError, TypeError, AttributeError)


@dataclass(frozen=True)
class SeriesEvents:
    """One series' new events of content versions 1 to 3."""

    run: str
    kind: str
    steps: np.ndarray  # uintc, per record: its TensorBoard step
    decoded: contract.DecodedRecords


@dataclass(frozen=True)
class ColumnarChunk:
    """Many series' version-4 and -5 events, merged and grouped (``batch_events``)."""

    events: ColumnarEvents  # its times and segments (the values are in ``groups``)
    groups: Groups  # without their payloads: ``rows`` holds them decoded
    #: Per group, its payload decoded (``contract.decode_record``), or why it could not be:
    #: decoded where the chunk is (a helper process), not in TensorBoard's, which only keeps.
    rows: list[dict[str, Any] | str]
    runs: list[str]  # per series
    kinds: list[str]  # per series
    record_steps: np.ndarray  # uintc, per record: its TensorBoard step


@dataclass
class DecodedChunk:
    """A chunk of series' new records, decoded: what the store keeps."""

    series: list[SeriesEvents] = dataclasses.field(default_factory=list)
    columnar: ColumnarChunk | None = None
    newest: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)  # step read
    errors: list[tuple[str, str, int, str]] = dataclasses.field(default_factory=list)
    #: Read from event files: where each file's next read starts, and where each record of
    #: each series was (``EventFiles.advance``).
    ends: dict[str, int] = dataclasses.field(default_factory=dict)
    places: Places | None = None


def decode_chunk(
    data: Mapping[str, Mapping[str, Series]],
    runs: list[str],
    tags: list[str],
    last: Mapping[tuple[str, str], int],
) -> DecodedChunk:
    """The records of ``runs`` x ``tags`` in ``data`` past each series' step ``last`` read,
    decoded; an undecodable record is left out and named in ``errors`` (run, tag, step, why)."""
    out, pending = DecodedChunk(), _Pending()
    for run in runs:
        for tag in tags:
            series = data.get(run, {}).get(tag)
            if series is not None:
                _decode_series(run, tag, series, last.get((run, tag), -1), out, pending)
    if pending.records:
        events = merge_columnar(pending.records)
        record_series = np.asarray(pending.record_series, dtype=np.int64)
        groups = group_events(events, record_series, pending.kinds)
        rows = [
            _row(pending.kinds[series], payload)
            for series, payload in zip(groups.series, groups.payloads, strict=True)
        ]
        groups = dataclasses.replace(groups, payloads=[])
        steps = np.asarray(pending.record_steps, dtype=np.uintc)
        kept = dataclasses.replace(events, values={}, position={})  # grouped: not needed again
        out.columnar = ColumnarChunk(kept, groups, rows, pending.runs, pending.kinds, steps)
    return out


def _row(kind: str, payload: Any) -> dict[str, Any] | str:
    """A group's payload decoded, or why it cannot be."""
    try:
        return contract.decode_record(kind, payload)
    except _UNDECODABLE as exc:
        return f"{type(exc).__name__}: {exc}"


def kept_events(kind: str, record: tuple[Sequence[str | bytes], float, bool]) -> list[str]:
    """One record's events as the store keeps them, in the order their ids follow: each one's
    JSON, those ``contract.decode_record`` cannot read left out (what the details panel reads
    back, ``TimelineStore.event``)."""
    decoded = contract.decode_records([record])
    readable = [_decodes(kind, payload) for payload in decoded.payloads]
    return [decoded.payloads[p] for p in decoded.payload.tolist() if readable[p]]


def _decodes(kind: str, payload: str) -> bool:
    try:
        contract.decode_record(kind, payload)
    except _UNDECODABLE:
        return False
    return True


def _decode_series(
    run: str, tag: str, series: Series, last: int, out: DecodedChunk, pending: _Pending
) -> None:
    """A series' records past step ``last``: versions 1 to 3 into ``out``, the others into
    ``pending`` (merged with many series' at once)."""
    kind = contract.kind_of_tag(tag)
    if kind is None or not series.steps:
        return
    out.newest[(run, tag)] = max(last, series.steps[-1])
    fresh = [i for i, step in enumerate(series.steps) if step > last]
    if not fresh:
        return
    records = series.records
    if len(fresh) < len(records):
        records = [records[i] for i in fresh]
    decoded = contract.decode_records(records, columnar=True)
    for position, why in decoded.errors:
        out.errors.append((run, tag, series.steps[fresh[position]], f"ValueError: {why}"))
    steps = np.minimum(np.asarray(series.steps, dtype=np.int64)[fresh], 2**32 - 1)
    pending.add(run, kind, steps.tolist(), decoded.columnar)
    if len(decoded.times):
        decoded.columnar = []
        out.series.append(SeriesEvents(run, kind, steps.astype(np.uintc), decoded))


class _Pending:
    """Version-4 and -5 records of many series, waiting to be merged together."""

    def __init__(self) -> None:
        self.records: list[contract.ParsedRecord] = []
        self.record_series: list[int] = []  # per record: its series
        self.record_steps: list[int] = []  # per record: its TensorBoard step
        self.runs: list[str] = []  # per series
        self.kinds: list[str] = []  # per series

    def add(self, run: str, kind: str, steps: list[int], found: list[tuple[int, Any]]) -> None:
        """A series' records (``found``: position among ``steps``, record, or a run of
        records from there, ``contract.SteppedRecords``)."""
        if not found:
            return
        series = len(self.runs)
        self.runs.append(run)
        self.kinds.append(kind)
        for position, record in found:
            self.records.append(record)
            if type(record) is contract.SteppedRecords:
                self.record_series += [series] * len(record)
                self.record_steps += steps[position : position + len(record)]
            else:
                self.record_series.append(series)
                self.record_steps.append(steps[position])


class Ingest:
    """Keeping decoded chunks in the store's columns (a mixin of ``TimelineStore``)."""

    _folded: int  # events already in the store's sorted columns; the others are appended
    _t: array.array
    _rec: array.array
    _record_first: array.array
    _record_step: array.array
    _record_events: np.ndarray  # per record: how many events came on it (not drawn elsewhere)
    _records: Records
    _span_rows: list[dict[str, Any]]
    _span_recs: array.array
    _last_step: dict[tuple[str, str], int]
    _states: Interner
    _runs: Interner
    _names: Interner
    _msgs: Interner
    _texts: Texts
    _skip: Callable[[str, str, int, str], None]  # count and log an undecodable record
    _row_lane: Callable[[Mapping[str, Any]], int]  # a decoded record's lane id

    def _keep(self, chunk: DecodedChunk) -> int:
        """Append a decoded chunk's events; return how many."""
        self._last_step.update(chunk.newest)
        for run, tag, step, why in chunk.errors:
            self._skip(run, tag, step, why)
        added = sum(self._append(s.run, s.kind, s.steps, s.decoded) for s in chunk.series)
        if chunk.columnar is not None:
            added += self._append_columnar(chunk.columnar)
        return added

    def _append(
        self, run: str, kind: str, steps: np.ndarray, decoded: contract.DecodedRecords
    ) -> int:
        """Append the events of one series' new records (``steps``: each record's TensorBoard
        step); return how many were decodable. Whole columns at a time: a day holds millions."""
        known, rows = self._records.ids, self._records.row
        recs: list[int] = []  # per payload its record, -1 when undecodable
        for position, raw in enumerate(decoded.payloads):
            rec = known.get((run, kind, raw))
            if rec is None:
                try:
                    row = contract.decode_record(kind, raw)
                except _UNDECODABLE as exc:
                    # A foreign or corrupt record under our tag: skip it rather than fail the view.
                    users = np.flatnonzero(decoded.payload == position)[:1]
                    step = int(steps[decoded.record[users]][0]) if len(users) else -1
                    why = f"{type(exc).__name__}: {exc}"
                    self._skip(run, contract.timeline_tag(kind), step, why)
                    recs.append(-1)
                    continue
                row.update(run=run, kind=kind, wall_time=0.0)
                rec = known[(run, kind, raw)] = self._decode(row)
            recs.append(rec)
        payload_rec = np.asarray(recs, dtype=np.intc)
        payload, times, record = decoded.payload, decoded.times, decoded.record
        if -1 in recs:  # drop the undecodable events
            kept = payload_rec[payload] >= 0
            payload, times, record = payload[kept], times[kept], record[kept]
        bounding = np.asarray([r >= 0 and rows[r] is not None for r in recs], dtype=bool)
        return self._append_events(times, record, steps, payload_rec[payload], bounding[payload])

    def _append_columnar(self, chunk: ColumnarChunk) -> int:
        """Append many series' version-4 and -5 events at once: one row per group of alike
        events (decoded with the chunk, ``ColumnarChunk.rows``), then a record per (group,
        message), in numpy (a day's 7,000 series cost a few numpy calls, not each its own);
        return how many were decodable."""
        events, groups = chunk.events, chunk.groups
        described: list[Described] = []
        for series, row in zip(groups.series, chunk.rows, strict=True):
            run, kind = chunk.runs[series], chunk.kinds[series]
            if isinstance(row, str):  # undecodable
                segment = int(np.argmax(groups.group == len(described)))
                step = int(chunk.record_steps[int(events.segment_record[segment])])
                self._skip(run, contract.timeline_tag(kind), step, row)
                described.append(None)
                continue
            row.update(run=run, kind=kind, wall_time=0.0)
            described.append(self._describe(row))
        new = add_records(groups, described, self._msgs, self._texts, self._records)
        rec, bounding = np.repeat(new.rec, events.length), np.repeat(new.bounding, events.length)
        times, record = events.times, events.record()
        if not new.keep.all():
            keep = np.repeat(new.keep, events.length)
            times, record, rec, bounding = times[keep], record[keep], rec[keep], bounding[keep]
        return self._append_events(times, record, chunk.record_steps, rec, bounding)

    def _append_events(
        self,
        times: np.ndarray,
        record: np.ndarray,
        steps: np.ndarray,
        rec: np.ndarray,
        bounding: np.ndarray,
    ) -> int:
        """Append events (their times, the input position of the TensorBoard record each came
        in, whose step is ``steps[position]``, their records, and whether each may open or
        close an interval); return how many."""
        first = self._folded + len(self._t)  # the first new event's id
        starts = np.flatnonzero(np.diff(record, prepend=-1))  # each record's first event
        self._record_first.frombytes((starts + first).astype(np.int64).tobytes())
        self._record_step.frombytes(steps[record[starts]].tobytes())
        rows, where = self._records.row, np.flatnonzero(bounding)
        recs = rec[where].astype(np.intc)
        self._span_rows.extend(
            {**rows[r], "wall_time": t, "_id": first + k}
            for k, r, t in zip(where.tolist(), recs.tolist(), times[where].tolist(), strict=True)
        )
        self._span_recs.frombytes(recs.tobytes())
        self._t.frombytes(times.tobytes())
        self._rec.frombytes(rec.astype(np.intc).tobytes())
        # Counted as they come: counted at the sort, a day's 18M events cost its tail ~0.3 s.
        counts = np.bincount(rec, minlength=len(self._records))
        counts[: len(self._record_events)] += self._record_events
        self._record_events = counts
        return len(times)

    def _decode(self, row: dict[str, Any]) -> int:
        """Intern a decoded record's fields; keep it when it may open or close an interval."""
        ids, message, (pre, post), spans = self._describe(row)
        msg = self._msgs(message)
        text = self._texts.extend(np.asarray([pre]), np.asarray([msg]), np.asarray([post]))
        return self._records.add((*ids, msg, text), spans)

    def _describe(self, row: dict[str, Any]) -> Described:
        """A decoded record's lane, state, kind, run and name ids, its message, its search
        text's parts around the message (lower case) and the row when it may open or close
        an interval (else None)."""
        kind, run = row["kind"], row["run"]
        state = str(row["state"] or "")
        name = str(row["name"] or "")
        message = row["message"]
        if kind == contract.MONITOR and not message:
            message = ", ".join(f"{k}={v}" for k, v in sorted(row["metadata"].items()))
        message = str(message or "")
        spans = kind in (contract.WORKER, contract.AGENT) or (
            kind == contract.RENDEZVOUS and not contract.is_heartbeat(row)
        )
        ids = (
            self._row_lane(row),
            self._states(state),
            contract.KINDS.index(kind),
            self._runs(run),
            self._names(name),
        )
        host, error = row["hostname"] or "", row["error_trace"] or ""
        parts = (
            self._texts.part(f"{name} ".lower()),
            self._texts.part(f" {state} {host} {error} {run}".lower()),
        )
        return ids, message, parts, row if spans else None
