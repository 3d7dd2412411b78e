"""TFRecord framing of event files, with a C crc32c: writing records, and reading them back.

A record is ``length (u64 LE) | masked crc32c(length) | data | masked crc32c(data)``. TensorBoard's
Python loader and tensorboardX checksum in pure Python, which costs most of a write or a read;
``google_crc32c`` does it in C.

Reading tolerates what a crash or a bad disk leaves behind, and keeps every whole record:

- A file that ends inside a record (a torn tail: the writer was killed mid-write, or is still
  writing) ends the iteration quietly.
- A record whose *data* checksum fails is skipped: its length was verified, so the next record
  is still found.
- A record whose *length* checksum fails, or whose checked length is beyond any record (over
  protobuf's 2 GiB limit, e.g. 2**60: nothing is allocated or read for it), cannot be stepped
  over, so reading *resynchronises*: it scans forward for the next offset where a length
  checksum and the data checksum of the record it frames both hold, and goes on from there.
  TensorBoard's loaders stop the file at that point; we keep what follows. The scan runs only
  once damage is found, vectorised with numpy.

Each skip logs one warning naming the file and byte offset, and, when the caller passes a
:class:`DamageReport`, is counted there as a :class:`Damage` (file, offset, bytes, reason), so a
user can inspect what was lost (``tb_monitor.logdir.readers.damage(logdir)`` reads a whole
logdir that way).

A run of sound records is walked in C where it is built (``_string_tensors.sound_records``,
much faster than the Python loop), up to the first record it leaves to the
Python loop, which alone decides damage and torn tails. This is the Python side of the framing;
the writer's C scalar encoder
(``tb_monitor/sinks/_encoding.c``) frames its records the same way, byte for byte.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import google_crc32c

from tb_monitor import _env
from tb_monitor.logdir import fs

__all__ = [
    "BAD_LENGTH",
    "BAD_PAYLOAD",
    "DATA_CRC",
    "LENGTH_CRC",
    "MASK_DELTA",
    "MAX_RECORD",
    "NOT_AN_EVENT",
    "REASONS",
    "Damage",
    "DamageReport",
    "crc32c",
    "frame",
    "header",
    "iter_records",
    "iter_records_at",
    "masked_crc32c",
    "read_record_at",
    "read_records_from",
]

_log = logging.getLogger(__name__)
#: The C walk over a run of sound records (``logdir/_string_tensors.c``), None where it is not
#: built: ``_walk`` reads them all then, and in any case decides every record it stops at.
_sound_records = _env.c_twin("tb_monitor.logdir._string_tensors", "sound_records")

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER = 12  # length + its crc
_FOOTER = 4  # crc of the data
#: Added to the rotated CRC by TFRecord's masking.
MASK_DELTA = 0xA282EAD8
#: The largest record a reader accepts: protobuf's limit on a message (an Event) is 2 GiB.
MAX_RECORD = 2**31 - 1
#: The plain CRC32C of a bytes object, in C.
crc32c = google_crc32c.value

# Reasons a reader skips bytes (``Damage.reason``).
#: A record whose data checksum fails (its length was sound: only that record is skipped).
DATA_CRC = "data_crc"
#: A length whose checksum fails: the bytes up to the next whole record are skipped.
LENGTH_CRC = "length_crc"
#: A length with a sound checksum but beyond any record (over ``MAX_RECORD``).
BAD_LENGTH = "bad_length"
#: A whole record that is not an ``Event`` protobuf, or is empty (counted by the readers).
NOT_AN_EVENT = "not_an_event"
#: A timeline record whose payload is not a JSON object (counted by the readers).
BAD_PAYLOAD = "bad_payload"
REASONS = (DATA_CRC, LENGTH_CRC, BAD_LENGTH, NOT_AN_EVENT, BAD_PAYLOAD)


@dataclass(frozen=True)
class Damage:
    """One piece of a file that a reader skipped: where, how many bytes, and why."""

    path: str
    offset: int  # the byte offset in ``path`` where the skipped piece starts
    size: int  # bytes skipped
    reason: str  # one of ``REASONS``
    detail: str = ""

    def __str__(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.path} at byte {self.offset}: {self.reason}, {self.size} bytes{detail}"


class DamageReport:
    """What readers skipped: pass one to a reader, then inspect it.

    ``len(report)`` is the number of pieces skipped, ``report.counts()`` that number per reason,
    ``report.bytes()`` the bytes per reason, iterating gives each :class:`Damage` in the order
    found, and ``str(report)`` a summary. A report stays empty when nothing was damaged.
    """

    def __init__(self) -> None:
        self.items: list[Damage] = []

    def add(self, path: str, offset: int, size: int, reason: str, detail: str = "") -> Damage:
        """Count one skipped piece."""
        damage = Damage(str(path), int(offset), int(size), reason, detail)
        self.items.append(damage)
        return damage

    def counts(self) -> dict[str, int]:
        """Pieces skipped per reason (only reasons seen)."""
        return dict(Counter(d.reason for d in self.items))

    def bytes(self) -> dict[str, int]:
        """Bytes skipped per reason (only reasons seen)."""
        out: Counter[str] = Counter()
        for d in self.items:
            out[d.reason] += d.size
        return dict(out)

    def files(self) -> list[str]:
        """The damaged files, in the order found."""
        return list(dict.fromkeys(d.path for d in self.items))

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Damage]:
        return iter(list(self.items))

    def __bool__(self) -> bool:
        return bool(self.items)

    def __str__(self) -> str:
        if not self.items:
            return "no damage"
        bytes_ = self.bytes()
        parts = ", ".join(f"{r} {n} ({bytes_[r]} bytes)" for r, n in sorted(self.counts().items()))
        lines = [f"{len(self.items)} pieces skipped in {len(self.files())} files: {parts}"]
        lines += [f"  {d}" for d in self.items[:20]]
        if len(self.items) > 20:
            lines.append(f"  ... and {len(self.items) - 20} more")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"DamageReport({self.counts()!r})"


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


def iter_records(
    path: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[bytes]:
    """Yield the data of every whole record of the file at ``path`` (see the module docstring).

    What is skipped is logged and, given a ``report``, counted there.
    """
    for _, data in iter_records_at(path, report):
        yield data


def iter_records_at(
    path: str | os.PathLike[str], report: DamageReport | None = None, needle: bytes = b""
) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, data)`` of every whole record of the file at ``path``; as ``iter_records``.
    With a ``needle``, only of the records whose data hold it (as ``read_records_from``)."""
    path = os.fspath(path)
    with fs.open_file(path) as file:
        buffer = file.read()
    yield from _walk(buffer, 0, path, report, [0], needle)


