"""How records become event-file bytes: protobuf wire format by hand for the hot path.

``RecordEncoder`` turns a writer's queued records into framed Events, in order, and allocates
each tag's steps; the writer only queues and hands the bytes to its event file.

An ``Event`` is wall_time (field 1, double), step (field 2, varint), summary (field 5). Plain
scalars, the bulk of what a job writes, are encoded here without building a protobuf message;
every scalar of a tag shares the bytes after its step (its *prefix*), so only the time, step,
value and checksum are computed per record. ``encode_scalars`` is the same encoding in C
(``_encoding.c``, built when a compiler is available), byte for byte; it is None without it.
"""

from __future__ import annotations

import logging
import math
import struct
from typing import Any

from tb_monitor import _env, _tensors, contract
from tb_monitor.logdir import tfrecord
from tb_monitor.sinks import summaries
from tb_monitor.sinks.batching import Batch, TimelineBatcher

__all__ = [
    "BUILT",
    "COLUMNAR",
    "FILE_VERSION",
    "SCALAR",
    "SCALARS",
    "SUMMARY",
    "TEXT",
    "TIMELINE",
    "RecordEncoder",
    "append_scalars",
    "encode_scalars",
    "summary_record",
    "version_record",
]

#: Tells TensorBoard's Python loader not to purge on step resets.
FILE_VERSION = "brain.Event:2"

# What a queued record holds, its first element: (SCALAR, tag, value, wall_time, step | None),
# (SCALARS, {tag: value}, wall_time), (TEXT, tag, text, wall_time), (TIMELINE, tag, payload,
# wall_time, heartbeat | None), (SUMMARY, summary, None, wall_time, step | None), (BUILT, build,
# None, wall_time): ``build()`` returns a whole ``Event``, made on the writer's thread.
# ``_encoding.c`` reads SCALARs.
SCALAR, SCALARS, TEXT, TIMELINE, SUMMARY, BUILT = range(6)

_log = logging.getLogger(__name__)

#: Whether timeline records are written in content version 4 (columns); ``0`` writes version 3,
#: for readers older than version 4 (and benchmarks comparing the two).
COLUMNAR = _env.flag("TB_MONITOR_COLUMNAR", True)

#: The C twin of append_scalars, byte-identical (see _encoding.c), or None.
encode_scalars = _env.c_twin("tb_monitor.sinks._encoding", "encode_scalars")

_WALL_TIME = struct.Struct("<Bd")
_FLOAT = struct.Struct("<f")
_pack_float = _FLOAT.pack
_SMALL_VARINTS = [bytes((n,)) for n in range(128)]
_frame = tfrecord.frame


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    value &= 0xFFFFFFFFFFFFFFFF  # int64 fields encode negatives as 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_STEP_SMALL = [b"\x10" + v for v in _SMALL_VARINTS]
_STEP_2 = struct.Struct("<BBB")
_STEP_3 = struct.Struct("<BBBB")


def _step_field(step: int) -> bytes:
    """Event.step (field 2) with its key; steps below 2**21 without a loop (the hot path)."""
    if 0 <= step < 0x80:
        return _STEP_SMALL[step]
    if 0 <= step < 0x4000:
        return _STEP_2.pack(0x10, (step & 0x7F) | 0x80, step >> 7)
    if 0 <= step < 0x200000:
        return _STEP_3.pack(0x10, (step & 0x7F) | 0x80, ((step >> 7) & 0x7F) | 0x80, step >> 14)
    return b"\x10" + _varint(step)


def _event_head(wall_time: float, step: int) -> bytes:
    return _WALL_TIME.pack(0x09, wall_time) + _step_field(step)


def _scalar_prefix(tag: str) -> bytes:
    """Everything of a scalar event after the step and before the float: fixed per tag."""
    raw = tag.encode()
    value = b"\x0a" + _varint(len(raw)) + raw + b"\x15"  # Summary.Value: tag, simple_value
    value_len = len(value) + 4
    summary = b"\x0a" + _varint(value_len)  # Summary.value
    return b"\x2a" + _varint(len(summary) + value_len) + summary + value


def append_scalars(
    out: bytearray,
    scalars: Any,
    wall_time: float,
    step: int | None,
    prefixes: dict[str, bytes],
    steps: dict[str, int],
) -> None:
    """Frame one scalar Event per ``(tag, value)`` of ``scalars`` onto ``out``.

    Every scalar of a tag shares the bytes after the step (``prefixes``), and records of one
    length share their framing header (``tfrecord.frame``): only the time, step, value and the data's
    checksum are computed per record. ``step`` None means each tag's next step.
    """
    head = _WALL_TIME.pack(0x09, wall_time)
    for tag, value in scalars:
        prefix = prefixes.get(tag)
        if prefix is None:
            prefix = prefixes[tag] = _scalar_prefix(tag)
        this_step = steps.get(tag, 0) if step is None else step
        steps[tag] = this_step + 1
        out += _frame(head + _step_field(this_step) + prefix + _float32(value))


def summary_record(wall_time: float, step: int, summary: Any) -> bytes:
    """One framed Event holding a prebuilt ``Summary`` (TensorBoard's protos)."""
    raw = summary.SerializeToString()
    return tfrecord.frame(_event_head(wall_time, step) + b"\x2a" + _varint(len(raw)) + raw)


