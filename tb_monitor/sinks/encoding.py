"""How records become event-file bytes: protobuf wire format by hand for the hot path.

An ``Event`` is wall_time (field 1, double), step (field 2, varint), summary (field 5). Plain
scalars, the bulk of what a job writes, are encoded here without building a protobuf message;
every scalar of a tag shares the bytes after its step (its *prefix*), so only the time, step,
value and checksum are computed per record. ``encode_scalars`` is the same encoding in C
(``_encoding.c``, built when a compiler is available), byte for byte; it is None without it.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from tb_monitor.logdir import tfrecord

__all__ = [
    "FILE_VERSION",
    "append_scalars",
    "encode_scalars",
    "summary_record",
    "version_record",
]

#: Tells TensorBoard's Python loader not to purge on step resets.
FILE_VERSION = "brain.Event:2"

try:  # the C twin of append_scalars; byte-identical (see _encoding.c)
    from tb_monitor.sinks._encoding import encode_scalars
except ImportError:  # no compiler at install time, or a free-threaded build
    encode_scalars = None

_WALL_TIME = struct.Struct("<Bd")
_FLOAT = struct.Struct("<f")
_pack_float = _FLOAT.pack
_CRC = struct.Struct("<I")
_SMALL_VARINTS = [bytes((n,)) for n in range(128)]
_crc32c = tfrecord.crc32c
_MASK_DELTA = tfrecord.MASK_DELTA
_header = tfrecord.header


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
    length share their framing header (``tfrecord.header``): only the time, step, value and the data's
    checksum are computed per record. ``step`` None means each tag's next step.
    """
    head = _WALL_TIME.pack(0x09, wall_time)
    for tag, value in scalars:
        prefix = prefixes.get(tag)
        if prefix is None:
            prefix = prefixes[tag] = _scalar_prefix(tag)
        this_step = steps.get(tag, 0) if step is None else step
        steps[tag] = this_step + 1
        data = head + _step_field(this_step) + prefix + _float32(value)
        crc = _crc32c(data)
        out += _header(len(data))
        out += data
        out += _CRC.pack((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)


def summary_record(wall_time: float, step: int, summary: Any) -> bytes:
    """One framed Event holding a prebuilt ``Summary`` (TensorBoard's protos)."""
    raw = summary.SerializeToString()
    return tfrecord.frame(_event_head(wall_time, step) + b"\x2a" + _varint(len(raw)) + raw)


def version_record(wall_time: float) -> bytes:
    """The framed first Event of every file: its ``file_version``."""
    head = _WALL_TIME.pack(0x09, wall_time) + b"\x1a" + _varint(len(FILE_VERSION))
    return tfrecord.frame(head + FILE_VERSION.encode())


def _float32(value: float) -> bytes:
    try:
        return _pack_float(value)
    except (OverflowError, struct.error):  # beyond float32 (an int raises struct.error)
        return _pack_float(math.inf if value > 0 else -math.inf)  # what a float32 cast gives
