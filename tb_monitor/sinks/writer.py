"""The asynchronous event-file writer: the caller enqueues, one thread per process does the rest.

``AsyncWriter.add_*`` validates its arguments and appends a small tuple to a deque: no lock, no
syscall, no encoding. One daemon thread per process (shared by every writer) wakes every
``flush_secs`` (or early, when a queue passes a threshold or a caller waits for room), encodes
the records (``tb_monitor.sinks.encoding``: scalars by hand, in C when the optional extension is
built; everything else with TensorBoard's protos), frames them with a C crc32c and hands them to
storage (``tb_monitor.logdir.fs``) in one write per batch. So a process killed
outright loses at most the last flush interval; ``flush()`` and ``close()`` also ``fsync``.

Faults never reach the caller (docs/DESIGN.md, "Faults"): a failed write (a full disk, a
read-only or deleted directory) drops and counts that batch, logs one warning per outage naming
the file and the error, and the next batch starts a new file, so writing resumes by itself and
the count lands as ``tb_monitor/dropped_records``; a deleted event file is noticed before the
next write and replaced. A stalled store makes a caller wait at most ``STALL_S`` for room, then
drops are counted until the writer catches up; ``flush()`` and ``close()`` wait at most
``CLOSE_TIMEOUT_S`` for a writer stuck in storage, so a process never hangs at exit.

Steps are allocated here, per tag, starting one above the largest step the run directory already
holds, so a restarted process continues its curves instead of being dropped by TensorBoard's
loaders (see ``docs/DESIGN.md``, "Steps"). Event file names are unique per process and writer.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import operator
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tb_monitor import _shutdown, _tensors, contract
from tb_monitor.logdir import fs, readers
from tb_monitor.sinks import encoding, summaries
from tb_monitor.sinks.batching import Batch, TimelineBatcher
from tb_monitor.sinks.service import service as _service

__all__ = ["DROPPED_TAG", "AsyncWriter", "WriterClosedError"]

#: Scalar tag under which a writer with ``when_full="drop"`` records how many records it dropped.
DROPPED_TAG = "tb_monitor/dropped_records"

_log = logging.getLogger(__name__)


class WriterClosedError(ValueError):
    """A record was added to a writer after ``close()``."""


# Queue items are tuples whose first element says what they hold.
_SCALAR, _SCALARS, _TEXT, _TIMELINE, _SUMMARY = range(5)
_BATCH = 4096  # records per write() call

#: Longest a caller waits for room in the queue before records are dropped (a stalled store).
STALL_S = 1.0
#: Longest ``flush()``/``close()`` wait for a writer thread stuck in storage.
CLOSE_TIMEOUT_S = 10.0
_MIN_BACKOFF_S, _MAX_BACKOFF_S = 0.5, 30.0  # between write attempts while storage fails
_INT_LIMIT = 2**1023  # ints at or beyond it may not fit a float

_file_counter = itertools.count()
_time = time.time


# Argument checks, on the caller's thread so a mistake is reported where it is made.
# ---------------------------------------------------------------------------------------------


def _check_tag(tag: object) -> str:
    if type(tag) is not str and not isinstance(tag, str):
        raise TypeError(f"tag must be a str, got {tag!r}")
    return tag


def _real(value: object, what: str) -> float:
    if isinstance(value, (str, bytes, bytearray)):  # float() would parse text
        raise TypeError(f"{what} must be a real number, got {value!r:.200}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a real number, got {value!r:.200}") from None
    except OverflowError:
        raise OverflowError(f"{what}: {value!r:.50} is beyond a float's range") from None


def _scalar_value(value: object, what: str) -> Any:
    """A scalar's value: a float, or a one-element tensor kept unread (``tb_monitor._tensors``)."""
    if _tensors.is_tensor(value):
        return _tensors.checked(value, what)
    return _real(value, what)


def _step(step: object) -> int:
    try:
        return operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"step must be an integer, got {step!r}") from None


