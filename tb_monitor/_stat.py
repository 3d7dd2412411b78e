"""``Stat``: windowed aggregation of samples, logged as ``torch.monitor.Stat`` events.

The hot path is ``Stat.add``: it only folds the sample into the current window (count, sum, min,
max, last) and never reads a clock. Three modules, one job each:

- here, the API: ``Aggregation``, ``Stat``, ``StatSource`` (samples fed in at a window's end);
- ``_accumulators``: the accumulator ``Stat`` derives from, the C type (``_accumulator.c``) or
  its pure-Python twin ``PyAccumulator``, chosen once at import, so ``Stat`` can be subclassed;
- ``_stat_timer``: the one timer thread that ends every Stat's windows on wall-clock boundaries.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from tb_monitor import _tensors
from tb_monitor._accumulators import (
    ACCUMULATOR,
    C_ACCUMULATOR,
    CAPPED,
    CLOSED,
    FORKED,
    PyAccumulator,
    Snapshot,
    as_float,
    closed_error,
    fold,
)
from tb_monitor._event import Event, log_event
from tb_monitor._stat_timer import end_windows, now_ns, run_due, timer, use_clock
from tb_monitor.contract import STAT_EVENT, stat_tag

__all__ = [
    "C_ACCUMULATOR",
    "Aggregation",
    "PyAccumulator",
    "Stat",
    "StatSource",
    "end_windows",
    "run_due",
    "stat_class",
    "use_clock",
]


class Aggregation(Enum):
    """How a Stat summarizes the samples of one window (values as in torch's C++ enum)."""

    VALUE = 1  #: the last sample
    MEAN = 2
    COUNT = 3
    SUM = 4
    MAX = 5
    MIN = 6


class StatSource(NamedTuple):
    """Samples of a Stat that wait elsewhere until its window ends (``Stat(..., source=)``).

    ``feed()`` adds them with ``Stat.add`` just before each window is taken (on the timer
    thread), at a flush, at exit and on close; ``forget()`` drops the parent's in a forked
    child, as the Stat forgets its window.
    """

    feed: Callable[[], None]
    forget: Callable[[], None]


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
        def _roll(self) -> Snapshot | None: ...
        def _close(self) -> Snapshot | None: ...
        def _reset_after_fork(self) -> None: ...

    def __init__(
        self,
        name: str,
        aggregations: Iterable[Aggregation],
        window_size: timedelta,
        max_samples: int = sys.maxsize,
        *,
        source: StatSource | None = None,
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
        self._source = source  # before the timer knows the Stat: it may end a window at once
        self._window_ns = window_ns  # set last: marks the Stat as fully built (see __del__)
        timer.add(self)

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
        if self._source is not None:
            self._source.feed()
        with self._deferred_lock:
            snapshot = self._close()
            deferred, self._deferred = self._deferred, []
        timer.remove(self)
        snapshot = fold(snapshot, _tensors.resolve(deferred)) if deferred else snapshot
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
        timer.remove(self)
        self._end_window()
        self._exited = True

    def _end_window(self) -> None:
        if self._source is not None:
            self._source.feed()
        with self._deferred_lock:
            snapshot = self._roll()
            deferred, self._deferred = self._deferred, []
        self._log_resolved(snapshot, deferred)

    def _log_resolved(self, snapshot: Snapshot | None, deferred: list[Any]) -> None:
        """Log a window whose samples from ``deferred`` on are read back now (off-thread)."""
        if deferred:
            snapshot = fold(snapshot, _tensors.resolve(deferred))
        if snapshot is not None:
            self._log(snapshot)

    def _add_object(self, value: Any) -> None:
        """``add`` of a tensor (kept unread until the window ends), of a value that is not a
        plain number, or of anything while the window is deferred; called by the accumulator."""
        if _tensors.is_tensor(value):
            value = _tensors.checked(value, f"Stat {self.name!r}")
        else:
            value = value if type(value) is float else as_float(self.name, value)
            if not self._deferred:  # a plain window: the number takes the accumulator's path
                return self.add(value)
        with self._deferred_lock:
            state = self._defer()  # type: ignore[attr-defined]  # OPEN or FORKED: now DEFERRED
            if state == CAPPED:
                return  # max_samples reached: discarded until the window's end
            if state == CLOSED:
                raise closed_error(self.name)
            self._deferred.append(value)
            full = super().count + len(self._deferred) >= self._max_samples  # type: ignore[misc]
            if full:
                snapshot = self._cap()  # type: ignore[attr-defined]
                deferred, self._deferred = self._deferred, []
        if state == FORKED:
            self._revive()  # the first add in a forked child: restart the timer
        if full:  # logged from the timer thread: reading the tensors back may wait on a device
            timer.submit(lambda: self._log_resolved(snapshot, deferred))

    def _on_cap(self, snapshot: Snapshot) -> None:
        self._log(snapshot)

    def _revive(self) -> None:
        timer.ensure_running()

    def _reset_after_fork(self) -> None:
        if self._source is not None:
            self._source.forget()
        super()._reset_after_fork()  # type: ignore[misc]
        self._deferred = []  # the parent's samples; the parent logs them
        self._deferred_lock = threading.Lock()

    def _log(self, snapshot: Snapshot) -> None:
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
                datetime.fromtimestamp(now_ns() / 1e9),
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
    "_source",
    "_timer_seq",
    "_window_ns",
    "_window_size",
)


class Stat(_StatBody, ACCUMULATOR):  # type: ignore[misc,valid-type]
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

    ``source`` (keyword): a ``StatSource`` whose samples wait elsewhere until the window ends
    (step times queued by a hook, say), so their producer pays only for queueing them.

    Thread-safe: concurrent ``add`` calls lose no sample. After ``os.fork()`` the child drops
    the parent's pending samples (the parent logs them) and its timer starts on its first add.
    """

    __slots__ = _STAT_SLOTS


def stat_class(accumulator: type) -> type[Stat]:
    """``Stat`` on ``accumulator`` (``tb_monitor.testing`` covers the one ``Stat`` did not pick)."""
    if accumulator is ACCUMULATOR:
        return Stat
    name = "PyStat" if accumulator is PyAccumulator else "CStat"

    class OtherStat(_StatBody, accumulator):  # type: ignore[misc,valid-type]
        __doc__ = Stat.__doc__
        __slots__ = _STAT_SLOTS

    OtherStat.__name__ = OtherStat.__qualname__ = name
    return OtherStat  # type: ignore[return-value]
