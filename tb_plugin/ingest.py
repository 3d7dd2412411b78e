"""How the timeline store keeps decoded chunks (:mod:`tb_plugin.decoding`) as events.

Keeping is :class:`Ingest`'s, a part of :class:`~tb_plugin.store.TimelineStore` (its base): it
appends a decoded chunk's events to the store's append-only columns, interning each distinct
record's fields once. The store owns the state it works on (see ``TimelineStore.__init__``)
and the lock it runs under.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tb_monitor import contract
from tb_plugin.batch_events import Described, add_records
from tb_plugin.decoding import UNDECODABLE, ColumnarChunk, DecodedChunk
from tb_plugin.interned import Interner, Records, Texts

__all__ = ["Ingest"]


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
                except UNDECODABLE as exc:
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
