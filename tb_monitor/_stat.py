"""``Stat``: windowed aggregation of samples, logged as ``torch.monitor.Stat`` events.

The hot path is ``Stat.add``: it only folds the sample into the current window (count, sum, min,
max, last) and never reads a clock. One shared timer thread ends every Stat's windows on their
wall-clock boundaries and logs them through ``log_event``. The accumulator is a small C type
(``_accumulator.c``) when it is built, else a pure-Python class with the same behaviour; set
``TB_MONITOR_PURE_PYTHON=1`` to force the latter. The choice is made once, at import: ``Stat``
derives from the chosen accumulator, so it can be subclassed like any class.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
import os
import sys
import sysconfig
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from tb_monitor import _shutdown, _tensors
from tb_monitor._event import Event, log_event
from tb_monitor.contract import STAT_EVENT, stat_tag

__all__ = ["Aggregation", "Stat"]

_log = logging.getLogger("tb_monitor")


class Aggregation(Enum):
    """How a Stat summarizes the samples of one window (values as in torch's C++ enum)."""

    VALUE = 1  #: the last sample
    MEAN = 2
    COUNT = 3
    SUM = 4
    MAX = 5
    MIN = 6


# A snapshot of one ended window: (count, sum, min, max, last).
_Snapshot = tuple[int, float, float, float, float]

# ---------------------------------------------------------------------------------------------
# The pure-Python accumulator: the same contract as _accumulator.Accumulator (see _accumulator.c).
# ---------------------------------------------------------------------------------------------

_OPEN, _CAPPED, _CLOSED, _FORKED, _DEFERRED = range(5)


def _as_float(name: str, value: Any) -> float:
    """``value`` as a float the way the C accumulator converts it, or an error naming the Stat."""
    kind = type(value)
    try:
        if isinstance(value, (float, int)):
            return float(value)
        if hasattr(kind, "__float__"):
            return float(value)
        if hasattr(kind, "__index__"):
            return float(operator.index(value))
    except (OverflowError, TypeError, ValueError) as exc:  # 10**400, a numpy array, ...
        error = next(t for t in (OverflowError, TypeError, ValueError) if isinstance(exc, t))
        raise error(f"Stat {name!r}: add() got {value!r:.200}: {exc}") from exc
    raise TypeError(
        f"Stat {name!r}: add() takes a real number (int, float, bool or a numpy scalar), "
        f"got {value!r} of type {kind.__qualname__}"
    )


def _fold(snapshot: _Snapshot | None, values: list[float]) -> _Snapshot | None:
    """``snapshot`` with ``values`` added in order, exactly as the accumulators add floats."""
    if snapshot is None:
        if not values:
            return None
        count, total, low, high, last = 0, 0.0, values[0], values[0], 0.0
    else:
        count, total, low, high, last = snapshot
    for x in values:
        if count:
            if low == low and (x < low or x != x):
                low = x
            if high == high and (x > high or x != x):
                high = x
        else:
            low = high = x
        count += 1
        total += x
        last = x
    return count, total, low, high, last


def _closed_error(name: str) -> RuntimeError:
    return RuntimeError(f"Stat {name!r} is closed; it accepts no more samples")


class PyAccumulator:
    """One Stat's current window, guarded by a lock (the fallback for ``_accumulator.Accumulator``)."""

    __slots__ = (
        "_count",
        "_last",
        "_lock",
        "_max",
        "_max_samples",
        "_min",
        "_name",
        "_state",
        "_sum",
    )
    # Stat's hooks: a window reached max_samples; the first add in a forked child; a value that
    # is not a plain number, or any add of a deferred window.
    _on_cap: Any
    _revive: Any
    _add_object: Any

    def __init__(self, name: str, max_samples: int) -> None:
        if max_samples < 1:
            raise ValueError(f"Stat {name!r}: max_samples must be >= 1, got {max_samples}")
        self._name = name
        self._max_samples = max_samples
        # Re-entrant: a SIGTERM handler that flushes may run on this thread in the middle of add.
        self._lock = threading.RLock()
        self._state = _OPEN
        self._clear()

    def _clear(self) -> None:
        self._count = 0
        self._sum = self._min = self._max = self._last = 0.0

    def _take_window(self) -> _Snapshot | None:
        if not self._count:
            return None
        snapshot = (self._count, self._sum, self._min, self._max, self._last)
        self._clear()
        return snapshot

    def add(self, value: Any) -> None:
        kind = type(value)
        if self._state == _DEFERRED or (
            kind is not float and kind is not int and not isinstance(value, (float, int))
        ):
            return self._add_object(value)  # see the C accumulator: tensors stay unread
        x = value if kind is float else _as_float(self.name, value)
        with self._lock:
            if self._state != _OPEN:
                snapshot = None
            else:
                count = self._count
                if count:
                    # NaN propagates to min and max as to the sum (IEEE 754-2019 minimum/maximum).
                    low, high = self._min, self._max
                    if low == low and (x < low or x != x):
                        self._min = x
                    if high == high and (x > high or x != x):
                        self._max = x
                else:
                    self._min = self._max = x
                self._count = count = count + 1
                self._sum += x
                self._last = x
                if count < self._max_samples:
                    return
                snapshot = self._take_window()
                self._state = _CAPPED
        if snapshot is None:
            self._add_not_open(x)
        else:
            self._on_cap(snapshot)

    def _add_not_open(self, x: float) -> None:
        """add() when the window is capped or deferred, the Stat closed, or a forked child's."""
        with self._lock:
            state = self._state
        if state == _DEFERRED:
            return self._add_object(x)
        if state == _CAPPED:
            return  # max_samples reached: discard until the window's end
        if state == _CLOSED:
            raise _closed_error(self.name)
        if state == _FORKED:
            self._revive()
            with self._lock:
                if self._state == _FORKED:
                    self._state = _OPEN
        self.add(x)

    @property
    def name(self) -> str:
        """The Stat's name: the prefix of its event keys."""
        return self._name

    @property
    def count(self) -> int:
        """Samples in the current window."""
        return self._count

    @property
    def closed(self) -> bool:
        """True once the Stat was closed."""
        return self._state == _CLOSED

    def _roll(self) -> _Snapshot | None:
        with self._lock:
            if self._state in (_CAPPED, _DEFERRED):
                self._state = _OPEN
            return self._take_window()

    def _defer(self) -> int:
        with self._lock:
            before = self._state
            if before in (_OPEN, _FORKED):
                self._state = _DEFERRED
            return before

    def _cap(self) -> _Snapshot | None:
        with self._lock:
            if self._state in (_OPEN, _DEFERRED):
                self._state = _CAPPED
            return self._take_window()

    def _close(self) -> _Snapshot | None:
        with self._lock:
            self._state = _CLOSED
            return self._take_window()

    def _reset_after_fork(self) -> None:
        self._lock = threading.RLock()  # the parent's lock may have been held by another thread
        self._clear()
        if self._state != _CLOSED:
            self._state = _FORKED


# ---------------------------------------------------------------------------------------------
# The one timer thread that ends every Stat's windows on time.
# ---------------------------------------------------------------------------------------------

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
        self._heap: list[tuple[int, int, int, weakref.ref[Stat]]] = []
        self._live: dict[int, weakref.ref[Stat]] = {}  # sequence number -> Stat, one per live Stat
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._exit_hook_registered = False
        self._manual = False  # a test's clock drives the windows (run_due), not the thread
        self._jobs: deque[Callable[[], None]] = deque()  # windows to log off the caller's thread

    def add(self, stat: Stat) -> None:
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

    def remove(self, stat: Stat) -> None:
        with self._cond:
            if self._live.pop(getattr(stat, "_timer_seq", -1), None) is None:
                return
            # Drop the removed entries now and then, so the heap stays O(live Stats).
            if len(self._heap) > 2 * len(self._live) + 64:
                self._heap = [entry for entry in self._heap if entry[1] in self._live]
                heapq.heapify(self._heap)

    def stats(self) -> list[Stat]:
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

    def _pop_due(self) -> Stat | None:
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

    def _next_due(self) -> Stat | None:
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
    def _end(stat: Stat) -> None:
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
_timer = _Timer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_timer.after_fork_in_child)


