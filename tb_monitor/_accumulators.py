"""The accumulator behind ``Stat.add``: the C type (``_accumulator.c``) or its pure-Python twin.

An accumulator holds one Stat's current window (count, sum, min, max, last) and folds samples
into it; ``Stat`` derives from the one chosen here, once, at import (``ACCUMULATOR``): the C one
when it is built and sound on this interpreter, else ``PyAccumulator``, which behaves the same
(``TB_MONITOR_PURE_PYTHON=1`` forces it). Both call three hooks of the Stat built on them:
``_on_cap`` (a window reached max_samples), ``_revive`` (the first add in a forked child) and
``_add_object`` (a value that is not a plain number, or any add of a deferred window).
"""

from __future__ import annotations

import operator
import sysconfig
import threading
from typing import Any

from tb_monitor import _env

__all__ = [
    "ACCUMULATOR",
    "CAPPED",
    "CLOSED",
    "C_ACCUMULATOR",
    "DEFERRED",
    "FORKED",
    "OPEN",
    "PyAccumulator",
    "Snapshot",
    "as_float",
    "closed_error",
    "fold",
]

#: A snapshot of one ended window: (count, sum, min, max, last).
Snapshot = tuple[int, float, float, float, float]

#: A window's states, as ``_accumulator.c`` numbers them.
OPEN, CAPPED, CLOSED, FORKED, DEFERRED = range(5)


def as_float(name: str, value: Any) -> float:
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


def fold(snapshot: Snapshot | None, values: list[float]) -> Snapshot | None:
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


def closed_error(name: str) -> RuntimeError:
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
        self._state = OPEN
        self._clear()

    def _clear(self) -> None:
        self._count = 0
        self._sum = self._min = self._max = self._last = 0.0

    def _take_window(self) -> Snapshot | None:
        if not self._count:
            return None
        snapshot = (self._count, self._sum, self._min, self._max, self._last)
        self._clear()
        return snapshot

    def add(self, value: Any) -> None:
        kind = type(value)
        if self._state == DEFERRED or (
            kind is not float and kind is not int and not isinstance(value, (float, int))
        ):
            return self._add_object(value)  # see the C accumulator: tensors stay unread
        x = value if kind is float else as_float(self.name, value)
        with self._lock:
            if self._state != OPEN:
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
                self._state = CAPPED
        if snapshot is None:
            self._add_not_open(x)
        else:
            self._on_cap(snapshot)

    def _add_not_open(self, x: float) -> None:
        """add() when the window is capped or deferred, the Stat closed, or a forked child's."""
        with self._lock:
            state = self._state
        if state == DEFERRED:
            return self._add_object(x)
        if state == CAPPED:
            return  # max_samples reached: discard until the window's end
        if state == CLOSED:
            raise closed_error(self.name)
        if state == FORKED:
            self._revive()
            with self._lock:
                if self._state == FORKED:
                    self._state = OPEN
        self.add(x)

    name = property(lambda self: self._name, doc="The Stat's name: the prefix of its event keys.")
    count = property(lambda self: self._count, doc="Samples in the current window.")
    closed = property(lambda self: self._state == CLOSED, doc="True once the Stat was closed.")

    def _roll(self) -> Snapshot | None:
        with self._lock:
            if self._state in (CAPPED, DEFERRED):
                self._state = OPEN
            return self._take_window()

    def _defer(self) -> int:
        with self._lock:
            before = self._state
            if before in (OPEN, FORKED):
                self._state = DEFERRED
            return before

    def _cap(self) -> Snapshot | None:
        with self._lock:
            if self._state in (OPEN, DEFERRED):
                self._state = CAPPED
            return self._take_window()

    def _close(self) -> Snapshot | None:
        with self._lock:
            self._state = CLOSED
            return self._take_window()

    def _reset_after_fork(self) -> None:
        self._lock = threading.RLock()  # the parent's lock may have been held by another thread
        self._clear()
        if self._state != CLOSED:
            self._state = FORKED


def _c_accumulator() -> type | None:
    """The C accumulator, when it is built and sound on this interpreter."""
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None  # the C accumulator's atomicity relies on the GIL
    try:
        from tb_monitor._accumulator import Accumulator
    except ImportError:
        return None
    return Accumulator


#: The C accumulator (``_accumulator.c``), or None where it is not built or not sound.
C_ACCUMULATOR = _c_accumulator()
#: The accumulator ``Stat`` derives from: chosen once, at import.
ACCUMULATOR: type = PyAccumulator if _env.pure_python() or C_ACCUMULATOR is None else C_ACCUMULATOR
