"""How a chunk of timeline records becomes events, decoded: pure, so it may run anywhere.

:func:`decode_chunk` takes records and gives numpy columns and payloads, with no store state:
it runs in TensorBoard's process, or in a helper process on another core
(:mod:`tb_plugin.read_workers`) while the store keeps the chunk before; :func:`decode_files`
reads a chunk's ranges of event files first (:mod:`tb_plugin.event_files`). Versions 1 to 3
come as distinct payloads, each decoded by the store once (``contract.decode_record``);
versions 4 and 5 as numpy columns of many series merged (:mod:`tb_plugin.columnar_merge`) and
grouped (:mod:`tb_plugin.batch_events`), one decode per group of alike events, made with the
chunk. The store keeps what comes out (:class:`~tb_plugin.event_table.EventTable`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tb_monitor import contract
from tb_plugin.batch_events import Groups, group_events
from tb_plugin.columnar_merge import ColumnarEvents, merge_columnar
from tb_plugin.event_files import Places, read_ranges
from tb_plugin.provider_store import ChunkRequest
from tb_plugin.records import Series

__all__ = [
    "UNDECODABLE",
    "ColumnarChunk",
    "DecodedChunk",
    "SeriesEvents",
    "decode_chunk",
    "decode_files",
    "kept_events",
]

#: What ``contract.decode_record`` raises on a payload the store leaves out (a foreign or
#: corrupt record under a timeline tag): one rule for keeping events and reading them back.
UNDECODABLE = (ValueError, TypeError, AttributeError)


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


def decode_files(chunk: ChunkRequest, last: Mapping[tuple[str, str], int]) -> DecodedChunk:
    """A chunk's file ranges read and decoded (``last``: each series' step already kept):
    every timeline series found in them."""
    found = read_ranges(chunk.ranges)
    tags = sorted({tag for by_tag in found.series.values() for tag in by_tag})
    decoded = decode_chunk(found.series, chunk.runs, tags, last)
    decoded.ends, decoded.places = found.ends, found.places
    return decoded


def _row(kind: str, payload: Any) -> dict[str, Any] | str:
    """A group's payload decoded, or why it cannot be."""
    try:
        return contract.decode_record(kind, payload)
    except UNDECODABLE as exc:
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
    except UNDECODABLE:
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
