"""One handler per registry that hands each record to every sink, and its installation.

``Fanout(sinks).handlers()`` is what ``tb_monitor.init`` registers: one ``torch.monitor`` event
handler, one torchelastic metric handler, one events-destination ``logging.Handler``. Each record
is built once (a ``Window``, a ``TimelineRecord``) and given to the sinks in order. A sink that
raises is reported once, by name, and its drops counted; the others still get the record and
the code that logged it never sees the error.

A lone sink that brings its own handlers (``TensorboardSink.handlers``) is registered as they
are: the one-sink hot paths (``put_metric``, a Stat window) cost what they did before sinks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tb_monitor import _event, contract
from tb_monitor.elastic import events
from tb_monitor.elastic.metrics import api as metrics
from tb_monitor.elastic.metrics.api import MetricData, MetricHandler
from tb_monitor.sinks.base import Sink, TimelineHandler, TimelineRecord, Window
from tb_monitor.sinks.tensorboard import Handlers

__all__ = ["Fanout", "install"]

_log = logging.getLogger("tb_monitor")
Undo = Callable[[], None]


class Fanout:
    """The sinks of one monitor, and the handlers that reach them all."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)
        self._drops = [0] * len(self.sinks)
        self._lock = threading.Lock()
        self._windows = [sink.window for sink in self.sinks]
        self._metrics = [sink.metric for sink in self.sinks]
        self._events = [sink.event for sink in self.sinks]
        self._timelines = [sink.timeline for sink in self.sinks]

    def handlers(self) -> Handlers:
        """What to register: the lone sink's own handlers when it has them, else fan-outs."""
        if len(self.sinks) == 1 and isinstance(getattr(self.sinks[0], "handlers", None), Handlers):
            return self.sinks[0].handlers
        return Handlers(self.on_event, _MetricFanout(self), FanoutLoggingHandler(self))

    def drops(self, sink: object) -> int:
        """How many records ``sink`` failed on (0 for a sink that is not one of these)."""
        return sum(n for s, n in zip(self.sinks, self._drops, strict=True) if s is sink)

    def on_event(self, event: _event.Event) -> None:
        """A ``torch.monitor`` event: a Stat window to ``window``, any other to ``event``."""
        if event.name == contract.STAT_EVENT:
            self._deliver(self._windows, Window.from_event(event))
        else:
            self._deliver(self._events, event)

    def on_metric(self, metric: MetricData) -> None:
        self._deliver(self._metrics, metric)

    def on_timeline(self, record: TimelineRecord) -> None:
        self._deliver(self._timelines, record)

    def flush(self) -> None:
        """Flush every sink; one that fails is reported and the others still flush."""
        for index, sink in enumerate(self.sinks):
            try:
                sink.flush()
            except Exception:
                self._failed(index)

    def _deliver(self, methods: list[Callable[[Any], None]], record: Any) -> None:
        for index, method in enumerate(methods):
            try:
                method(record)
            except Exception:
                self._failed(index)

    def _failed(self, index: int) -> None:
        with self._lock:
            self._drops[index] += 1
            first = self._drops[index] == 1
        if first:
            _log.warning(
                "tb_monitor: sink %r raised; what it fails on is dropped (counted in "
                "Monitor.drops), the other sinks and training go on",
                self.sinks[index],
                exc_info=True,
            )


class _MetricFanout(MetricHandler):
    """The torchelastic metric handler of a ``Fanout``."""

    def __init__(self, fanout: Fanout) -> None:
        self._fanout = fanout

    def emit(self, metric_data: MetricData) -> None:
        self._fanout.on_metric(metric_data)


class FanoutLoggingHandler(TimelineHandler):
    """The events-destination handler of a ``Fanout``: parses each event once."""

    def __init__(self, fanout: Fanout) -> None:
        super().__init__()
        self._fanout = fanout

    def write(self, record: TimelineRecord) -> None:
        self._fanout.on_timeline(record)


def install(handlers: Handlers, destinations: Iterable[str]) -> Undo:
    """Register ``handlers`` with our registries; return the undo, which restores each registry
    as it was unless someone replaced ours since. (torch's own registries are the torch
    bridge's: ``Monitor`` installs it beside these when asked.)"""
    undos: list[Undo] = []
    try:
        handle = _event.register_event_handler(handlers.event)
        undos.append(lambda: _event.unregister_event_handler(handle))
        undos.append(_configure_metrics(handlers.metric))
        for name in destinations:
            undos.append(_register_destination(name, handlers.logging))
    except BaseException:
        _undo_all(undos)
        raise
    return lambda: _undo_all(undos)


def _undo_all(undos: list[Undo]) -> None:
    """Run every undo, latest first; raise the first error once all ran."""
    error: BaseException | None = None
    while undos:
        try:
            undos.pop()()
        except Exception as exc:
            if error is None:
                error = exc
            else:
                _log.exception("tb_monitor: undoing a registration failed")
    if error is not None:
        raise error


def _configure_metrics(handler: Any) -> Undo:
    previous = metrics.default_handler()
    metrics.configure(handler)

    def undo() -> None:
        if metrics.default_handler() is handler:  # not replaced since
            metrics.configure(previous)

    return undo


def _register_destination(name: str, handler: logging.Handler) -> Undo:
    try:
        previous: logging.Handler | None = events.get_logging_handler(name)
    except events.UnknownDestinationError:
        previous = None
    events.register_destination(name, handler)

    def undo() -> None:
        try:
            if events.get_logging_handler(name) is not handler:
                return  # replaced (or removed) since: not ours to undo
        except events.UnknownDestinationError:
            return
        if previous is None:
            events.unregister_destination(name)
        else:
            events.register_destination(name, previous)

    return undo
