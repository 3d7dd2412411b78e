"""TFRecord framing of event files, with a C crc32c, and the files that hold them.

A record is ``length (u64 LE) | masked crc32c(length) | data | masked crc32c(data)``. TensorBoard's
Python loader and tensorboardX checksum in pure Python, which costs most of a write or a read;
``google_crc32c`` does it in C.

Reading tolerates what a crash leaves behind. A file that ends inside a record (a torn tail: the
writer was killed mid-write, or is still writing) ends the iteration quietly. A record in the
middle whose *data* checksum fails is skipped with a warning naming the file and offset: its
length was verified, so the next record is still found. A record whose *length* checksum fails
ends that file with a warning, because nothing after it can be located reliably (TensorBoard's
loaders stop at the same point).

Paths with a scheme (``gs://``, ``s3://``) go through TensorBoard's filesystem layer; local paths
use the operating system directly.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from typing import IO

import google_crc32c

__all__ = [
    "MASK_DELTA",
    "crc32c",
    "encode_record",
    "event_file_paths",
    "is_remote",
    "iter_records",
    "makedirs",
    "masked_crc32c",
    "open_file",
]

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


def encode_record(data: bytes) -> bytes:
    """Frame ``data`` as one TFRecord."""
    header = _LENGTH.pack(len(data))
    return b"".join(
        (
            header,
            _CRC.pack(masked_crc32c(header)),
            data,
            _CRC.pack(masked_crc32c(data)),
        )
    )


def iter_records(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Yield the data of every intact record of the file at ``path`` (see the module docstring)."""
    path = os.fspath(path)
    with open_file(path, "rb") as file:
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


# ---------------------------------------------------------------------------------------------
# Files: local through the OS, remote through TensorBoard's filesystem layer.
# ---------------------------------------------------------------------------------------------


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location (``gs://``, ``s3://``, any fsspec URL)."""
    return "://" in path


def _gfile():
    from tensorboard.compat.tensorflow_stub.io import gfile

    return gfile


def open_file(path: str, mode: str) -> IO[bytes]:
    """Open an event file: ``"rb"`` to read, ``"xb"`` to create (never clobbering) and write.

    Local files are opened unbuffered for writing: the writer batches itself, and a forked child
    must never flush a parent's buffered bytes into the parent's file.
    """
    if is_remote(path):
        return _gfile().GFile(path, mode.replace("x", "w"))
    return open(path, mode, buffering=0 if "x" in mode else -1)


def makedirs(path: str) -> None:
    """Create ``path`` and its parents if they do not exist."""
    if is_remote(path):
        gfile = _gfile()
        if not gfile.exists(path):
            gfile.makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def event_file_paths(directory: str) -> list[str]:
    """Event files directly in ``directory`` (one run), sorted by name as TensorBoard reads them."""
    if is_remote(directory):
        gfile = _gfile()
        names = gfile.listdir(directory) if gfile.isdir(directory) else []
        join = lambda name: directory.rstrip("/") + "/" + name  # noqa: E731
    else:
        try:
            names = [e.name for e in os.scandir(directory) if e.is_file()]
        except FileNotFoundError:
            names = []
        join = lambda name: os.path.join(directory, name)  # noqa: E731
    return [join(name) for name in sorted(names) if "tfevents" in name]