def _wall_time(wall_time: object) -> float:
    if wall_time is None:
        return _time()
    if type(wall_time) is float:
        return wall_time  # type: ignore[return-value]
    return _real(wall_time, "wall_time")


def _with_path(exc: OSError, message: str) -> OSError:
    """The same kind of OSError, with a message that names what we were doing and where."""
    if exc.errno is None:
        return OSError(f"{message}: {exc}")
    return type(exc)(exc.errno, f"{message}: {exc.strerror or exc}")


# Remote files a forked child inherited: never written, flushed or closed by the child (their
# buffers belong to the parent), so they are kept referenced here instead of being collected.
_inherited_files: list[Any] = []


class AsyncWriter:
    """Writes TensorBoard event files off the caller's thread, with bounded memory.

        >>> with AsyncWriter("runs/exp1") as writer:
        ...     writer.add_scalar("loss", 0.25)

    ``when_full="block"`` (the default) makes a caller wait for room when ``max_queue`` records
    are pending (a burst), so nothing is lost, but never longer than ``STALL_S`` (a stalled
    store): then records are dropped until the writer catches up. ``"drop"`` drops at once. The
    count of dropped records is written as the scalar ``tb_monitor/dropped_records``. A write
    error (a full disk) is logged once per outage and counted; writing resumes by itself, and
    ``error`` tells the last one. Memory is bounded by ``max_queue`` records (~150 bytes each).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        flush_secs: float = 2.0,
        max_queue: int = 65536,
        when_full: Literal["block", "drop"] = "block",
    ) -> None:
        if not (isinstance(flush_secs, (int, float)) and 0 < flush_secs < math.inf):
            raise ValueError(f"flush_secs must be a positive number of seconds, got {flush_secs!r}")
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue must be a positive number of records, got {max_queue!r}")
        if when_full not in ("block", "drop"):
            raise ValueError(f"when_full must be 'block' or 'drop', got {when_full!r}")
        self._run_dir = os.fspath(run_dir)
        if not isinstance(self._run_dir, str):
            raise TypeError(f"run_dir must be a str or path, got {run_dir!r}")
        self.flush_secs = float(flush_secs)
        self._max_queue = max_queue
        self._wake_at = min(max(max_queue // 2, 1), _BATCH)
        self._when_full = when_full

        self._queue: deque[tuple] = deque()
        self._closed = False
        self._closing_done = threading.Event()
        self._dropped = 0
        self._dropped_written = 0
        self._error: OSError | None = None  # the failure in progress, None when writing works
        self._retry_at = 0.0
        self._backoff = _MIN_BACKOFF_S
        self._offset = 0  # end of the last whole record in the local file
        self._stalled = False
        self._prefixes: dict[str, bytes] = {}
        self._batcher = TimelineBatcher()
        self._init_locks()
        self._file: Any = None
        self._path: str | None = None
        self._remote = fs.is_remote(self._run_dir)
        self._tensors_queued = False
        try:
            fs.check_logdir(self._run_dir)
            self._next_steps = _next_steps(self._run_dir)
            self._open_file()
        except OSError as exc:
            raise _with_path(
                exc, f"cannot write TensorBoard event files to {self._run_dir}"
            ) from exc

        _service.add(self)
        _shutdown.at_exit(self.close, _shutdown.SINKS)
        # A SIGTERM the process survives (the user's handler checkpoints, say) makes the
        # records durable but closes nothing; see _shutdown.
        _shutdown.on_flush(self.flush, _shutdown.SINKS)
        _shutdown.install_sigterm_handler()

    def _init_locks(self) -> None:
        self._drain_lock = threading.RLock()  # reentrant: a SIGTERM handler may close mid-flush
        self._room = threading.Condition(threading.Lock())
        self._waiting = 0

    # -- public API ------------------------------------------------------------------------------

    @property
    def run_dir(self) -> str:
        """The directory this writer's event files go to (one TensorBoard run)."""
        return self._run_dir

    @property
    def path(self) -> str | None:
        """The event file currently written, or None before a forked child writes its first."""
        return self._path

    @property
    def dropped(self) -> int:
        """How many records were dropped: queue full with ``when_full="drop"``, a write error, or
        an object store unreachable for longer than the upload buffer holds."""
        file = self._file
        return self._dropped + (file.dropped if self._remote and file is not None else 0)

    @property
    def error(self) -> OSError | None:
        """The storage error in progress (writing resumes by itself), or None."""
        return self._error

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def add_scalar(
        self,
        tag: str,
        value: float,
        wall_time: float | None = None,
        step: int | None = None,
    ) -> None:
        """Record a scalar; without ``step``, the tag's next step (see the module docstring)."""
        # The hot path of every metric: type checks inline, no call unless something is off.
        if type(value) is int and not -_INT_LIMIT < value < _INT_LIMIT:
            value = _real(value, f"scalar {tag!r}")  # beyond a float's range: refused
        elif type(value) is not float and type(value) is not int:
            value = _scalar_value(value, f"scalar {tag!r}")
            if type(value) is not float:
                self._tensors_queued = True  # read back on the writer thread, before encoding
        if type(wall_time) is not float:
            wall_time = _time() if wall_time is None else _wall_time(wall_time)
        item = (
            _SCALAR,
            tag if type(tag) is str else _check_tag(tag),
            value,
            wall_time,
            None if step is None else _step(step),
        )
        if self._closed or len(self._queue) >= self._wake_at:
            self._put(item)
        else:
            self._queue.append(item)

    def add_scalars(self, mapping: Mapping[str, float], wall_time: float | None = None) -> None:
        """Record one scalar per item of ``mapping`` (a Stat window) with one enqueue."""
        scalars = dict(mapping)  # a copy: the caller may reuse its dict
        for tag, value in scalars.items():
            if type(value) is not float and type(value) is not int:
                scalars[_check_tag(tag)] = _real(value, f"scalar {tag!r}")
            elif type(tag) is not str:
                _check_tag(tag)
        if type(wall_time) is not float:
            wall_time = _time() if wall_time is None else _wall_time(wall_time)
        self._put((_SCALARS, scalars, wall_time))

    def add_text(self, tag: str, text: str, wall_time: float | None = None) -> None:
        """Record a text-dashboard entry (rendered as Markdown by TensorBoard)."""
        if not isinstance(text, str):
            raise TypeError(f"text for tag {tag!r} must be a str, got {text!r}")
        self._put((_TEXT, _check_tag(tag), text, _wall_time(wall_time)))

    def add_timeline(self, kind: str, payload_json: str, wall_time: float) -> None:
        """Record a timeline record: ``payload_json`` is the event's JSON as torch serializes it."""
        tag = contract.timeline_tag(kind)  # rejects an unknown kind here, on the caller's thread
        if not isinstance(payload_json, (str, bytes)):
            raise TypeError(f"timeline payload must be JSON text, got {payload_json!r}")
        self._put((_TIMELINE, tag, payload_json, _wall_time(wall_time)))

    def add_summary(
        self, summary: Any, wall_time: float | None = None, step: int | None = None
    ) -> None:
        """Record a prebuilt ``Summary`` (TensorBoard's protos); steps follow its first tag."""
        if not summary.value:
            raise ValueError("summary has no value to record")
        step = None if step is None else _step(step)
        self._put((_SUMMARY, summary, None, _wall_time(wall_time), step))

    def flush(self) -> None:
        """Write everything accepted so far and fsync it; never raises for storage faults, and
        returns within ``CLOSE_TIMEOUT_S`` even if storage hangs."""
        self._bounded("flush", self._drain_sealed, self._sync)

    def close(self) -> None:
        """Flush, close the file and stop accepting records. Idempotent; bounded in time.

        A close while another is in progress (a SIGTERM arriving while the training code
        closes its monitor) waits for that one: the process must not die with records on
        their way to storage.
        """
        if self._closed:
            self._closing_done.wait(CLOSE_TIMEOUT_S)
            return
        self._closed = True
        with self._room:
            self._room.notify_all()  # callers waiting for room see the writer is closed
        try:
            # An object store's close uploads and seals what is left: no separate flush first.
            steps = [self._drain_sealed, self._close_file]
            if not self._remote:
                steps.insert(1, self._sync)
            self._bounded("close", *steps, done=self._closing_done)
        finally:
            _service.remove(self)
            # Only now: a SIGTERM during the close runs the exit hooks, whose close waits.
            _shutdown.cancel(self.close)
            _shutdown.cancel(self.flush)

    def _bounded(
        self, what: str, *steps: Callable[[], None], done: threading.Event | None = None
    ) -> None:
        """Run ``steps`` under the drain lock on a helper thread, waiting ``CLOSE_TIMEOUT_S`` at
        most: a write that never returns (hung storage) must not hang the caller, or exit.
        ``done`` is set by the helper once the steps ran."""
        done = threading.Event() if done is None else done

        def run() -> None:
            try:
                with self._drain_lock:
                    for step in steps:
                        step()
            except Exception:
                _log.exception("tb_monitor: %s of %s failed", what, self._run_dir)
            finally:
                done.set()

        try:
            threading.Thread(target=run, name=f"tb_monitor-{what}", daemon=True).start()
        except RuntimeError:  # Python 3.12+ starts no thread during interpreter shutdown
            run()
            return
        # An object store gets its own upload deadline (the stream warns when it passes).
        timeout = fs.FLUSH_TIMEOUT_S + CLOSE_TIMEOUT_S if self._remote else CLOSE_TIMEOUT_S
        if not done.wait(timeout):
            _log.warning(
                "tb_monitor: %s of %s gave up after %.0f s: the writer is stuck in storage; "
                "%d records still queued",
                what,
                self._path or self._run_dir,
                timeout,
                len(self._queue),
            )

    def __enter__(self) -> AsyncWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<AsyncWriter {self._run_dir!r} {state}, {len(self._queue)} queued>"

    # -- the caller's side -------------------------------------------------------------------------

    def _put(self, item: tuple) -> None:
        if self._closed:
            raise WriterClosedError(f"AsyncWriter for {self._run_dir} is closed")
        queue = self._queue
        if len(queue) >= self._wake_at:
            if not _service.wake.is_set():
                _service.wake.set()
            if len(queue) >= self._max_queue and not self._make_room():
                return
        queue.append(item)

    def _make_room(self) -> bool:
        """Wait until the queue has room (``"block"``, at most ``STALL_S``); False when the
        record must be dropped."""
        blocking = self._when_full == "block" and not self._stalled
        if blocking and self._error is None and not _service.is_current():
            deadline = time.monotonic() + STALL_S
            with self._room:
                self._waiting += 1
                try:
                    while len(self._queue) >= self._max_queue and not self._closed:
                        if not _service.is_alive() or time.monotonic() >= deadline:
                            break
                        _service.wake.set()
                        self._room.wait(0.05)
                finally:
                    self._waiting -= 1
                if len(self._queue) < self._max_queue and not self._closed:
                    return True
                if not self._closed and not self._stalled:
                    self._stalled = True
                    _log.warning(
                        "tb_monitor: the writer of %s has not caught up for %.1f s (a stalled "
                        "store?); dropping records until it does (counted in %s)",
                        self._run_dir,
                        STALL_S,
                        DROPPED_TAG,
                    )
        with self._room:
            self._dropped += 1
        return False

    # -- the writer thread's side ------------------------------------------------------------------

    def drain_now(self) -> None:
        """Write what is queued (the writer service calls this on its thread)."""
        with self._drain_lock:
            self._drain()

    def _drain_sealed(self) -> None:
        self._drain(seal=True)

    def _drain(self, seal: bool = False) -> None:
        """Encode and write every queued record, then the timeline batches that are ready
        (every open run of keep-alives too when ``seal``). Runs with ``_drain_lock`` held."""
        queue = self._queue
        while queue:
            count = min(len(queue), _BATCH)
            self._write(self._encode(count), count)
            if self._waiting:
                with self._room:
                    self._room.notify_all()
        batches = self._batcher.take(seal)
        if batches:
            self._write(self._encode_batches(batches), sum(len(b.times) for b in batches))
        self._stalled = False  # caught up: callers may wait for room again
        dropped = self.dropped
        if dropped != self._dropped_written and self._error is None:
            self._dropped_written = dropped
            queue.append((_SCALAR, DROPPED_TAG, float(dropped), _time(), None))
            self._write(self._encode(1), 1)

    def _encode(self, count: int) -> bytearray:
        """Take ``count`` queued records off the queue and encode them, in order, into one buffer.

        Runs of plain scalars (the bulk) go to the C encoder when it is built; it hands back
        every record it does not cover, which is encoded here in Python, one at a time.
        """
        popleft = self._queue.popleft
        items = [popleft() for _ in range(count)]
        if self._tensors_queued:
            if not self._queue:
                self._tensors_queued = False  # a tensor enqueued from now on sets it again
            _resolve_tensors(items)
        prefixes, steps = self._prefixes, self._next_steps
        out = bytearray()
        index = 0
        while index < count:
            if encoding.encode_scalars is not None:
                index = encoding.encode_scalars(items, index, prefixes, steps, out)
                if index == count:
                    break
            item = items[index]
            index += 1
            try:
                kind = item[0]
                if kind == _SCALAR:
                    encoding.append_scalars(
                        out, ((item[1], item[2]),), item[3], item[4], prefixes, steps
                    )
                elif kind == _SCALARS:
                    encoding.append_scalars(out, item[1].items(), item[2], None, prefixes, steps)
                elif kind == _TIMELINE:
                    self._batcher.add(item[1], item[2], item[3])
                else:
                    out += self._summary_record(item)
            except Exception:  # arguments were checked by the caller: this is a bug
                self._dropped += 1
                _log.exception("tb_monitor could not encode a record for %s", self._run_dir)
        return out

    def _encode_batches(self, batches: list[Batch]) -> bytearray:
        """One timeline record per batch (content version 3, ``contract.encode_batch``)."""
        out = bytearray()
        for batch in batches:
            kind = contract.kind_of_tag(batch.tag)
            index = contract.encode_batch(batch.times, batch.payload_ids)
            summary = summaries.timeline_batch_summary(kind, index, batch.payloads)
            step = self._next_steps.get(batch.tag, 0)
            self._next_steps[batch.tag] = step + 1
            out += encoding.summary_record(batch.times[0], step, summary)
        return out

    def _summary_record(self, item: tuple) -> bytes:
        """A text or prebuilt summary record, built with TensorBoard's protos."""
        kind, tag_or_summary, payload, wall_time, *step = item
        if kind == _TEXT:
            tag, summary = tag_or_summary, summaries.text_summary(tag_or_summary, payload)
        else:
            summary, tag = tag_or_summary, tag_or_summary.value[0].tag
        this_step = self._next_steps.get(tag, 0) if not step or step[0] is None else step[0]
        self._next_steps[tag] = this_step + 1
        return encoding.summary_record(wall_time, this_step, summary)

    def _write(self, data: bytearray, count: int) -> None:
        """Write the encoded ``data`` of ``count`` queued records (counted as dropped on error)."""
        if not data:
            return
        if self._error is not None and time.monotonic() < self._retry_at:
            self._dropped += count  # still failing: retried with backoff, not every batch
            return
        try:
            if self._file is not None and not self._remote and _deleted(self._file):
                _log.warning("tb_monitor: %s was deleted; writing to a new file", self._path)
                self._close_file()
            if self._file is None:
                self._open_file()
            if self._remote:
                self._file.write(data, count)  # buffered; uploaded on the stream's own thread
                return
            view = memoryview(data)
            while view:
                view = view[self._file.write(view) :]
            self._offset += len(data)
        except OSError as exc:
            self._dropped += count
            self._failed(_with_path(exc, f"writing {self._path or self._run_dir} failed"))
            return
        if self._error is not None:
            _log.warning("tb_monitor: writing %s works again", self._path)
            self._error = None
            self._backoff = _MIN_BACKOFF_S

    def _failed(self, error: OSError) -> None:
        """Warn once per outage, retry with backoff, and cut the file back to its last whole
        record (or start a new file when that fails), so no torn record stays in the middle."""
        if self._error is None:
            _log.warning(
                "tb_monitor: %s; dropping records (counted in %s) until writing works again",
                error,
                DROPPED_TAG,
            )
        self._error = error
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
        file = self._file
        if file is None or self._remote:
            return
        try:
            os.ftruncate(file.fileno(), self._offset)
            file.seek(self._offset)
        except (OSError, ValueError):
            self._file = None
            with contextlib.suppress(OSError):
                file.close()

    def _sync(self) -> None:
        if self._file is None or self._error is not None:
            return
        try:
            if not self._remote:
                os.fsync(self._file.fileno())
            elif not self._file.flush(fs.FLUSH_TIMEOUT_S):
                _log.warning(
                    "tb_monitor: %s: %d bytes not uploaded yet after %.0f s; still trying",
                    self._file.name,
                    self._file.pending_bytes,
                    fs.FLUSH_TIMEOUT_S,
                )
        except OSError as exc:
            self._failed(_with_path(exc, f"flushing {self._path} failed"))

    def _open_file(self) -> None:
        """Create this writer's own event file (never an existing one) and mark its version."""
        fs.makedirs(self._run_dir)  # again, if the run directory was deleted meanwhile
        host = socket.gethostname().replace("/", "_") or "localhost"
        while True:
            # Zero-padded so that name order is creation order: TensorBoard reads a run's files
            # in name order, and a later file must come after the steps it continues.
            name = (
                f"events.out.tfevents.{int(_time())}.{host}.{os.getpid():07d}."
                f"{next(_file_counter):06d}.tbm"
            )
            path = fs.join(self._run_dir, name)
            header = encoding.version_record(_time())
            try:
                self._file = fs.create_event_file(path, header)
                break
            except FileExistsError:
                continue
        self._path = path
        self._offset = len(header)

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None and self._remote:
            if not file.close(fs.FLUSH_TIMEOUT_S):
                _log.warning(
                    "tb_monitor: %s: gave up on %d bytes the object store did not take in %.0f s",
                    file.name,
                    file.pending_bytes,
                    fs.FLUSH_TIMEOUT_S,
                )
        elif file is not None:
            try:
                file.close()
            except OSError as exc:
                self._failed(_with_path(exc, f"closing {self._path} failed"))

    def after_fork_in_child(self) -> None:
        """Forget the parent's pending records and file; the child writes a file of its own."""
        self._init_locks()
        self._queue.clear()
        self._batcher.clear()
        file, self._file = self._file, None
        if file is not None and self._remote:
            _inherited_files.append(file)  # holds the parent's bytes: never upload them
        elif file is not None:
            file.close()  # unbuffered: closes the child's copy of the descriptor, nothing else
        self._path = None


def _deleted(file: Any) -> bool:
    """Whether an open local file no longer has a name (its file or directory was deleted)."""
    try:
        return os.fstat(file.fileno()).st_nlink == 0
    except OSError:
        return True


def _resolve_tensors(items: list[tuple]) -> None:
    """Replace the tensor values of scalar ``items`` by floats, one device copy per batch."""
    found = [
        i
        for i, item in enumerate(items)
        if item[0] == _SCALAR and type(item[2]) is not float and type(item[2]) is not int
    ]
    if not found:
        return
    values = _tensors.resolve([items[i][2] for i in found])
    for i, value in zip(found, values, strict=True):
        items[i] = (*items[i][:2], value, *items[i][3:])


def _next_steps(run_dir: str) -> dict[str, int]:
    """For each tag the run directory already holds, one above its largest step."""
    steps: dict[str, int] = {}
    for event in readers.iter_run_events(run_dir):
        step = event.step + 1
        for value in event.summary.value:
            if steps.get(value.tag, 0) < step:
                steps[value.tag] = step
    return steps
