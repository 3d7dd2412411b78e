"""Async collectives that finish on a GPU after torch has returned, timed off the training thread.

NCCL completes an ``async_op`` work's future as soon as the kernel is queued, so neither the
call's return nor the future says when the collective ended. Its ``Work`` does: ``is_completed()``
queries the CUDA event NCCL records after the kernel, and ``_get_duration()`` is the time between
the events NCCL records around it (when the process group was created with
``TORCH_NCCL_ENABLE_TIMING=1``, which ``RankHealth.install`` sets unless the environment says
otherwise). That span starts once the kernel's inputs are ready and ends when every peer has
taken part, so it is the rank's wait in the collective, measured on the GPU.

The training thread only appends the work to a deque. A daemon thread, started on the first such
work, looks at the oldest every ``poll_s`` and hands the finished ones, in launch order, to
``done``: collectives queued on one stream finish in that order, so one query a
poll is enough while the oldest runs (one launched later on another stream waits its turn, but its
time is the CUDA events', not the poller's). Holding a work keeps its tensors alive until it is
seen done, so at most ``max_pending`` are held; past that a collective is timed to its launch,
with one warning.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DeviceWorks"]

_log = logging.getLogger("tb_monitor")


class DeviceWorks:
    """Works still running on the device, resolved by a daemon thread (``poll`` in tests).

    ``done(last_seq, seconds)`` gets each poll's finished works at once: their waits, oldest
    first, and the sequence number of the newest.
    """

    def __init__(
        self,
        done: Callable[[int, list[float]], None],
        clock: Callable[[], float],
        *,
        poll_s: float = 0.002,
        max_pending: int = 4096,
    ) -> None:
        self._done, self._clock = done, clock
        self._poll_s, self._max_pending = poll_s, max_pending
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

    def add(self, work: Any, seq: int, start: float) -> bool:
        """Hold ``work`` (entered as collective ``seq`` at ``start``) until the device is done
        with it; False when it is not held (closed, or full), so the caller times it now."""
        if self._closed:
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
        return True

    def poll(self) -> int:
        """Hand the works the device is done with, oldest first, to ``done``; how many are
        still held."""
        with self._lock:
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
        """How long ``work``, launched at ``start``, waited on the device; None while it runs.
        A failed collective (``is_completed`` raises its error) has ended too."""
        try:
            if not work.is_completed():
                return None
        except Exception:  # the collective failed: it is over all the same
            return self._clock() - start
        try:
            return work._get_duration() / 1e3
        except Exception:  # a group created without TORCH_NCCL_ENABLE_TIMING
            self.timed_when_seen += 1
            if self.timed_when_seen == 1:
                _log.warning(
                    "tb_monitor: an asynchronous collective's process group records no CUDA "
                    "events; its collectives are timed to when they are seen done (within %g s). "
                    "Set TORCH_NCCL_ENABLE_TIMING=1 before init_process_group for exact times",
                    self._poll_s,
                )
            return self._clock() - start

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="tb_monitor-device-works", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            try:
                held = self.poll()
            except Exception:  # never let the poller die: the training thread keeps adding
                _log.exception("tb_monitor: timing asynchronous collectives failed")
                held = 0
            if held:
                self._wake.wait(self._poll_s)
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
        the poller thread did not come along."""
        self._pending.clear()
        self._lock = threading.Lock()
        self._thread = None

    def close(self) -> None:
        """Record the works already done, let go of the rest, and stop the poller."""
        self._closed = True
        self._wake.set()  # a poller asleep or between polls ends now
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        self.poll()
        with self._lock:
            self._pending.clear()
