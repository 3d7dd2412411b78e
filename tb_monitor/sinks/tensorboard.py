"""``TensorboardSink``: the ``Sink`` that writes every record to a TensorBoard run.

It is the three TensorBoard handlers (``sinks.handlers``) on one writer, behind the ``Sink``
methods. ``tb_monitor.init`` registers those handlers themselves when this is its only sink, so
a Stat window or a ``put_metric`` costs what it did before sinks existed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

from tb_monitor.sinks.base import TimelineRecord, Window
from tb_monitor.sinks.handlers import (
    TensorboardEventHandler,
    TensorboardLoggingHandler,
    TensorboardMetricHandler,
)
from tb_monitor.sinks.writer import AsyncWriter

if TYPE_CHECKING:
    from tb_monitor._event import Event
    from tb_monitor.elastic.metrics.api import MetricData

__all__ = ["Handlers", "TensorboardSink"]


class Handlers(NamedTuple):
    """One handler per registry: ``torch.monitor`` events, torchelastic metrics, and events
    destinations (a ``logging.Handler``)."""

    event: Any
    metric: Any
    logging: Any


class TensorboardSink:
    """Writes windows, metrics, events and timeline records to one TensorBoard run.

    ``target`` is an ``AsyncWriter``, a tensorboardX or ``torch.utils.tensorboard``
    ``SummaryWriter``, or a run directory: the sink then opens an ``AsyncWriter`` there with
    ``writer_settings`` (``flush_secs``, ``max_queue``, ``when_full``) and closes it with itself.
    """

    def __init__(self, target: Any, **writer_settings: Any) -> None:
        self._owns = isinstance(target, (str, os.PathLike))
        writer = AsyncWriter(target, **writer_settings) if self._owns else target
        self.handlers = Handlers(
            TensorboardEventHandler(writer),
            TensorboardMetricHandler(writer),
            TensorboardLoggingHandler(writer),
        )
        self._writer = self.handlers.event.writer  # a SummaryWriter's comes adapted

    @property
    def writer(self) -> Any:
        """The writer every record goes to."""
        return self._writer

    def window(self, window: Window) -> None:
        self.handlers.event.write_window(window)

    def metric(self, metric: MetricData) -> None:
        self.handlers.metric.emit(metric)

    def event(self, event: Event) -> None:
        self.handlers.event(event)

    def timeline(self, record: TimelineRecord) -> None:
        self.handlers.logging.write(record)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        """Detach the logging handler; close the writer if this sink opened it."""
        self.handlers.logging.close()
        if self._owns:
            self._writer.close()

    def __repr__(self) -> str:
        return f"<TensorboardSink run_dir={self._writer.run_dir!r}>"
