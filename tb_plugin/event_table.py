"""Every event the timeline store read, as columns, and the interned values they stand for.

An event costs its time, its record's id and its own id, kept once and sorted (those read
since the last sort are appended until the next: :meth:`EventTable.fold`), the ids as runs
(:mod:`tb_plugin.runlength`). What an event shows is its record's
(:class:`~tb_plugin.interned.Records`: each distinct record once, its fields interned), so
identical payloads (keep-alive heartbeats) are decoded once in all. :class:`EventTable` keeps a
decoded chunk's events (:mod:`tb_plugin.decoding`): versions 1 to 3 payload by payload, decoded
once each (``contract.decode_record``), versions 4 and 5 group by group
(:mod:`tb_plugin.batch_events`). A record that cannot be decoded is left out, counted and logged
(:class:`SkippedRecords`), never fatal. The store holds the lock the table is used under.
"""

from __future__ import annotations

import array
import bisect
import logging
from typing import Any

import numpy as np

from tb_monitor import contract, timeline
from tb_plugin.batch_events import Described, add_records
from tb_plugin.columns import SortedEvents
from tb_plugin.decoding import UNDECODABLE, ColumnarChunk, DecodedChunk
from tb_plugin.interned import Interner, Records, Texts
from tb_plugin.lanes import Lanes
from tb_plugin.read_back import UnknownEventError

__all__ = ["EventTable", "SkippedRecords"]

#: What ``nbytes`` counts per sorted event (its time), per record (its fields, search text and
#: row slot), per interned string and per interval row: what such objects cost in CPython.
_SORTED_BYTES, _RECORD_BYTES, _STRING_BYTES, _ROW_BYTES = 8, 84, 120, 1200
#: Skipped records remembered with their details (all of them are counted).
_SKIPPED_DETAILS = 100
_UNSEEN: Any = object()  # a record not yet seen among the bounding events
_log = logging.getLogger(__name__)


class SkippedRecords:
    """Records skipped as undecodable: each counted and logged with its run, tag and step, the
    first ones' details kept for the ``status`` route."""

    def __init__(self) -> None:
        self._count = 0
        self._details: list[dict[str, Any]] = []  # the first _SKIPPED_DETAILS of them

    def add(self, run: str, tag: str, step: int, why: str) -> None:
        """Count and log one undecodable record."""
        self._count += 1
        error = why[:300]
        if len(self._details) < _SKIPPED_DETAILS:
            self._details.append({"run": run, "tag": tag, "step": int(step), "error": error})
        _log.warning(
            "run %r, tag %r, step %d: undecodable record skipped: %s", run, tag, step, error
        )

    def summary(self) -> dict[str, Any]:
        """``count``, and the first ones' run, tag, step and error."""
        return {"count": self._count, "records": list(self._details)}