def read_records_from(
    path: str | os.PathLike[str],
    start: int = 0,
    report: DamageReport | None = None,
    needle: bytes = b"",
    tensors: bytes | None = None,
) -> tuple[list[tuple[int, Any]], int]:
    """``(byte offset, data)`` of every whole record of the file at ``path`` from byte ``start``
    (a record's first byte) on, and the offset the next read goes on from: a torn tail's first
    byte (the writer may still be writing it), else the file's end. One read of what grew:
    remotely, one ranged request. With a ``needle``, only the records whose data hold it: the
    others are stepped over, neither copied nor checksummed. With ``tensors`` (a tag prefix),
    a record the C reader takes comes as its Event's string tensors under that prefix
    (``readers.c_string_tensors``'s ``(step, [...])``) instead of its data."""
    path = os.fspath(path)
    stop = [start]
    buffer = fs.read_bytes(path, start)
    records = list(_walk(buffer, start, path, report, stop, needle, tensors))
    return records, stop[0]


def read_record_at(path: str | os.PathLike[str], offset: int) -> bytes | None:
    """The data of the record at byte ``offset`` of ``path`` (two small reads), or None when
    no whole record with sound checksums is there (the file changed, or was cut)."""
    path = os.fspath(path)
    head = fs.read_bytes(path, offset, offset + _HEADER)
    if len(head) < _HEADER:
        return None
    (length,) = _LENGTH.unpack_from(head)
    if _header_problem(head, length) is not None:
        return None
    start = offset + _HEADER
    body = fs.read_bytes(path, start, start + length + _FOOTER)
    if len(body) < length + _FOOTER:
        return None
    data = body[:length]
    return data if masked_crc32c(data) == _CRC.unpack_from(body, length)[0] else None


def _walk(
    buffer: bytes,
    base: int,
    path: str,
    report: DamageReport | None,
    stop: list[int],
    needle: bytes = b"",
    tensors: bytes | None = None,
) -> Iterator[tuple[int, Any]]:
    """The whole records of ``buffer`` (the file's bytes from ``base`` on), as ``(file offset,
    data)`` (with ``tensors``, see ``read_records_from``), those without ``needle`` left out;
    ``stop[0]`` is left where reading ends: a torn tail's first byte, else the end."""
    size, offset = len(buffer), 0
    unpack_length, unpack_crc, masked = _LENGTH.unpack_from, _CRC.unpack_from, masked_crc32c
    sound: set[bytes] = set()  # headers already checked: record lengths repeat
    walk = _sound_records if type(buffer) is bytes else None
    while size - offset >= _HEADER:
        if walk is not None:  # the run of sound records up to the next one left here
            run, offset = walk(buffer, offset, needle, tensors)
            for at, item in run:
                yield base + at, item
            if size - offset < _HEADER:
                break
        head = buffer[offset : offset + _HEADER]
        (length,) = unpack_length(head)
        if head not in sound:
            problem = _header_problem(head, length)
            if problem is not None:
                found = _skip_to_next_record(buffer, offset, problem, path, report, base)
                if found is None:
                    stop[0] = base + size  # the rest is ignored for good (logged)
                    return
                offset = found
                continue
            sound.add(head)
        start = offset + _HEADER
        end = start + length
        if end + _FOOTER > size:
            break  # torn tail: checked before slicing, so a huge length reads nothing
        if needle and buffer.find(needle, start, end) < 0:
            offset = end + _FOOTER
            continue
        data = buffer[start:end]
        if masked(data) == unpack_crc(buffer, end)[0]:
            yield base + offset, data
        else:
            where = base + offset
            _log.warning("%s: corrupt record data at byte %d; skipping that record", path, where)
            if report is not None:
                report.add(path, where, end + _FOOTER - offset, DATA_CRC)
        offset = end + _FOOTER
    stop[0] = base + offset