def built_record(build: Any, wall_time: float) -> bytes:
    """One framed ``Event`` as ``build()`` makes it; its wall time is ``wall_time`` unless set."""
    event = build()
    if not event.wall_time:
        event.wall_time = wall_time
    return tfrecord.frame(event.SerializeToString())


def version_record(wall_time: float) -> bytes:
    """The framed first Event of every file: its ``file_version``."""
    head = _WALL_TIME.pack(0x09, wall_time) + b"\x1a" + _varint(len(FILE_VERSION))
    return tfrecord.frame(head + FILE_VERSION.encode())


def _float32(value: float) -> bytes:
    try:
        return _pack_float(value)
    except (OverflowError, struct.error):  # beyond float32 (an int raises struct.error)
        return _pack_float(math.inf if value > 0 else -math.inf)  # what a float32 cast gives


class RecordEncoder:
    """A writer's records as framed Events, in order, with each tag's steps allocated.

    ``next_steps`` holds each tag's next step (one above what the run directory already holds:
    ``logdir.resume``). Timeline records wait in a ``TimelineBatcher`` and come out of
    ``take_timeline`` as batches, each encoded by ``timeline_record``. A record that cannot be encoded (a bug: the caller checked
    its arguments) is logged, naming ``run_dir``, and counted in ``failed``.
    """

    def __init__(self, next_steps: dict[str, int], run_dir: str) -> None:
        self.next_steps = next_steps
        self.failed = 0
        self._prefixes: dict[str, bytes] = {}
        self._batcher = TimelineBatcher()
        self._run_dir = run_dir

    def encode(self, items: list[tuple], tensors: bool = False) -> bytearray:
        """``items`` (queued records) encoded in order; ``tensors``: some values are tensors.

        Runs of plain scalars (the bulk) go to the C encoder when it is built; it hands back
        every record it does not cover, which is encoded here in Python, one at a time.
        """
        if tensors:
            _resolve_tensors(items)
        prefixes, steps = self._prefixes, self.next_steps
        count, out, index = len(items), bytearray(), 0
        while index < count:
            if encode_scalars is not None:
                index = encode_scalars(items, index, prefixes, steps, out)
                if index == count:
                    break
            item = items[index]
            index += 1
            try:
                kind = item[0]
                if kind == SCALAR:
                    append_scalars(out, ((item[1], item[2]),), item[3], item[4], prefixes, steps)
                elif kind == SCALARS:
                    append_scalars(out, item[1].items(), item[2], None, prefixes, steps)
                elif kind == TIMELINE:
                    self._batcher.add(item[1], item[2], item[3], heartbeat=item[4])
                elif kind == BUILT:
                    out += built_record(item[1], item[3])
                else:
                    out += self._summary_record(item)
            except Exception:
                self.failed += 1
                _log.exception("tb_monitor could not encode a record for %s", self._run_dir)
        return out

    def take_timeline(self, seal: bool = False) -> list[Batch]:
        """The timeline batches that are ready (every open run too when ``seal``), each to be
        encoded as one record (``timeline_record``)."""
        return self._batcher.take(seal)

    def timeline_record(self, batch: Batch) -> bytes:
        """``batch`` as one record at its tag's next step: content version 4
        (``contract.encode_columnar``), or 3 (``contract.encode_batch``) for a batch with a
        payload that is no JSON object ``json.dumps`` gives back as it came."""
        kind = contract.kind_of_tag(batch.tag)
        strings = None
        if COLUMNAR:
            strings = contract.encode_columnar(batch.times, batch.payloads, batch.payload_ids)
        if strings is None:
            strings = [contract.encode_batch(batch.times, batch.payload_ids), *batch.payloads]
        summary = summaries.timeline_batch_summary(kind, strings[0], strings[1:])
        step = self.next_steps.get(batch.tag, 0)
        self.next_steps[batch.tag] = step + 1
        return summary_record(batch.times[0], step, summary)

    @property
    def held(self) -> int:
        """Timeline records waiting for their batch."""
        return len(self._batcher)

    @property
    def open_runs(self) -> int:
        """Runs of keep-alives held open."""
        return self._batcher.open_runs

    def clear(self) -> None:
        """Forget the timeline records waiting for their batch (a forked child's copy)."""
        self._batcher.clear()

    def _summary_record(self, item: tuple) -> bytes:
        """A text or prebuilt summary record, built with TensorBoard's protos."""
        kind, tag_or_summary, payload, wall_time, *step = item
        if kind == TEXT:
            tag, summary = tag_or_summary, summaries.text_summary(tag_or_summary, payload)
        else:
            summary, tag = tag_or_summary, tag_or_summary.value[0].tag
        this_step = self.next_steps.get(tag, 0) if not step or step[0] is None else step[0]
        self.next_steps[tag] = this_step + 1
        return summary_record(wall_time, this_step, summary)


def _resolve_tensors(items: list[tuple]) -> None:
    """Replace the tensor values of scalar ``items`` by floats, one device copy per batch."""
    found = [
        i
        for i, item in enumerate(items)
        if item[0] == SCALAR and type(item[2]) is not float and type(item[2]) is not int
    ]
    if not found:
        return
    values = _tensors.resolve([items[i][2] for i in found])
    for i, value in zip(found, values, strict=True):
        items[i] = (*items[i][:2], value, *items[i][3:])
