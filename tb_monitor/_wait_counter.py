"""``_WaitCounter``: torch.monitor's named duration counter, visible in TensorBoard.

    >>> with tb_monitor._WaitCounter("checkpoint.save").guard():
    ...     save()

torch.monitor's ``_WaitCounter(key).guard()`` tracks units of work under a name and hands them to
a backend (none in open-source builds). Here every key has one ``Stat`` named ``wait/<key>``
(seconds per unit of work; COUNT, MEAN, MAX and SUM over 60-s windows), so with
``tb_monitor.init`` the waits become the scalars ``wait/<key>.count``, ``.mean``, ``.max`` and
``.sum``: one TensorBoard section, ``wait``, for every counter of the job.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from tb_monitor._stat import Aggregation, Stat

__all__ = ["WINDOW", "_WaitCounter", "_WaitCounterTracker"]

#: The window of every wait counter's Stat.
WINDOW = timedelta(seconds=60)
_AGGREGATIONS = [Aggregation.COUNT, Aggregation.MEAN, Aggregation.MAX, Aggregation.SUM]
_stats: dict[str, Stat] = {}
_lock = threading.Lock()


def _stat(key: str) -> Stat:
    stat = _stats.get(key)
    if stat is None or stat.closed:
        with _lock:
            stat = _stats.get(key)
            if stat is None or stat.closed:
                stat = _stats[key] = Stat(f"wait/{key}", _AGGREGATIONS, WINDOW)
    return stat


class _WaitCounterTracker:
    """One unit of work of a ``_WaitCounter``: a context manager timing what it encloses."""

    __slots__ = ("_start", "_stat")

    def __init__(self, stat: Stat) -> None:
        self._stat = stat
        self._start: float | None = None

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        if self._start is not None:
            self._stat.add(time.perf_counter() - self._start)
            self._start = None


class _WaitCounter:
    """A named duration counter, as ``torch.monitor._WaitCounter``: ``guard()`` times one unit."""

    __slots__ = ("_key",)

    def __init__(self, key: str) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError(f"_WaitCounter key must be a non-empty str, got {key!r}")
        self._key = key

    def guard(self) -> _WaitCounterTracker:
        """A context manager tracking one unit of work under this counter's key."""
        return _WaitCounterTracker(_stat(self._key))

    def __repr__(self) -> str:
        return f"_WaitCounter({self._key!r})"