def _header_problem(head: bytes, length: int) -> tuple[str, str] | None:
    """Why a record header cannot be trusted, as (reason, words), or None when it can."""
    if masked_crc32c(head[:8]) != _CRC.unpack_from(head, 8)[0]:
        return LENGTH_CRC, "corrupt record length"
    if length > MAX_RECORD:
        return BAD_LENGTH, f"record length {length} beyond any record"
    return None


def _skip_to_next_record(
    buffer: bytes,
    offset: int,
    problem: tuple[str, str],
    path: str,
    report: DamageReport | None,
    base: int = 0,
) -> int | None:
    """Log and count the damage at ``offset`` of ``buffer`` (the file's bytes from ``base`` on);
    return the next whole record's offset in ``buffer``, or None."""
    reason, what = problem
    size = len(buffer)
    found = _resync(buffer, offset + 1)
    skipped = (size if found is None else found) - offset
    if found is None:
        _log.warning(
            "%s: %s at byte %d; no whole record follows, ignoring the rest of the file (%d bytes)",
            path,
            what,
            base + offset,
            skipped,
        )
    else:
        _log.warning(
            "%s: %s at byte %d; skipped %d bytes to the next whole record at byte %d",
            path,
            what,
            base + offset,
            skipped,
            base + found,
        )
    if report is not None:
        report.add(path, base + offset, skipped, reason, what)
    return found


_TABLE: Any = None  # crc32c's byte table, as a numpy array (built on first resync)
_SCAN_CHUNK = 1 << 16


def _crc_table() -> Any:
    global _TABLE
    if _TABLE is None:
        import numpy as np

        table = []
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
            table.append(crc)
        _TABLE = np.asarray(table, dtype=np.uint32)
    return _TABLE


def _resync(buffer: bytes, start: int) -> int | None:
    """The first offset at or after ``start`` where a whole record begins, or None.

    A whole record: its length checksum holds, its length fits before the end of the buffer, and
    its data checksum holds. Candidate offsets are found by checking the length checksum at every
    offset at once (numpy, in growing chunks); only those are then checked in full.
    """
    import numpy as np

    table = _crc_table()
    view = np.frombuffer(buffer, dtype=np.uint8)
    size = len(buffer)
    last = size - (_HEADER + _FOOTER)  # the last offset a record can start at
    pos, chunk = start, _SCAN_CHUNK
    while pos <= last:
        n = min(last + 1, pos + chunk) - pos
        # A length below 4 GiB has its four high bytes zero: a cheap filter before the checksum.
        high = view[pos + 4 : pos + 4 + n] | view[pos + 5 : pos + 5 + n]
        high |= view[pos + 6 : pos + 6 + n] | view[pos + 7 : pos + 7 + n]
        at = np.flatnonzero(high == 0) + pos
        if len(at):
            crc = np.full(len(at), 0xFFFFFFFF, dtype=np.uint32)
            for k in range(8):
                crc = table[(crc ^ view[at + k]) & 0xFF] ^ (crc >> 8)
            crc ^= np.uint32(0xFFFFFFFF)
            masked = ((crc >> 15) | (crc << 17)) + np.uint32(MASK_DELTA)
            stored = view[at + 8].astype(np.uint32)
            for k in (1, 2, 3):
                stored |= view[at + 8 + k].astype(np.uint32) << np.uint32(8 * k)
            for candidate in at[masked == stored].tolist():
                (length,) = _LENGTH.unpack_from(buffer, candidate)
                end = candidate + _HEADER + length
                if length > MAX_RECORD or end + _FOOTER > size:
                    continue
                data = buffer[candidate + _HEADER : end]
                if masked_crc32c(data) == _CRC.unpack_from(buffer, end)[0]:
                    return candidate
        pos += n
        chunk = min(chunk * 2, 1 << 22)
    return None
