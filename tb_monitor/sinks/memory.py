"""``MemorySink``: a ``Sink`` that keeps every record it receives, in order, for tests.

>>> sink = MemorySink()
>>> with tb_monitor.init(sinks=[sink], tensorboard=False):
...     put_metric("loss", 1, "train")
>>> sink.metrics[0].name
'loss'
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tb_monitor.sinks.base import TimelineRecord, Window

if TYPE_CHECKING:
    from tb_monitor._event import Event
    from tb_monitor.elastic.metrics.api import MetricData

__all__ = ["MemorySink"]


class MemorySink:
    """Keeps windows, metrics, events and timeline records in lists (thread-safe appends),
    and counts ``flush()`` and ``close()`` calls."""

    def __init__(self) -> None:
        self.windows: list[Window] = []
        self.metrics: list[MetricData] = []
        self.events: list[Event] = []
        self.timeline_records: list[TimelineRecord] = []
        self.flushes = 0
        self.closes = 0
        self._lock = threading.Lock()

    def window(self, window: Window) -> None:
        self._keep(self.windows, window)

    def metric(self, metric: MetricData) -> None:
        self._keep(self.metrics, metric)

    def event(self, event: Event) -> None:
        self._keep(self.events, event)

    def timeline(self, record: TimelineRecord) -> None:
        self._keep(self.timeline_records, record)

    def _keep(self, records: list[Any], record: Any) -> None:
        with self._lock:
            records.append(record)

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.closes += 1

    def scalars(self) -> dict[str, list[float]]:
        """Every window's values by tag (``"<stat>.<aggregation>"``), in order."""
        out: dict[str, list[float]] = {}
        for window in list(self.windows):
            for tag, value in window.data.items():
                out.setdefault(tag, []).append(value)
        return out
