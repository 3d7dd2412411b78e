"""The one timer thread that ends every Stat's windows on time, on wall-clock boundaries.

``Stat.add`` reads no clock; this thread wakes at each window's end (a multiple of its size on
the wall clock) and has the Stat log it. It holds Stats weakly, reads an injectable clock
(``use_clock``; ``tb_monitor.testing.manual_clock``), and at exit logs every pending window
before the sinks close (``_shutdown.PRODUCERS``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Protocol

from tb_monitor import _shutdown

__all__ = [
    "TIMER_THREAD_NAME",
    "Clock",
    "Windowed",
    "end_windows",
    "now_ns",
    "run_due",
    "use_clock",
]

_log = logging.getLogger("tb_monitor")


class Windowed(Protocol):
    """What the timer needs of a Stat (``tb_monitor._stat``)."""

    name: str
    _window_ns: int
    _timer_seq: int

    def _end_window(self) -> None: ...
    def _exit(self) -> None: ...
    def _reset_after_fork(self) -> None: ...


# Longest sleep between checks, so a wall-clock step forward is noticed within this many seconds.
_MAX_WAIT = 1.0
_EXIT_JOIN_TIMEOUT = 5.0


class Clock(Protocol):
    """Where the timer reads the wall clock: the ``time`` module, or a test's manual clock."""

    def time_ns(self) -> int: ...


_clock: Clock = time