class EventTable:
    """The store's events: sorted once (``sorted_events``) and appended since (``t``, ``rec``),
    each event's id its position in the order they came; the TensorBoard records they came in;
    the distinct records and the interned values their fields stand for."""

    def __init__(self, lanes: Lanes, skipped: SkippedRecords) -> None:
        self._lanes = lanes  # gives each decoded record its lane id
        self._skipped = skipped
        #: The events last sorted at rest: their drawn records and the original records of
        #: those drawn otherwise; the first ``folded`` event ids.
        self.sorted_events = SortedEvents.empty()
        self.t = array.array("d")  # appended since: each one's time
        self.rec = array.array("i")  # and its record in ``records`` (a C int: np.intc)
        # The TensorBoard records the events came in, as appended: each one's first event id
        # and its step (an event's step is its record's: a TensorBoard record per event would
        # cost far more than one per run of keep-alives).
        self.record_first = array.array("q")
        self.record_step = array.array("I")
        #: Per record: how many events came on it (counted as they come, not at each sort).
        self.record_events = np.zeros(0, dtype=np.int64)
        self.records = Records()
        self.states = Interner()
        self.runs = Interner()
        self.names = Interner()
        self.msgs = Interner()
        self.texts = Texts(self.msgs.values)
        self.labels = Interner()  # interval labels
        for state in timeline.STATES:  # first, so a known state's id is its severity
            self.states(state.name)
        # Events that may open or close an interval, for timeline.spans, and that the restart
        # analysis reads: every one but the keep-alive heartbeats, which are most of a long
        # job's events and neither, and of a record that only marks a time (the sync of every
        # keep-alive round) only its earliest and newest event; each with its event id, ``_id``.
        self.span_rows: list[dict[str, Any]] = []
        self.span_recs = array.array("i")  # per span row: its record (and so its lane)
        # Per record: None when each of its events is a span row, else the positions of the
        # span rows of its earliest and newest events (``timeline.marks_time_only``).
        self._time_marks: dict[int, list[int] | None] = {}

    @property
    def folded(self) -> int:
        """How many events are in the sorted copy; the others are appended."""
        return len(self.sorted_events)

    def __len__(self) -> int:
        return self.folded + len(self.t)

    def keep(self, chunk: DecodedChunk) -> int:
        """Append a decoded chunk's events, skipping what cannot be decoded; return how many."""
        for run, tag, step, why in chunk.errors:
            self._skipped.add(run, tag, step, why)
        added = sum(self._append(s.run, s.kind, s.steps, s.decoded) for s in chunk.series)
        if chunk.columnar is not None:
            added += self._append_columnar(chunk.columnar)
        return added

    def with_appended(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every event, the sorted ones each on its own record, then the appended ones: times,
        records, ids (``SortedEvents.with_appended``; on a first sort, views of the appended
        columns, to be read, not written)."""
        appended_t = np.frombuffer(self.t, dtype=np.float64)
        return self.sorted_events.with_appended(appended_t, np.frombuffer(self.rec, np.int32))

    def fold(self, events: SortedEvents) -> None:
        """Keep ``events`` (every event) as the one sorted copy: the appended ones are in it."""
        self.sorted_events = events
        self.t, self.rec = array.array("d"), array.array("i")

    def locate(self, event_id: int) -> tuple[float, int, int, int]:
        """An event's time, its own record, and the step and first event id of the
        TensorBoard record it came in; an UnknownEventError for an id the table lacks."""
        if not 0 <= event_id < len(self):
            raise UnknownEventError(f"unknown event id {event_id!r}")
        folded = self.folded
        if event_id < folded:
            wall_time, rec = self.sorted_events.find(event_id)
        else:
            wall_time, rec = self.t[event_id - folded], self.rec[event_id - folded]
        record = bisect.bisect_right(self.record_first, event_id) - 1
        return wall_time, rec, self.record_step[record], self.record_first[record]

    def nbytes(self) -> int:
        """About the memory the events hold: the sorted and appended columns, and per record,
        interned string and interval row what such objects cost in CPython."""
        appended = (self.t, self.rec, self.record_first, self.record_step)
        arrays = sum(a.itemsize * len(a) for a in appended)
        strings = len(self.msgs.values) + len(self.names.values)
        return (
            arrays
            + self.sorted_events.ids.nbytes
            + self.sorted_events.rec.nbytes
            + _SORTED_BYTES * len(self)
            + _RECORD_BYTES * len(self.records)
            + _STRING_BYTES * strings
            + _ROW_BYTES * len(self.span_rows)
        )

    def _append(
        self, run: str, kind: str, steps: np.ndarray, decoded: contract.DecodedRecords
    ) -> int:
        """Append the events of one series' new records (``steps``: each record's TensorBoard
        step); return how many were decodable. Whole columns at a time: a long job holds many."""
        known, rows = self.records.ids, self.records.row
        recs: list[int] = []  # per payload its record, -1 when undecodable
        for position, raw in enumerate(decoded.payloads):
            rec = known.get((run, kind, raw))
            if rec is None:
                try:
                    row = contract.decode_record(kind, raw)
                except UNDECODABLE as exc:
                    # A foreign or corrupt record under our tag: skip it rather than fail the view.
                    users = np.flatnonzero(decoded.payload == position)[:1]
                    step = int(steps[decoded.record[users]][0]) if len(users) else -1
                    why = f"{type(exc).__name__}: {exc}"
                    self._skipped.add(run, contract.timeline_tag(kind), step, why)
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
        message), in numpy (a big read's many series cost a few numpy calls, not each its own);
        return how many were decodable."""
        events, groups = chunk.events, chunk.groups
        described: list[Described] = []
        for series, row in zip(groups.series, chunk.rows, strict=True):
            run, kind = chunk.runs[series], chunk.kinds[series]
            if isinstance(row, str):  # undecodable
                segment = int(np.argmax(groups.group == len(described)))
                step = int(chunk.record_steps[int(events.segment_record[segment])])
                self._skipped.add(run, contract.timeline_tag(kind), step, row)
                described.append(None)
                continue
            row.update(run=run, kind=kind, wall_time=0.0)
            described.append(self._describe(row))
        new = add_records(groups, described, self.msgs, self.texts, self.records)
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
        first = len(self)  # the first new event's id
        starts = np.flatnonzero(np.diff(record, prepend=-1))  # each record's first event
        self.record_first.frombytes((starts + first).astype(np.int64).tobytes())
        self.record_step.frombytes(steps[record[starts]].tobytes())
        where = np.flatnonzero(bounding)
        self._add_span_rows(where + first, rec[where], times[where])
        self.t.frombytes(times.tobytes())
        self.rec.frombytes(rec.astype(np.intc).tobytes())
        # Counted as they come: counted at the sort, every event would be counted again.
        counts = np.bincount(rec, minlength=len(self.records))
        counts[: len(self.record_events)] += self.record_events
        self.record_events = counts
        return len(times)

    def _add_span_rows(self, ids: np.ndarray, recs: np.ndarray, times: np.ndarray) -> None:
        """Keep the span rows of bounding events (their ids, records and times): every one's,
        but of a record that only marks a time its earliest and newest alone, so that a long
        job's repeated syncs cost two rows, not one an event, and the analyses read the same."""
        rows, span_rows, marks_of = self.records.row, self.span_rows, self._time_marks
        for event, r, t in zip(ids.tolist(), recs.tolist(), times.tolist(), strict=True):
            marks = marks_of.get(r, _UNSEEN)
            if marks is _UNSEEN:
                marks = marks_of[r] = [] if timeline.marks_time_only(rows[r]) else None
            if marks is not None and len(marks) == 2:
                early, late = marks
                if t < span_rows[early]["wall_time"]:
                    span_rows[early] = {**rows[r], "wall_time": t, "_id": event}
                elif t >= span_rows[late]["wall_time"]:
                    span_rows[late] = {**rows[r], "wall_time": t, "_id": event}
                continue  # one between them: its time tells nothing more
            if marks is not None:
                marks.append(len(span_rows))
                if len(marks) == 2 and t < span_rows[marks[0]]["wall_time"]:
                    marks.reverse()
            span_rows.append({**rows[r], "wall_time": t, "_id": event})
            self.span_recs.append(r)

    def _decode(self, row: dict[str, Any]) -> int:
        """Intern a decoded record's fields; keep it when it may open or close an interval."""
        ids, message, (pre, post), spans = self._describe(row)
        msg = self.msgs(message)
        text = self.texts.extend(np.asarray([pre]), np.asarray([msg]), np.asarray([post]))
        return self.records.add((*ids, msg, text), spans)

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
        spans = (
            kind in (contract.WORKER, contract.AGENT)
            or (kind == contract.RENDEZVOUS and not contract.is_heartbeat(row))
            or name == contract.FR_COLLECTIVE  # an imported collective: an interval of its own
        )
        ids = (
            self._lanes.of_row(row),
            self.states(state),
            contract.KINDS.index(kind),
            self.runs(run),
            self.names(name),
        )
        host, error = row["hostname"] or "", row["error_trace"] or ""
        parts = (
            self.texts.part(f"{name} ".lower()),
            self.texts.part(f" {state} {host} {error} {run}".lower()),
        )
        return ids, message, parts, row if spans else None
