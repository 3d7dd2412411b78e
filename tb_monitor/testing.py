"""Helpers for tests: capture what the APIs record, drive Stat windows by hand, synthetic jobs.

- ``capture()``: everything the tb_monitor APIs record inside a ``with`` block, read back as
  TensorBoard would see it (scalars, timeline events, texts), in the spirit of structlog's
  ``capture_logs`` and OpenTelemetry's ``InMemoryMetricReader``.
- ``MemorySink``: a sink for ``init(sinks=[...])`` that keeps the records it receives as they
  are (windows, metrics, events, timeline records), before any writer touches them.
- ``manual_clock()``: a wall clock that moves only when told, so Stat windows end on
  ``clock.advance(...)`` deterministically, with no sleeping.
- ``generate_job(...)``, ``generate_rank_windows(...)``: synthetic logdirs of a torchelastic job
  and of its ranks' health, from ``tb_monitor.synthetic`` (re-exported here).

    >>> with capture() as captured:
    ...     put_metric("loss", 1, "train")
    >>> captured.scalars()[0].tag
    'train/loss'
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tb_monitor import _stat
from tb_monitor.logdir import readers
from tb_monitor.sinks.memory import MemorySink
from tb_monitor.synthetic import (
    DEFAULT_START,
    SyntheticJob,
    generate_job,
    generate_rank_windows,
    rank_heartbeat_scalars,
    rank_window_scalars,
)

__all__ = [
    "DEFAULT_START",
    "Captured",
    "ManualClock",
    "MemorySink",
    "SyntheticJob",
    "capture",
    "generate_job",
    "generate_rank_windows",
    "rank_heartbeat_scalars",
    "rank_window_scalars",
    "manual_clock",
    "stat_implementations",
]


# ---------------------------------------------------------------------------------------------
# Capturing what the APIs record
# ---------------------------------------------------------------------------------------------


class Captured:
    """What the APIs recorded inside ``capture()``: live during the block, frozen after it."""

    def __init__(self, monitor: Any) -> None:
        self._monitor = monitor
        self._frozen: tuple[list[readers.Scalar], list[dict[str, Any]], list[tuple]] | None = None

    def _read(self) -> tuple[list[readers.Scalar], list[dict[str, Any]], list[tuple]]:
        if self._frozen is not None:
            return self._frozen
        self._monitor.flush()
        logdir = self._monitor.logdir
        texts = [
            (run, value.tag, event.step, value.tensor.string_val[0].decode())
            for run, event in readers.iter_events(logdir)
            for value in event.summary.value
            if value.metadata.plugin_data.plugin_name == "text"
        ]
        events = list(readers.iter_timeline_rows(logdir))
        return list(readers.iter_scalars(logdir)), events, texts

    def scalars(self, tag: str | None = None) -> list[readers.Scalar]:
        """Every scalar point (of ``tag`` only, if given), in the order written."""
        points = self._read()[0]
        return [p for p in points if tag is None or p.tag == tag]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every timeline event (of ``kind`` only, if given) as ``read_events`` rows."""
        rows = self._read()[1]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def texts(self) -> list[tuple[str, str, int, str]]:
        """Every text-dashboard entry as ``(run, tag, step, markdown)``."""
        return self._read()[2]

    def _freeze(self) -> None:
        self._frozen = self._read()


@contextmanager
def capture(*, torch: bool = False) -> Iterator[Captured]:
    """Wire every API to a private logdir for the block, and read back what landed there.

    The real writer, sinks and readers run: what ``capture`` shows is what TensorBoard would.
    ``torch=True`` captures the real torch APIs too (as ``init(..., torch=True)``).
    """
    from tb_monitor.monitor import init

    with tempfile.TemporaryDirectory(prefix="tb_monitor-capture-") as logdir:
        monitor = init(logdir, torch=torch)
        captured = Captured(monitor)
        try:
            yield captured
        finally:
            monitor.close()
            captured._freeze()


# ---------------------------------------------------------------------------------------------
# A clock for Stat windows
# ---------------------------------------------------------------------------------------------

_CLOCK_START = 1740999600.0  # 2025-03-03 11:00:00 UTC: a multiple of every window up to an hour


class ManualClock:
    """A wall clock that moves only on ``advance``; Stat windows due by then end at once."""

    def __init__(self, start: float) -> None:
        self._ns = round(start * 1e9)

    def time_ns(self) -> int:
        """The clock's time in nanoseconds since the epoch."""
        return self._ns

    def time(self) -> float:
        """The clock's time in seconds since the epoch."""
        return self._ns / 1e9

    def advance(self, seconds: float) -> int:
        """Move forward and end every Stat window now due, on this thread; how many ended."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, got {seconds!r} seconds")
        self._ns += round(seconds * 1e9)
        return _stat.run_due()


@contextmanager
def manual_clock(start: float | None = None) -> Iterator[ManualClock]:
    """Stat windows follow a ``ManualClock`` inside the block (default start: a window-aligned
    whole hour), and the real clock again after it."""
    clock = ManualClock(_CLOCK_START if start is None else start)
    previous = _stat.use_clock(clock, manual=True)
    try:
        yield clock
    finally:
        _stat.use_clock(previous, manual=False)


def stat_implementations() -> dict[str, type[_stat.Stat] | None]:
    """``Stat`` on each accumulator, ``{"python": ..., "c": ...}`` (``"c"`` None where the C
    one is not built), for testing and benchmarking both."""
    return {
        "python": _stat.stat_class(_stat.PyAccumulator),
        "c": None if _stat.C_ACCUMULATOR is None else _stat.stat_class(_stat.C_ACCUMULATOR),
    }