def end_windows() -> None:
    """End every live Stat's current window now, logging what it holds."""
    _timer.flush_all()


def use_clock(clock: Clock, *, manual: bool) -> Clock:
    """Read the wall clock from ``clock``; return the one used before (``tb_monitor.testing``)."""
    return _timer.use_clock(clock, manual)


def run_due() -> int:
    """End every window that is due by the clock, on the caller's thread (a manual clock's tick)."""
    return _timer.run_due()


# ---------------------------------------------------------------------------------------------
# The public Stat.
# ---------------------------------------------------------------------------------------------

_MIN_WINDOW = timedelta(milliseconds=1)


def _aggregation(stat: str, value: Any) -> Aggregation:
    if isinstance(value, Aggregation):
        return value
    # torch.monitor.Aggregation members are accepted by name, so ported code may mix imports.
    if (
        type(value).__name__ == "Aggregation"
        and type(value).__module__.startswith("torch")
        and getattr(value, "name", None) in Aggregation.__members__
    ):
        return Aggregation[value.name]
    raise ValueError(
        f"Stat {stat!r}: unknown aggregation {value!r}; expected members of "
        f"tb_monitor.Aggregation ({', '.join(Aggregation.__members__)})"
    )


def _check(
    name: Any, aggregations: Any, window_size: Any, max_samples: Any
) -> tuple[tuple[Aggregation, ...], int, int]:
    """Validated (aggregations, window in ns, max_samples), or an error naming the Stat."""
    if not isinstance(name, str):
        raise TypeError(f"Stat name must be a str, got {name!r}")
    if not name:
        raise ValueError("Stat name must not be empty")
    if isinstance(aggregations, (str, bytes)) or not isinstance(aggregations, Iterable):
        raise TypeError(
            f"Stat {name!r}: aggregations must be a list of Aggregation, got {aggregations!r}"
        )
    aggs = tuple(dict.fromkeys(_aggregation(name, agg) for agg in aggregations))
    if not aggs:
        raise ValueError(f"Stat {name!r}: aggregations must not be empty")
    if not isinstance(window_size, timedelta):
        raise TypeError(
            f"Stat {name!r}: window_size must be a datetime.timedelta, got {window_size!r}"
        )
    if window_size < _MIN_WINDOW:
        raise ValueError(f"Stat {name!r}: window_size must be at least 1 ms, got {window_size!r}")
    window_ns = window_size // timedelta(microseconds=1) * 1000
    if isinstance(max_samples, bool):
        raise TypeError(f"Stat {name!r}: max_samples must be an int, got {max_samples!r}")
    try:
        cap = operator.index(max_samples)
    except TypeError:
        raise TypeError(f"Stat {name!r}: max_samples must be an int, got {max_samples!r}") from None
    if cap < 1:
        raise ValueError(f"Stat {name!r}: max_samples must be >= 1, got {cap}")
    return aggs, window_ns, min(cap, sys.maxsize)


