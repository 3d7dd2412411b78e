"""TFRecord framing of event files, with a C crc32c: writing records, and reading them back.

A record is ``length (u64 LE) | masked crc32c(length) | data | masked crc32c(data)``. TensorBoard's
Python loader and tensorboardX checksum in pure Python, which costs most of a write or a read;
``google_crc32c`` does it in C.

Reading tolerates what a crash leaves behind. A file that ends inside a record (a torn tail: the
writer was killed mid-write, or is still writing) ends the iteration quietly. A record in the
middle whose *data* checksum fails is skipped with a warning naming the file and offset: its
length was verified, so the next record is still found. A record whose *length* checksum fails
ends that file with a warning, because nothing after it can be located reliably (TensorBoard's
loaders stop at the same point).

This is the Python side of the framing; the writer's C scalar encoder
(``tb_monitor/sinks/_encoding.c``) frames its records the same way, byte for byte.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator

import google_crc32c

from tb_monitor.logdir import fs

__all__ = ["MASK_DELTA", "crc32c", "frame", "header", "iter_records", "masked_crc32c"]

_log = logging.getLogger(__name__)

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER = 12  # length + its crc
_FOOTER = 4  # crc of the data
#: Added to the rotated CRC by TFRecord's masking.
MASK_DELTA = 0xA282EAD8
#: The plain CRC32C of a bytes object, in C.
crc32c = google_crc32c.value


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: rotated and offset so a CRC of CRC-bearing data stays strong."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


_HEADERS: dict[int, bytes] = {}  # the framing header of each record length seen


def header(length: int) -> bytes:
    """The 12 bytes that precede a record of ``length`` bytes (cached: lengths repeat)."""
    cached = _HEADERS.get(length)
    if cached is None:
        packed = _LENGTH.pack(length)
        cached = _HEADERS[length] = packed + _CRC.pack(masked_crc32c(packed))
    return cached


def frame(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    return header(len(data)) + data + _CRC.pack(masked_crc32c(data))


def iter_records(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Yield the data of every intact record of the file at ``path`` (see the module docstring)."""
    path = os.fspath(path)
    with fs.open_file(path, "rb") as file:
        buffer = file.read()
    size, offset = len(buffer), 0
    unpack_length, unpack_crc = _LENGTH.unpack_from, _CRC.unpack_from
    while size - offset >= _HEADER:
        header = buffer[offset : offset + 8]
        if masked_crc32c(header) != unpack_crc(buffer, offset + 8)[0]:
            _log.warning(
                "%s: corrupt record length at byte %d; ignoring the rest of the file", path, offset
            )
            return
        (length,) = unpack_length(buffer, offset)
        start = offset + _HEADER
        end = start + length
        if end + _FOOTER > size:
            return  # torn tail
        data = buffer[start:end]
        if masked_crc32c(data) == unpack_crc(buffer, end)[0]:
            yield data
        else:
            _log.warning("%s: corrupt record data at byte %d; skipping that record", path, offset)
        offset = end + _FOOTER
