"""An event file on an object store, which has no append: small deltas, sealed into segments.

A writer's byte stream for its event file ``BASE`` (``.../events.out.tfevents.<...>.tbm``)
becomes objects:

    BASE.s000000                          a sealed *segment*: one valid event file, a minute of records
    PENDING.s000001.d0000                 a *delta*: the records of one upload (a valid event file)
    PENDING.s000001.d0001                 ...

where ``PENDING`` is ``BASE`` with ``tfevents`` replaced by ``tbmdelta``. Every ``upload_secs``
(default 5 s) the records written since the last upload go up as one new delta, so our readers
see new data within seconds and each byte is uploaded once. When the open segment holds
``deltas_per_segment`` deltas (default 12, a minute) or ``segment_bytes``, its bytes (kept in
memory) go up as one segment and its deltas are deleted: each byte is uploaded at most twice,
and a process leaves one object a minute (60 per hour), not one per upload. Close seals the open
segment the same way.

Why deltas are hidden from TensorBoard: its Python loader (the one that reads ``s3://``) follows
a run's newest file and fails for good on that run when the file disappears, and it would read a
delta's records a second time in the segment that replaces it. So TensorBoard lists segments
only (their names hold ``tfevents``; a delta's does not), which never change or disappear, and
sees new data once a minute. Our readers (``read_scalars``, exports, and a restart's read of
what no steps file covers, ``logdir.resume``) read segments and deltas in write order and skip
deltas whose segment exists (``live_objects``): a listing taken while a segment replaces its deltas reads each record once.

All network I/O happens on one uploader thread per stream: ``write`` only appends to memory. A
failing store is retried with backoff; what cannot be uploaded stays buffered up to
``max_buffer_bytes``, beyond which the oldest unsent chunks are dropped and counted (``dropped``),
with one warning naming the file and the error; when the store answers again the buffer goes up.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from tb_monitor._patience import wait_while_progressing

__all__ = ["DELTA_MARK", "ObjectStream", "is_delta", "live_objects"]

_log = logging.getLogger(__name__)

#: Stands for ``tfevents`` in a delta's name, so that TensorBoard does not list deltas.
DELTA_MARK = "tbmdelta"
_DELTA = re.compile(r"^(?P<segment>.+\.s\d{6})\.d\d{4}$")
_MAX_BACKOFF_S = 30.0


def is_delta(name: str) -> bool:
    """Whether an object name is a delta of an event file."""
    return DELTA_MARK in name and _DELTA.match(name) is not None


def _segment_of(delta: str) -> str:
    return _DELTA.match(delta)["segment"].replace(DELTA_MARK, "tfevents", 1)  # type: ignore[index]


def live_objects(names: Iterable[str]) -> list[str]:
    """Event files and deltas in write order, without deltas whose segment is in ``names``."""
    names = set(names)
    live = [n for n in names if not (is_delta(n) and _segment_of(n) in names)]
    # A delta sorts where its own name would, read as the segment's: after the segment before.
    return sorted(live, key=lambda n: n.replace(DELTA_MARK, "tfevents", 1))


class ObjectStream:
    """A writable stream of event-file bytes that lands on an object store as deltas and segments.

    ``put(name, data)`` and ``delete(names)`` are the only storage operations it needs; ``base``
    is the full name of the event file (its objects add ``.sNNNNNN[.dNNNN]``). ``header`` (the
    file-version record) starts every object, so each one is a valid event file on its own.
    """

    def __init__(
        self,
        base: str,
        header: bytes,
        put: Callable[[str, bytes], None],
        delete: Callable[[list[str]], None],
        *,
        upload_secs: float = 5.0,
        deltas_per_segment: int = 12,
        segment_bytes: int = 16 << 20,
        max_buffer_bytes: int = 64 << 20,
        clock: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        self.base = base
        self._pending_base = base.replace("tfevents", DELTA_MARK, 1)
        self.name = name or base  # for messages: the file's URL
        self._header = header
        self._put, self._delete = put, delete
        self._upload_secs = upload_secs
        self._deltas_per_segment = deltas_per_segment
        self._segment_bytes = segment_bytes
        self._max_buffer = max_buffer_bytes
        self._clock = clock

        self._lock = threading.Condition(threading.Lock())
        self._pending: deque[tuple[bytes, int]] = deque()  # (chunk, records) not yet uploaded
        self._pending_bytes = 0
        self._segment = 0
        self._deltas: list[str] = []  # uploaded deltas of the open segment
        self._segment_data: list[bytes] = []  # their bytes, for the segment that replaces them
        self._segment_size = 0
        self._sealed = 0
        self.dropped = 0  # records dropped because the buffer overflowed
        self.uploaded_bytes = 0
        self.requests = 0
        self._failing: BaseException | None = None
        self._retry_at = 0.0
        self._backoff = 1.0
        self._closing = False
        self._kick = False
        self._thread = threading.Thread(target=self._run, name="tb_monitor-upload", daemon=True)
        self._thread.start()

    # -- the writer's side (never blocks on the network) --------------------------------------------

    def write(self, data: bytes | bytearray | memoryview, records: int = 1) -> None:
        """Buffer ``data`` (``records`` records) for the next upload."""
        chunk = bytes(data)
        with self._lock:
            self._pending.append((chunk, records))
            self._pending_bytes += len(chunk)
            self._trim()

    def _trim(self) -> None:
        """Drop the oldest unsent chunks beyond the buffer bound, counting their records."""
        while self._pending_bytes > self._max_buffer and len(self._pending) > 1:
            lost, count = self._pending.popleft()
            self._pending_bytes -= len(lost)
            self.dropped += count

    def flush(self, timeout: float | None = None) -> bool:
        """Upload what is buffered now and wait for it while uploads go up, giving up once none
        has for ``timeout`` s; True if it went up."""
        with self._lock:
            self._kick = True
            self._retry_at = 0.0
            self._lock.notify_all()

        def uploaded(wait_s: float) -> bool:
            with self._lock:
                if self._pending_bytes and self._thread.is_alive():
                    self._lock.wait(wait_s)
                return not self._pending_bytes or not self._thread.is_alive()

        if timeout is None:
            while not uploaded(0.05):
                pass
            return True
        return self._waited(uploaded, timeout) and not self._pending_bytes

    def close(self, timeout: float | None = 30.0) -> bool:
        """Upload what is buffered and seal the open segment, waiting while uploads go up (at
        most ``timeout`` s without one); True if everything went up."""
        with self._lock:
            self._closing = True
            self._retry_at = 0.0
            self._lock.notify_all()

        def ended(wait_s: float) -> bool:
            self._thread.join(wait_s)
            return not self._thread.is_alive()

        if timeout is None:
            self._thread.join()
        else:
            self._waited(ended, timeout)
        with self._lock:
            return not self._pending_bytes and not self._deltas and not self._thread.is_alive()

    def _waited(self, done: Callable[[float], bool], idle_s: float) -> bool:
        """``done`` waited for while the store takes uploads (``uploaded_bytes`` grows)."""
        return wait_while_progressing(done, lambda: self.uploaded_bytes, idle_s, self._clock)

    @property
    def pending_bytes(self) -> int:
        """Bytes written but not yet uploaded."""
        return self._pending_bytes

    # -- the uploader thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        next_upload = self._clock() + self._upload_secs
        while True:
            with self._lock:
                while not (self._closing or self._kick) and self._clock() < max(
                    next_upload, self._retry_at
                ):
                    self._lock.wait(max(0.01, max(next_upload, self._retry_at) - self._clock()))
                closing, self._kick = self._closing, False
            next_upload = self._clock() + self._upload_secs
            ok = self._upload_pending()
            if ok and (closing or self._segment_full()):
                ok = self._seal()
            if closing and ok:
                return
            if closing:  # close() bounds the wait: this daemon thread just keeps trying
                time.sleep(min(1.0, self._backoff))

    def _segment_full(self) -> bool:
        return (
            len(self._deltas) >= self._deltas_per_segment
            or self._segment_size >= self._segment_bytes
        )

    def _upload_pending(self) -> bool:
        with self._lock:
            if not self._pending:
                return True
            chunks = list(self._pending)
            self._pending.clear()
        data = b"".join(chunk for chunk, _ in chunks)
        name = f"{self._pending_base}.s{self._segment:06d}.d{len(self._deltas):04d}"
        if not self._attempt(lambda: self._put(name, self._header + data)):
            with self._lock:  # back in front, in order, for the next try
                self._pending.extendleft(reversed(chunks))
                self._trim()
            return False
        with self._lock:
            self._pending_bytes -= len(data)
            self._lock.notify_all()
        self.uploaded_bytes += len(self._header) + len(data)
        self._deltas.append(name)
        self._segment_data.append(data)
        self._segment_size += len(data)
        return True

    def _seal(self) -> bool:
        """Replace the open segment's deltas by one segment object, then start the next."""
        if not self._deltas:
            return True
        name = f"{self.base}.s{self._segment:06d}"
        data = self._header + b"".join(self._segment_data)
        if not self._attempt(lambda: self._put(name, data)):
            return False
        self.uploaded_bytes += len(data)
        deltas = list(self._deltas)
        self._attempt(lambda: self._delete(deltas))  # our readers skip them anyway
        self._segment += 1
        self._sealed += 1
        self._deltas, self._segment_data, self._segment_size = [], [], 0
        return True

    def _attempt(self, operation: Callable[[], Any]) -> bool:
        self.requests += 1
        try:
            operation()
        except Exception as exc:
            if self._failing is None:
                _log.warning(
                    "tb_monitor: cannot write %s (%s: %s); retrying with backoff, keeping up to "
                    "%d MiB buffered (records beyond that are dropped and counted)",
                    self.name,
                    type(exc).__name__,
                    exc,
                    self._max_buffer >> 20,
                )
            self._failing = exc
            self._retry_at = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
            return False
        if self._failing is not None:
            _log.warning(
                "tb_monitor: writing %s works again; uploading what was buffered", self.name
            )
        self._failing = None
        self._backoff = 1.0
        return True