def _next_boundary(window_ns: int) -> int:
    return (_clock.time_ns() // window_ns + 1) * window_ns


class _Timer:
    """Ends windows at multiples of their size on the wall clock, for all Stats of the process.

    It holds the Stats weakly, so a Stat nobody uses any more is garbage-collected (and logs its
    pending samples) as usual. The lock is re-entrant because a Stat's ``__del__`` (which calls
    ``remove``) may run wherever the last reference drops, including under this lock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        # (deadline ns, sequence number, window ns, weak reference to the Stat). Removal is lazy:
        # an entry whose sequence number left _live is dropped when it reaches the top.
        self._heap: list[tuple[int, int, int, weakref.ref[Windowed]]] = []
        self._live: dict[
            int, weakref.ref[Windowed]
        ] = {}  # sequence number -> Stat, one per live Stat
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._exit_hook_registered = False
        self._manual = False  # a test's clock drives the windows (run_due), not the thread
        self._jobs: deque[Callable[[], None]] = deque()  # windows to log off the caller's thread

    def add(self, stat: Windowed) -> None:
        with self._cond:
            window_ns, seq, ref = stat._window_ns, next(self._seq), weakref.ref(stat)
            stat._timer_seq = seq
            self._live[seq] = ref
            heapq.heappush(self._heap, (_next_boundary(window_ns), seq, window_ns, ref))
            if not self._exit_hook_registered:
                _shutdown.at_exit(self.close_all, _shutdown.PRODUCERS)
                _shutdown.on_flush(self.flush_all, _shutdown.PRODUCERS)
                self._exit_hook_registered = True
            self._start_locked()
            self._cond.notify()

    def remove(self, stat: Windowed) -> None:
        with self._cond:
            if self._live.pop(getattr(stat, "_timer_seq", -1), None) is None:
                return
            # Drop the removed entries now and then, so the heap stays O(live Stats).
            if len(self._heap) > 2 * len(self._live) + 64:
                self._heap = [entry for entry in self._heap if entry[1] in self._live]
                heapq.heapify(self._heap)

    def stats(self) -> list[Windowed]:
        """The live Stats, in no particular order."""
        with self._cond:
            refs = list(self._live.values())
        return [stat for stat in (ref() for ref in refs) if stat is not None]

    def ensure_running(self) -> None:
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        # Fresh deadlines: after a fork the inherited ones belong to the parent's past.
        self._heap = [
            (_next_boundary(ns), seq, ns, ref)
            for _, seq, ns, ref in self._heap
            if seq in self._live
        ]
        heapq.heapify(self._heap)
        self._thread = threading.Thread(target=self._run, name=TIMER_THREAD_NAME, daemon=True)
        self._thread.start()

    def use_clock(self, clock: Clock, manual: bool) -> Clock:
        """Read time from ``clock`` from now on; ``manual``: only ``run_due`` ends windows."""
        global _clock
        with self._cond:
            previous, _clock = _clock, clock
            self._manual = manual
            self._heap = [(_next_boundary(ns), seq, ns, ref) for _, seq, ns, ref in self._heap]
            heapq.heapify(self._heap)
            self._cond.notify_all()
        return previous

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the timer thread soon (a capped window whose tensors must be read)."""
        with self._cond:
            self._jobs.append(job)
            self._start_locked()
            self._cond.notify()

    def _run_jobs(self) -> None:
        while self._jobs:
            try:
                job = self._jobs.popleft()
            except IndexError:
                return
            try:
                job()
            except Exception:
                _log.exception("tb_monitor: logging a Stat window failed")

    def run_due(self) -> int:
        """End, on the caller's thread, every window due by the clock; how many ended."""
        self._run_jobs()
        ended = 0
        while (stat := self._pop_due()) is not None:
            self._end(stat)
            ended += 1
        return ended

    def _pop_due(self) -> Windowed | None:
        """The Stat whose window is due now (its next deadline set), or None; lock held."""
        with self._cond:
            while self._heap:
                deadline, seq, window_ns, ref = self._heap[0]
                if seq not in self._live:  # removed: the Stat was closed
                    heapq.heappop(self._heap)
                    continue
                if deadline > _clock.time_ns():
                    return None
                stat = ref()
                if stat is None:  # collected; its __del__ logged what it held
                    heapq.heappop(self._heap)
                    del self._live[seq]
                    continue
                heapq.heapreplace(self._heap, (_next_boundary(window_ns), seq, window_ns, ref))
                return stat
            return None

    def _next_due(self) -> Windowed | None:
        """Wait for the earliest deadline; the Stat whose window ends, or None once stopped."""
        me = threading.current_thread()
        with self._cond:
            while self._thread is me:
                if self._jobs and not self._manual:  # a manual clock's run_due runs them
                    return None
                if self._manual or not self._heap:
                    self._cond.wait(None if not self._heap else _MAX_WAIT)
                    continue
                stat = self._pop_due()
                if stat is not None:
                    return stat
                if self._heap:
                    delay = self._heap[0][0] - _clock.time_ns()
                    self._cond.wait(min(max(delay, 0) / 1e9, _MAX_WAIT))
            return None

    @staticmethod
    def _end(stat: Windowed) -> None:
        try:
            stat._end_window()
        except Exception:
            _log.exception("tb_monitor: ending a window of Stat %r failed", stat.name)

    def _run(self) -> None:
        me = threading.current_thread()
        while self._thread is me:
            stat = self._next_due()
            if stat is not None:
                self._end(stat)
            del stat  # hold no reference while waiting: the Stat may be collected meanwhile
            self._run_jobs()

    def flush_all(self) -> None:
        """End every live Stat's window now (a survived SIGTERM, or a monitor closing)."""
        for stat in self.stats():
            self._end(stat)

    def close_all(self) -> None:
        """Exit hook: log every live Stat's pending window, then stop the thread."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._exit_hook_registered = False
            self._cond.notify_all()
        # Let a window the thread is ending right now reach its handlers before the sinks close.
        if thread is not None and thread is not threading.current_thread():
            thread.join(_EXIT_JOIN_TIMEOUT)
        self._run_jobs()
        for stat in self.stats():
            try:
                stat._exit()
            except Exception:
                _log.exception("tb_monitor: closing Stat %r at exit failed", stat.name)

    def after_fork_in_child(self) -> None:
        """The thread did not survive the fork: forget it and the parent's samples.

        Each Stat restarts the thread on its first ``add`` in the child (``_revive``), so a
        child that never uses its inherited Stats never starts a thread.
        """
        self._cond = threading.Condition(threading.RLock())
        self._thread = None
        for stat in self.stats():
            stat._reset_after_fork()


TIMER_THREAD_NAME = "tb_monitor-stat-timer"
#: The process's timer.
timer = _Timer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=timer.after_fork_in_child)


def now_ns() -> int:
    """The wall clock's time in ns, as the timer reads it (a test's clock, when one is used)."""
    return _clock.time_ns()


def end_windows() -> None:
    """End every live Stat's current window now, logging what it holds."""
    timer.flush_all()


def use_clock(clock: Clock, *, manual: bool) -> Clock:
    """Read the wall clock from ``clock``; return the one used before (``tb_monitor.testing``)."""
    return timer.use_clock(clock, manual)


def run_due() -> int:
    """End every window that is due by the clock, on the caller's thread (a manual clock's tick)."""
    return timer.run_due()
