"""Async collectives that finish on a GPU after torch has returned, timed off the training thread.

Opt-in (``TB_MONITOR_NCCL_TIMING=1``): NCCL then records two CUDA events around every
collective of the job. (DDP's gradient wait, ``grad_wait``, reads its own events in later
backwards instead: a poller's wake-ups cost an NCCL step too much there.) Tested with a stand-in
for NCCL's ``Work`` here, and on an H200 with real NCCL (``tests/integration/
test_rank_health_device.py``).

NCCL completes an ``async_op`` work's future as soon as the kernel is queued, so neither the
call's return nor the future says when the collective ended. Its ``Work`` does: ``is_completed()``
queries the CUDA event NCCL records after the kernel, and ``_get_duration()`` is the time (ms)
between the events NCCL records around it, when the process group was created with
``TORCH_NCCL_ENABLE_TIMING=1`` (which ``RankHealth.install`` then sets, unless the environment
says otherwise). That span starts once the kernel's inputs are ready and ends when every peer
has taken part: the rank's time in the collective, waiting for peers and moving the data
(compute on other streams may overlap it).

The training thread only appends the work to a deque, and never while its stream captures a
CUDA graph. A daemon thread, started on the first such work, looks at the oldest every
``poll_s`` and hands the finished ones, in launch order, to ``done``: collectives queued on one
stream finish in that order, so one query a poll is enough while the oldest runs (one launched
later on another stream waits its turn, but its time is the CUDA events', not the poller's).
The thread runs in CUDA's thread-local capture mode (``_cuda_capture``), so its queries never
invalidate a graph another thread is capturing; where that mode cannot be set, nothing is polled
and collectives are timed to their launch.

Holding a work keeps its tensors alive until it is seen done, so at most ``max_pending`` are
held (past that a collective is timed to its launch, with one warning), and one held for
``give_up_s`` is let go, timed to then (a work that never completes must not block the rest).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from tb_monitor.rank._cuda_capture import thread_local_capture_mode

__all__ = ["DeviceWorks"]

_log = logging.getLogger("tb_monitor")


def _cuda_ready() -> bool:
    """Whether the calling thread may query a work's CUDA events now: CUDA is up, and its
    current stream is not capturing a graph (a query there would invalidate the capture)."""
    import torch

    return torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing()


class DeviceWorks:
    """Works still running on the device, resolved by a daemon thread (``poll`` in tests).

    ``done(last_seq, seconds)`` gets each poll's finished works at once: their times, oldest
    first, and the sequence number of the newest. ``on_device`` and ``thread_setup`` are the
    CUDA checks above, injected in tests.
    """

    def __init__(
        self,
        done: Callable[[int, list[float]], None],
        clock: Callable[[], float],
        *,
        poll_s: float = 0.002,
        max_pending: int = 4096,
        give_up_s: float = 300.0,
        on_device: Callable[[], bool] = _cuda_ready,
        thread_setup: Callable[[], bool] = thread_local_capture_mode,
    ) -> None:
        self._done, self._clock = done, clock
        self._poll_s, self._max_pending, self._give_up_s = poll_s, max_pending, give_up_s
        self._on_device, self._thread_setup = on_device, thread_setup
        # In launch order: the training thread appends, only the poller pops (under _lock).
        self._pending: collections.deque[tuple[Any, int, float]] = collections.deque()
        self._wake = threading.Event()
        self._idle = False  # the poller sleeps until woken (nothing held)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one poller at a time: the thread, or close()
        #: Collectives timed to their launch because ``max_pending`` works were already held.
        self.timed_at_launch = 0
        #: Collectives timed to when they were seen done: their group records no CUDA events.
        self.timed_when_seen = 0
        #: Works let go after ``give_up_s``, timed to then.
        self.given_up = 0

    def add(self, work: Any, seq: int, start: float) -> bool:
        """Hold ``work`` (entered as collective ``seq`` at ``start``) until the device is done
        with it. False when it is not held, and the caller times it now: it is done already,
        this thread may not query it (no CUDA, or capturing a graph), or closed, or full."""
        if self._closed or not self._on_device() or work.is_completed():
            return False
        if len(self._pending) >= self._max_pending:
            self.timed_at_launch += 1
            if self.timed_at_launch == 1:
                _log.warning(
                    "tb_monitor: %d asynchronous collectives are still running on the device; "
                    "more are timed to their launch until some finish",
                    self._max_pending,
                )
            return False
        self._pending.append((work, seq, start))
        if self._thread is None:
            self._start()
        elif self._idle:  # only a sleeping poller is woken: a wake-up costs the caller ~10 µs
            self._idle = False
            self._wake.set()
        if self._closed:  # closed meanwhile: nothing will poll it
            self._pending.clear()
            return False
        return True

    def poll(self) -> int:
        """Hand the works the device is done with, oldest first, to ``done``; how many are
        still held."""
        with self._lock:
            return self._poll()

    def _poll(self) -> int:
        pending, seconds, last = self._pending, [], 0
        while pending:
            work, seq, start = pending[0]
            took = self._seconds(work, start)
            if took is None:
                break
            pending.popleft()
            seconds.append(took)
            last = seq
        if seconds:
            self._done(last, seconds)
        return len(pending)

    def _seconds(self, work: Any, start: float) -> float | None:
        """How long ``work``, launched at ``start``, took on the device; None while it runs."""
        try:
            if not work.is_completed():
                if self._clock() - start < self._give_up_s:
                    return None
                self.given_up += 1
                return self._clock() - start
        except Exception:  # what a backend raises for a failed work: it has ended too
            return self._clock() - start
        try:
            return work._get_duration() / 1e3
        except Exception as exc:  # no timing, or a failed work (its end event never came)
            if "timing" in str(exc):  # NCCL: "getDuration only works if timing was enabled"
                self.timed_when_seen += 1
                if self.timed_when_seen == 1:
                    _log.warning(
                        "tb_monitor: an asynchronous collective's process group records no "
                        "CUDA events; its collectives are timed to when they are seen done "
                        "(within %g s). Set TORCH_NCCL_ENABLE_TIMING=1 before "
                        "init_process_group for exact times",
                        self._poll_s,
                    )
            return self._clock() - start

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="tb_monitor-device-works", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread can start (limits, or the interpreter is exiting)
            self._give_up("no thread could be started to time them")
            return
        self._thread = thread

    def _give_up(self, why: str) -> None:
        """Time collectives to their launch from now on, letting go of the works held."""
        _log.warning("tb_monitor: asynchronous GPU collectives are timed to their launch: %s", why)
        self._closed = True
        self._pending.clear()

    def _run(self) -> None:
        if not self._thread_setup():
            self._give_up("CUDA's thread-local capture mode could not be set for the poller")
            return
        while not self._closed:
            try:
                held = self.poll()
            except Exception:  # never let the poller die: the training thread keeps adding
                _log.exception("tb_monitor: timing asynchronous collectives failed")
                held = 0
            if held:
                if self._wake.wait(self._poll_s):  # add() woke us (or close): poll on time
                    self._wake.clear()
                continue
            # Nothing held: sleep until add() sees _idle and wakes us. Set before looking at
            # _pending once more, as add() appends before it looks at _idle: one of the two
            # sees the other.
            self._wake.clear()
            self._idle = True
            if not self._pending and not self._closed:
                self._wake.wait()
            self._idle = False

    def forget(self) -> None:
        """In a forked child: the parent's works are the parent's (and its CUDA context), and
        neither the poller thread nor the state of its locks came along."""
        self._pending.clear()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = False
        self._thread = None

    def close(self) -> None:
        """Record the works already done, let go of the rest, and stop the poller."""
        self._closed = True
        self._wake.set()  # a poller asleep or between polls ends now
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        if self._lock.acquire(timeout=1.0):  # not behind a poller stuck in a CUDA call
            try:
                self._poll()
            finally:
                self._lock.release()
        self._pending.clear()