class _StatBody:
    """Everything a Stat is besides its accumulator (see ``Stat``, ``_stat_class``)."""

    __slots__ = ()

    if TYPE_CHECKING:  # provided by the accumulator base of the concrete class
        name: str
        count: int
        closed: bool
        _timer_seq: int

        def add(self, v: float) -> None: ...
        def _roll(self) -> _Snapshot | None: ...
        def _close(self) -> _Snapshot | None: ...
        def _reset_after_fork(self) -> None: ...

    def __init__(
        self,
        name: str,
        aggregations: Iterable[Aggregation],
        window_size: timedelta,
        max_samples: int = sys.maxsize,
    ) -> None:
        aggs, window_ns, cap = _check(name, aggregations, window_size, max_samples)
        super().__init__(name, cap)  # type: ignore[call-arg]  # the accumulator
        self._aggregations = aggs
        self._keys = tuple(stat_tag(name, agg.name) for agg in aggs)
        self._window_size = window_size
        self._max_samples = cap
        self._last_values = dict.fromkeys(aggs, 0.0)  # torch reports zeros before a window
        self._exited = False
        # A window's samples from its first tensor on, in order (tensors unread, floats).
        self._deferred: list[Any] = []
        self._deferred_lock = threading.Lock()
        self._window_ns = window_ns  # set last: marks the Stat as fully built (see __del__)
        _timer.add(self)

    @property
    def aggregations(self) -> list[Aggregation]:
        """The aggregations reported for each window, in event-key order."""
        return list(self._aggregations)

    @property
    def window_size(self) -> timedelta:
        """Length of a window; windows start at multiples of it on the wall clock."""
        return self._window_size

    @property
    def max_samples(self) -> int:
        """Samples after which a window is logged at once (``sys.maxsize``: no cap)."""
        return self._max_samples

    @property
    def count(self) -> int:
        """Samples in the current window (tensors not read back yet included)."""
        return super().count + len(self._deferred)  # type: ignore[misc]

    def get(self) -> dict[Aggregation, float]:
        """Values of the last logged window, one per aggregation (VALUE included)."""
        return dict(self._last_values)

    def close(self) -> None:
        """Log the pending samples now; later ``add`` calls raise RuntimeError. Idempotent.

        At process exit tb_monitor logs every Stat's pending samples itself; adds after that
        (from daemon threads, say) are discarded quietly, since nothing would record them.
        """
        if self.closed:
            return  # also spares __del__ at interpreter teardown, after the exit hook closed it
        with self._deferred_lock:
            snapshot = self._close()
            deferred, self._deferred = self._deferred, []
        _timer.remove(self)
        snapshot = _fold(snapshot, _tensors.resolve(deferred)) if deferred else snapshot
        if snapshot is not None:
            self._log(snapshot)

    def __enter__(self) -> Stat:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_window_ns", None) is not None:  # not when __init__ failed
            self.close()

    def __repr__(self) -> str:
        aggs = ", ".join(agg.name for agg in self._aggregations)
        state = " closed" if self.closed else ""
        return (
            f"<Stat {self.name!r} [{aggs}] window_size={self._window_size} "
            f"max_samples={self._max_samples}{state}>"
        )

    # -- called by the accumulator and the timer ----------------------------------------------

    def _exit(self) -> None:
        """Exit hook: log the pending window; from now on windows are discarded, not logged."""
        _timer.remove(self)
        self._end_window()
        self._exited = True

    def _end_window(self) -> None:
        with self._deferred_lock:
            snapshot = self._roll()
            deferred, self._deferred = self._deferred, []
        self._log_resolved(snapshot, deferred)

    def _log_resolved(self, snapshot: _Snapshot | None, deferred: list[Any]) -> None:
        """Log a window whose samples from ``deferred`` on are read back now (off-thread)."""
        if deferred:
            snapshot = _fold(snapshot, _tensors.resolve(deferred))
        if snapshot is not None:
            self._log(snapshot)

    def _add_object(self, value: Any) -> None:
        """``add`` of a tensor (kept unread until the window ends), of a value that is not a
        plain number, or of anything while the window is deferred; called by the accumulator."""
        if _tensors.is_tensor(value):
            value = _tensors.checked(value, f"Stat {self.name!r}")
        else:
            value = value if type(value) is float else _as_float(self.name, value)
            if not self._deferred:  # a plain window: the number takes the accumulator's path
                return self.add(value)
        with self._deferred_lock:
            state = self._defer()  # type: ignore[attr-defined]  # OPEN or FORKED: now DEFERRED
            if state == _CAPPED:
                return  # max_samples reached: discarded until the window's end
            if state == _CLOSED:
                raise _closed_error(self.name)
            self._deferred.append(value)
            full = super().count + len(self._deferred) >= self._max_samples  # type: ignore[misc]
            if full:
                snapshot = self._cap()  # type: ignore[attr-defined]
                deferred, self._deferred = self._deferred, []
        if state == _FORKED:
            self._revive()  # the first add in a forked child: restart the timer
        if full:  # logged from the timer thread: reading the tensors back may wait on a device
            _timer.submit(lambda: self._log_resolved(snapshot, deferred))

    def _on_cap(self, snapshot: _Snapshot) -> None:
        self._log(snapshot)

    def _revive(self) -> None:
        _timer.ensure_running()

    def _reset_after_fork(self) -> None:
        super()._reset_after_fork()  # type: ignore[misc]
        self._deferred = []  # the parent's samples; the parent logs them
        self._deferred_lock = threading.Lock()

    def _log(self, snapshot: _Snapshot) -> None:
        if self._exited:
            return
        count, total, low, high, last = snapshot
        by_aggregation = {
            Aggregation.VALUE: last,
            Aggregation.MEAN: total / count,
            Aggregation.COUNT: float(count),
            Aggregation.SUM: total,
            Aggregation.MAX: high,
            Aggregation.MIN: low,
        }
        values = {agg: by_aggregation[agg] for agg in self._aggregations}
        self._last_values = values
        log_event(
            Event(
                STAT_EVENT,
                datetime.fromtimestamp(_clock.time_ns() / 1e9),
                dict(zip(self._keys, values.values(), strict=True)),
            )
        )


