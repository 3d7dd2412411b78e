"""The asynchronous event-file writer: the caller enqueues, one thread per process does the rest.

``AsyncWriter.add_*`` validates its arguments (``checks``) and appends a small tuple to a deque:
no lock, no syscall, no encoding. One daemon thread per process (``service``) wakes every
``flush_secs`` (or early, when a queue passes a threshold or a caller waits for room), encodes
the records (``encoding.RecordEncoder``) and hands each batch to the writer's event file
(``tb_monitor.logdir.eventfile``: local or an object store, one interface) in one write. So a
process killed outright loses at most the last flush interval; ``flush()`` and ``close()`` sync.

Faults never reach the caller (docs/DESIGN.md, "Faults"). Storage's are ``filekeeper``'s: a
failed write drops and counts its batch, warns once per outage, and writing resumes by itself.
A stalled store makes a caller wait at most ``STALL_S`` for room, then drops are counted until
the writer catches up. ``flush()`` and ``close()`` wait for the writer while it makes progress
(however busy the machine) and give up only once nothing moved for ``CLOSE_TIMEOUT_S`` (storage
that stopped answering), so a process never hangs at exit; a close that gives up says how many
records it lost, and why, and counts them. Every drop, the caller's own too (``count_dropped``), lands as
``tb_monitor/dropped_records``.

Steps are allocated per tag, starting one above the largest step the run directory already
holds, so a restarted process continues its curves instead of being dropped by TensorBoard's
loaders (see ``docs/DESIGN.md``, "Steps"). Where that is is found off the caller's thread
(``logdir.resume``: the run's steps files, read in one small request), so constructing a writer
costs the same on any run; records wait in the queue until it is known, and each drain keeps
this writer's own steps file up to date for the next process.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tb_monitor import _checks, _shutdown, contract
from tb_monitor._patience import wait_while_progressing
from tb_monitor.logdir import fs
from tb_monitor.logdir.eventfile import EventFile
from tb_monitor.sinks.closing import Ledger, run_bounded
from tb_monitor.sinks.encoding import (
    BUILT,
    SCALAR,
    SCALARS,
    SUMMARY,
    TEXT,
    TIMELINE,
    RecordEncoder,
)
from tb_monitor.sinks.filekeeper import DROPPED_TAG, FileKeeper, with_path
from tb_monitor.sinks.service import service as _service
from tb_monitor.sinks.steps import StepsKeeper

__all__ = ["CLOSE_TIMEOUT_S", "DROPPED_TAG", "STALL_S", "AsyncWriter", "WriterClosedError"]

#: Longest a caller waits for room in the queue before records are dropped (a stalled store).
STALL_S = 1.0
#: How long ``flush()``/``close()`` wait for a writer thread that makes no progress (no record
#: encoded, no write returned, no byte acknowledged): one stuck in storage (an object store adds
#: its own upload deadline, ``EventFile.wait_s``).
CLOSE_TIMEOUT_S = 10.0

_log = logging.getLogger(__name__)

_BATCH = 4096  # records per write() call
_INT_LIMIT = 2**1023  # ints at or beyond it may not fit a float
_time = time.time


def _wake_the_writer_thread() -> None:
    _service.wake.set()  # looked up at each call: a forked child's service has a new event


class WriterClosedError(ValueError):
    """A record was added to a writer after ``close()``."""


class AsyncWriter:
    """Writes TensorBoard event files off the caller's thread, with bounded memory.

        >>> with AsyncWriter("runs/exp1") as writer:
        ...     writer.add_scalar("loss", 0.25)

    ``when_full="block"`` (the default) makes a caller wait for room when ``max_queue`` records
    are pending (a burst), so nothing is lost, but never longer than ``STALL_S`` (a stalled
    store): then records are dropped until the writer catches up. ``"drop"`` drops at once. The
    count of dropped records is written as the scalar ``tb_monitor/dropped_records``. A write
    error (a full disk) is logged once per outage and counted; writing resumes by itself, and
    ``error`` tells the last one. Memory is bounded by ``max_queue`` records.
    ``filename_suffix`` ends the event files' names, as torch's ``SummaryWriter`` has it.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        flush_secs: float = 2.0,
        max_queue: int = 65536,
        when_full: Literal["block", "drop"] = "block",
        filename_suffix: str = "",
    ) -> None:
        _checks.options(flush_secs, max_queue, when_full)
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
        self._dropped_written = 0
        self._stalled = False
        self._tensors_queued = False
        self._ledger = Ledger()
        self._doing = "waiting for the run's steps"  # what the drain is doing, for a give-up
        self._init_locks()
        self._encoder: RecordEncoder | None = None  # once the run's steps are known
        self._steps = StepsKeeper(self._run_dir, self.flush_secs, _wake_the_writer_thread)
        try:
            fs.check_logdir(self._run_dir)
            self._storage = FileKeeper(self._run_dir, self._steps, filename_suffix)
        except OSError as exc:
            message = f"cannot write TensorBoard event files to {self._run_dir}"
            raise with_path(exc, message) from exc

        _service.add(self)
        _shutdown.at_exit(self.close, _shutdown.SINKS)
        # A SIGTERM the process survives (the user's handler checkpoints, say) makes the
        # records durable but closes nothing; see _shutdown.
        _shutdown.on_flush(self.flush, _shutdown.SINKS)
        _shutdown.install_sigterm_handler()

    def _init_locks(self) -> None:
        self._drain_lock = threading.RLock()  # reentrant: a SIGTERM handler may close mid-flush
        self._ledger.new_lock()
        self._room = self._ledger.room
        self._waiting = 0

    # -- public API ------------------------------------------------------------------------------

    @property
    def run_dir(self) -> str:
        """The directory this writer's event files go to (one TensorBoard run)."""
        return self._run_dir

    @property
    def path(self) -> str | None:
        """The event file currently written, or None before a forked child writes its first."""
        return self._storage.path

    @property
    def file(self) -> EventFile | None:
        """The ``EventFile`` currently written (storage's side of this writer), or None."""
        return self._storage.file

    @property
    def dropped(self) -> int:
        """How many records were dropped: queue full with ``when_full="drop"``, a write error,
        an object store unreachable for longer than the upload buffer holds, or the caller's
        own (``count_dropped``)."""
        encoder = self._encoder
        failed = 0 if encoder is None else encoder.failed
        return self._ledger.dropped + failed + self._storage.dropped

    @property
    def error(self) -> OSError | None:
        """The storage error in progress, or None while writing works; writing resumes by
        itself once storage does, with no call needed."""
        return self._storage.error

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: adds then raise ``WriterClosedError``, and another
        ``close()`` waits for the first to finish."""
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
            value = _checks.real(value, f"scalar {tag!r}")  # beyond a float's range: refused
        elif type(value) is not float and type(value) is not int:
            value = _checks.scalar_value(value, f"scalar {tag!r}")
            if type(value) is not float:
                self._tensors_queued = True  # read back on the writer thread, before encoding
        if type(wall_time) is not float:
            wall_time = _time() if wall_time is None else _checks.wall_time(wall_time)
        item = (
            SCALAR,
            tag if type(tag) is str else _checks.tag(tag),
            value,
            wall_time,
            None if step is None else _checks.step(step),
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
                scalars[_checks.tag(tag)] = _checks.real(value, f"scalar {tag!r}")
            elif type(tag) is not str:
                _checks.tag(tag)
        if type(wall_time) is not float:
            wall_time = _time() if wall_time is None else _checks.wall_time(wall_time)
        self._put((SCALARS, scalars, wall_time))

    def add_text(self, tag: str, text: str, wall_time: float | None = None) -> None:
        """Record a text-dashboard entry (rendered as Markdown by TensorBoard)."""
        if not isinstance(text, str):
            raise TypeError(f"text for tag {tag!r} must be a str, got {text!r}")
        self._put((TEXT, _checks.tag(tag), text, _checks.wall_time(wall_time)))

    def add_timeline(
        self, kind: str, payload_json: str, wall_time: float, *, heartbeat: bool | None = None
    ) -> None:
        """Record a timeline record: ``payload_json`` is the event's JSON as torch serializes it.

        ``heartbeat``: whether it is a rendezvous keep-alive (``contract.is_heartbeat`` of its
        decoded fields), where the caller decoded them already; None, and the writer's thread
        decodes the payload to find out. Only a rendezvous record can be one.
        """
        tag = contract.timeline_tag(kind)  # rejects an unknown kind here, on the caller's thread
        if not isinstance(payload_json, (str, bytes)):
            raise TypeError(f"timeline payload must be JSON text, got {payload_json!r}")
        if heartbeat is not None:
            heartbeat = bool(heartbeat) and kind == contract.RENDEZVOUS
        self._put((TIMELINE, tag, payload_json, _checks.wall_time(wall_time), heartbeat))

    def add_summary(
        self, summary: Any, wall_time: float | None = None, step: int | None = None
    ) -> None:
        """Record a prebuilt ``Summary`` (TensorBoard's protos); steps follow its first tag."""
        if not summary.value:
            raise ValueError("summary has no value to record")
        step = None if step is None else _checks.step(step)
        self._put((SUMMARY, summary, None, _checks.wall_time(wall_time), step))

    def add_built(self, build: Callable[[], Any], wall_time: float | None = None) -> None:
        """Record the ``Event`` (TensorBoard's proto) that ``build()`` returns, called on the
        writer's thread, so the caller pays for enqueuing only (``tb_monitor.SummaryWriter``
        builds its summaries so). Its steps are its own; its wall time ``wall_time`` unless it
        sets one. A build that raises is logged and counted as dropped, never raised here."""
        if not callable(build):
            raise TypeError(f"build must be callable, got {build!r}")
        self._put((BUILT, build, None, _checks.wall_time(wall_time)))

    def count_dropped(self, records: int) -> None:
        """Count ``records`` the caller dropped before adding them (a bound of its own, as
        ``SummaryWriter``'s on snapshot bytes): they land in ``tb_monitor/dropped_records``."""
        if type(records) is not int or records < 0:
            raise ValueError(f"records must be a non-negative int, got {records!r}")
        self._ledger.drop(records)

    def flush(self) -> None:
        """Write everything accepted so far and sync it; never raises for storage faults, and
        waits for hung storage at most ``CLOSE_TIMEOUT_S`` without progress."""
        self._bounded("flush", self._drain_all, self._storage.sync)

    def close(self) -> None:
        """Flush, close the file and stop accepting records. Idempotent; bounded in time.

        A close while another is in progress (a SIGTERM arriving while the training code
        closes its monitor) waits for that one: the process must not die with records on
        their way to storage.
        """
        if self._closed:
            idle_s = CLOSE_TIMEOUT_S + self._storage.wait_s  # as the first close's
            wait_while_progressing(self._closing_done.wait, self._progress_mark, idle_s)
            return
        self._closed = True
        with self._room:
            self._room.notify_all()  # callers waiting for room see the writer is closed
        try:
            # The file's close syncs (an object store's uploads and seals what is left).
            self._bounded("close", self._drain_all, self._storage.close, done=self._closing_done)
        finally:
            _service.remove(self)
            # Only now: a SIGTERM during the close runs the exit hooks, whose close waits.
            _shutdown.cancel(self.close)
            _shutdown.cancel(self.flush)

    def _bounded(
        self, what: str, *steps: Callable[[], None], done: threading.Event | None = None
    ) -> None:
        """Run ``steps`` under the drain lock on a helper thread, waiting for it while it makes
        progress (``closing``); ``done`` is set by the helper once the steps ran."""
        done = threading.Event() if done is None else done
        idle_s = CLOSE_TIMEOUT_S + self._storage.wait_s
        lock, mark = self._drain_lock, self._progress_mark
        if not run_bounded(what, steps, lock, mark, idle_s, done, self._run_dir):
            self._gave_up(what, idle_s)

    def _progress_mark(self) -> tuple[int, int]:
        return self._ledger.writes, self._storage.acknowledged  # a longer queue is no progress

    def _gave_up(self, what: str, idle_s: float) -> None:
        """Say what a flush or close that gave up leaves behind; a close counts it as lost."""
        where = self._storage.path or self._run_dir
        ledger, queue, encoder = self._ledger, self._queue, self._encoder
        left = ledger.abandon(queue, encoder) if what == "close" else ledger.left(queue, encoder)
        stuck = f"{what} of {where} gave up after {idle_s:.0f} s with no progress ({self._doing})"
        if what == "close":
            _log.warning("tb_monitor: %s: %s lost, counted in %s", stuck, left, DROPPED_TAG)
        else:
            _log.warning("tb_monitor: %s; %s wait, written once it moves again", stuck, left)

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
        if blocking and self._storage.error is None and not _service.is_current():
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
        self._ledger.drop(1)
        return False

    # -- the writer thread's side ------------------------------------------------------------------

    def drain_now(self) -> None:
        """Write what is queued (the writer service calls this on its thread)."""
        with self._drain_lock:
            self._drain()

    def _drain(self, seal: bool = False) -> None:
        """Encode and write every queued record, then the timeline batches that are ready
        (every open run of keep-alives too when ``seal``), then update the steps file. Runs with
        ``_drain_lock`` held; until the run's steps are known, only ``seal`` (a flush or a close)
        waits for them, and the writer thread leaves the records queued."""
        if self._encoder is None and not self._resumed(wait=seal):
            return
        queue, encoder, ledger = self._queue, self._encoder, self._ledger
        while queue and not ledger.abandoned:
            count = min(len(queue), _BATCH)
            self._doing = "encoding"
            self._write(*self._encode(count))
            if self._waiting:
                with self._room:
                    self._room.notify_all()
        for batch in ledger.take_batches(encoder, seal):
            if ledger.abandoned:
                break
            self._doing = "encoding timeline batches"
            self._write(encoder.timeline_record(batch), len(batch.times))
        if ledger.abandoned:  # what is left was counted when the close gave up
            ledger.forget(queue, encoder)
        self._stalled = False  # caught up: callers may wait for room again
        dropped = self.dropped
        if dropped != self._dropped_written and self._storage.error is None:
            self._dropped_written = dropped
            record = (SCALAR, DROPPED_TAG, float(dropped), _time(), None)
            self._write(encoder.encode([record]), 1, taken=False)
        self._doing = "writing the steps file"
        self._steps.record(encoder.next_steps, now=seal)
        self._doing = "syncing"

    _drain_all = functools.partialmethod(_drain, seal=True)  # a flush's or close's: every run

    def _write(self, data: bytes | bytearray, count: int, taken: bool = True) -> None:
        """Hand ``count`` encoded records to storage; ``taken``: they were in hand."""
        self._doing = "writing to storage"
        self._storage.write(data, count)
        self._ledger.written(count, taken)

    def _resumed(self, wait: bool) -> bool:
        """Whether the run's steps are known (waiting for them when ``wait``); builds the
        encoder on them."""
        resumed = self._steps.known(wait)
        if resumed is None:
            return False
        self._storage.follow(resumed.last)
        self._encoder = RecordEncoder(resumed.steps, self._run_dir)
        return True

    def _encode(self, count: int) -> tuple[bytearray, int]:
        """Take ``count`` queued records off the queue and encode them, in order; with how many
        records the bytes hold (timeline records wait in their batches instead)."""
        encoder = self._encoder
        assert encoder is not None  # drained only once the steps are known
        items = self._ledger.take(self._queue, count)
        tensors = self._tensors_queued
        if tensors and not self._queue:
            self._tensors_queued = False  # a tensor enqueued from now on sets it again
        held = encoder.held
        data = encoder.encode(items, tensors)
        batched = encoder.held - held
        self._ledger.batched(batched)
        return data, count - batched

    def after_fork_in_child(self) -> None:
        """Forget the parent's pending records and file; the child writes a file of its own.

        The child goes on from the steps its parent had allocated (or finds them itself, when
        the parent had not yet), and its steps file covers what the parent's covered.
        """
        self._init_locks()
        self._queue.clear()
        if self._encoder is not None:
            self._encoder.clear()
        self._steps.after_fork_in_child()
        self._storage.abandon()
