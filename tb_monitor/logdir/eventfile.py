"""One event file being written, on a local disk or an object store, behind one interface.

The writer (``tb_monitor.sinks.writer``) hands each encoded batch to an ``EventFile`` and knows
nothing of where the bytes go; ``fs.new_event_file`` picks the implementation for a run directory.

- ``LocalEventFile``: an unbuffered file. A write that fails (a full disk) is cut back to the last
  whole record, so no torn record stays in the middle; ``sync`` is an ``fsync``.
- ``ObjectEventFile``: an ``objects.ObjectStream`` (deltas and segments, uploaded from its own
  thread); ``sync`` and ``close`` wait while the store takes uploads, at most ``FLUSH_TIMEOUT_S``
  without one, then warn.

Event file names are unique per process and file (``unique_name``), and zero-padded so that name
order is creation order: TensorBoard reads a run's files in name order, and a later file must come
after the steps it continues. Processes of one second are ordered by host and process id, which
need not be the order they started in, so a writer names its file after the run's last one once
it has listed the run (``sinks.filekeeper``). A ``filename_suffix`` (torch's) goes last, as torch
puts it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import socket
from typing import Protocol

from tb_monitor.logdir.objects import ObjectStream

__all__ = ["FLUSH_TIMEOUT_S", "EventFile", "LocalEventFile", "ObjectEventFile", "unique_name"]

#: How long a sync or close waits for an object store that takes no upload before giving up
#: (and warning); while uploads go up it waits on.
FLUSH_TIMEOUT_S = 30.0

_log = logging.getLogger(__name__)
_counter = itertools.count()
_PREFIX = "events.out.tfevents."  # then the second, host, pid, counter, ".tbm" and the suffix
_SECONDS = re.compile(re.escape(_PREFIX) + r"(?P<seconds>\d+)\.")
# Streams a forked child inherited: never written, flushed or closed by the child (their buffers
# belong to the parent), so they are kept referenced here instead of being collected.
_inherited: list[ObjectStream] = []


def unique_name(wall_time: float, suffix: str = "", after: str = "") -> str:
    """A new event file name of this process, after every name it made before and after
    ``after`` (the run's last event file), ending with ``suffix`` (torch's ``filename_suffix``);
    a suffix that is not a plain name is ValueError.

    Where ``after`` is of the same second or later and would sort after the new name (another
    host, or a process id that wrapped around), the new name takes the second after it: a
    restart's file must come after the steps it continues in TensorBoard's name order.
    """
    if not isinstance(suffix, str) or "/" in suffix or "\0" in suffix:
        raise ValueError(f"filename_suffix must be a str without '/' or NUL, got {suffix!r}")
    host = socket.gethostname().replace("/", "_") or "localhost"
    rest = f".{host}.{os.getpid():07d}.{next(_counter):06d}.tbm{suffix}"
    name = f"{_PREFIX}{int(wall_time)}{rest}"
    found = _SECONDS.match(after)
    if name <= after and found is not None:
        name = f"{_PREFIX}{int(found['seconds']) + 1}{rest}"
    return name


class EventFile(Protocol):
    """What a writer needs of the file it writes. Storage faults raise ``OSError``."""

    #: Where the file is (a path or URL), for messages.
    name: str
    #: Longest ``sync`` and ``close`` wait on storage by design (an object store's upload).
    wait_s: float

    @property
    def closed(self) -> bool:
        """True after ``close``, or once a failed write could not be undone (use a new file)."""

    @property
    def dropped(self) -> int:
        """Records lost after ``write`` took them (an object store's upload buffer overflowed)."""

    @property
    def acknowledged(self) -> int:
        """Bytes storage has taken so far (written; uploaded): a writer waits while it grows."""

    def deleted(self) -> bool:
        """Whether the file lost its name (it or its directory was deleted): use a new file."""

    def write(self, data: bytes | bytearray, records: int) -> None:
        """Store ``data``, ``records`` whole records; on ``OSError`` none of it stays."""

    def sync(self) -> None:
        """Make everything written durable (``fsync``; an upload)."""

    def close(self) -> None:
        """Sync, then release the file. Idempotent."""

    def abandon(self) -> None:
        """In a forked child: let go of the parent's file without writing what it holds."""

    def discard(self) -> None:
        """Close and remove a file that holds nothing but its header."""


class LocalEventFile:
    """An event file on a local disk, created new (``FileExistsError`` if ``path`` is taken)."""

    wait_s = 0.0
    dropped = 0

    def __init__(self, path: str, header: bytes) -> None:
        self.name = path
        # Unbuffered: the writer batches itself, and a forked child must never flush a parent's
        # buffered bytes into the parent's file.
        self._file = open(path, "xb", buffering=0)  # noqa: SIM115  # closed by close()
        try:
            self._write_all(header)
        except OSError:  # a full disk: leave no empty file behind
            self._file.close()
            os.unlink(path)
            raise
        self._end = len(header)  # the end of the last whole record

    @property
    def closed(self) -> bool:
        return self._file.closed

    @property
    def acknowledged(self) -> int:
        return self._end

    def deleted(self) -> bool:
        try:
            return os.fstat(self._file.fileno()).st_nlink == 0
        except (OSError, ValueError):
            return True

    def write(self, data: bytes | bytearray, records: int) -> None:
        try:
            self._write_all(data)
        except OSError:
            self._cut_back()
            raise
        self._end += len(data)

    def _write_all(self, data: bytes | bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) :]

    def _cut_back(self) -> None:
        """Truncate to the last whole record; close the file when even that fails."""
        try:
            os.ftruncate(self._file.fileno(), self._end)
            self._file.seek(self._end)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                self._file.close()

    def sync(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            os.fsync(self._file.fileno())
        finally:
            self._file.close()

    def abandon(self) -> None:
        self._file.close()  # unbuffered: closes the child's copy of the descriptor, nothing else

    def discard(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.name)


class ObjectEventFile:
    """An event file on an object store: an ``ObjectStream`` with bounded syncs."""

    wait_s = FLUSH_TIMEOUT_S

    def __init__(self, stream: ObjectStream) -> None:
        self.stream = stream
        self.name = stream.name
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dropped(self) -> int:
        return self.stream.dropped

    @property
    def acknowledged(self) -> int:
        return self.stream.uploaded_bytes

    def deleted(self) -> bool:
        return False  # objects are replaced, never lost from under the writer

    def write(self, data: bytes | bytearray, records: int) -> None:
        self.stream.write(data, records)  # buffered; uploaded on the stream's own thread

    def sync(self) -> None:
        if not self.stream.flush(FLUSH_TIMEOUT_S):
            self._warn("%d bytes not uploaded yet after %.0f s; still trying")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.stream.close(FLUSH_TIMEOUT_S):
            self._warn("gave up on %d bytes the object store did not take in %.0f s")

    def _warn(self, what: str) -> None:
        _log.warning(
            "tb_monitor: %s: " + what, self.name, self.stream.pending_bytes, FLUSH_TIMEOUT_S
        )

    def abandon(self) -> None:
        _inherited.append(self.stream)  # holds the parent's bytes: never upload them

    def discard(self) -> None:
        self.close()  # a stream that was given nothing puts nothing