_STAT_SLOTS = (
    "__weakref__",
    "_aggregations",
    "_deferred",
    "_deferred_lock",
    "_exited",
    "_keys",
    "_last_values",
    "_max_samples",
    "_timer_seq",
    "_window_ns",
    "_window_size",
)


def _c_accumulator() -> type | None:
    """The C accumulator, when it is built and sound on this interpreter."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None  # the C accumulator's atomicity relies on the GIL
    try:
        from tb_monitor._accumulator import Accumulator
    except ImportError:
        return None
    return Accumulator


C_ACCUMULATOR = _c_accumulator()
_PURE_PYTHON = os.environ.get("TB_MONITOR_PURE_PYTHON", "") not in ("", "0")
#: The accumulator ``Stat`` derives from: chosen once, at import.
_ACCUMULATOR: type = PyAccumulator if _PURE_PYTHON or C_ACCUMULATOR is None else C_ACCUMULATOR


class Stat(_StatBody, _ACCUMULATOR):  # type: ignore[misc,valid-type]
    """Summarizes samples over fixed wall-clock windows and logs each window as an event.

    Compatible with ``torch.monitor.Stat``: when a window ends, one event named
    ``torch.monitor.Stat`` is logged with the keys ``<name>.<aggregation lowercase>``
    (e.g. ``loss.mean``) and timestamp now. Windows are aligned to multiples of ``window_size``
    on the wall clock; a window without samples logs nothing. ``max_samples`` caps a window: the
    add that reaches it logs the window at once, and further adds are discarded until the
    window's wall-clock end. ``add(v)`` adds one sample, ``count`` is the number of samples in the
    current window, ``get()`` the values of the last logged window (zeros before the first, as in
    torch).

        >>> loss = Stat("loss", [Aggregation.MEAN, Aggregation.MAX], timedelta(seconds=60))
        >>> loss.add(0.25)

    Better than torch:
    - windows end on time even if no further ``add`` comes (torch logs a window only on the next
      add, so a hung loop goes silent): one timer thread ends the windows of all Stats;
    - ``VALUE`` (the last sample) is reported in events and ``get()``;
    - pending samples are logged on ``close()``, when leaving a ``with`` block, when the Stat is
      garbage-collected, and at interpreter exit (before TensorBoard writers close), where
      torch 2.13 crashes if a Python handler is registered.

    Precision: ``add`` reads no clock (that is what makes it cheap); the timer thread ends a
    window when it wakes at the boundary, so a sample added within the thread's wake-up latency
    after a boundary (well under a millisecond when idle, up to the interpreter's 5 ms thread
    switch interval when other threads keep the GIL busy) counts in the window that just ended.
    Boundaries follow the wall clock (torch uses the monotonic clock), so a clock step moves them.

    Values: int, float, bool and numpy scalars (anything with ``__float__`` or ``__index__``),
    and one-element torch tensors on any device, which are read back off the caller's thread
    when the window ends, so a GPU value costs no host sync (``tb_monitor._tensors``); other
    objects raise TypeError naming the Stat. NaN and inf are aggregated per IEEE 754: a NaN
    sample makes the window's sum, mean, min and max NaN (it is never hidden), inf behaves as
    infinity, and inf + -inf is NaN.

    Thread-safe: concurrent ``add`` calls lose no sample. After ``os.fork()`` the child drops
    the parent's pending samples (the parent logs them) and its timer starts on its first add.
    """

    __slots__ = _STAT_SLOTS


def stat_class(accumulator: type) -> type[Stat]:
    """``Stat`` on ``accumulator`` (``tb_monitor.testing`` covers the one ``Stat`` did not pick)."""
    if accumulator is _ACCUMULATOR:
        return Stat
    name = "PyStat" if accumulator is PyAccumulator else "CStat"

    class OtherStat(_StatBody, accumulator):  # type: ignore[misc,valid-type]
        __doc__ = Stat.__doc__
        __slots__ = _STAT_SLOTS

    OtherStat.__name__ = OtherStat.__qualname__ = name
    return OtherStat  # type: ignore[return-value]
