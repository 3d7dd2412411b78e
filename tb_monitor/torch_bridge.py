"""Our sinks installed into the real PyTorch telemetry APIs: torch.monitor, torchelastic metrics, events.

torch keeps its registries as module globals without getters or an undo, so each function here
installs one thing and returns a callable that puts back exactly what was there before.
``install`` does all three for one set of handlers: the fan-out to a monitor's sinks
(``tb_monitor.sinks.fanout``), which is what ``tb-monitor run`` (inside the agent) and
``tb_monitor.init(logdir, torch=True)`` install.

In a forked child (a DataLoader worker with the fork start method) the first window each
``torch.monitor.Stat`` logs is dropped: torch's C++ Stat cannot be reset, and once it has had a
sample its open window is never empty, so that window holds the parent's samples, which the
parent logs too. The child's own samples are logged from its next window on (the price: a Stat
made in the child loses its first window as well).

Imported only when asked: it imports torch.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch.monitor
from torch.distributed.elastic import events as torch_events
from torch.distributed.elastic.events import handlers as torch_event_handlers
from torch.distributed.elastic.metrics import api as torch_metrics

from tb_monitor import _shutdown, contract
from tb_monitor._event import Event
from tb_monitor._guard import reraise_theirs

__all__ = [
    "DEFAULT_DESTINATIONS",
    "TorchBridge",
    "capture_events",
    "configure_metrics",
    "install",
    "register_monitor_handler",
]

#: torchelastic destinations captured by default: the agent's worker events and the rendezvous'.
DEFAULT_DESTINATIONS = ("tensorboard", "dynamic_rendezvous")

_log = logging.getLogger("tb_monitor")
Undo = Callable[[], None]


def capture_events(handler: logging.Handler, destination: str) -> Undo:
    """Send every torchelastic event recorded to ``destination`` through ``handler`` as well.

    A destination torch does not know yet is registered with ``handler``; one whose handler is a
    ``NullHandler`` (``null``, ``dynamic_rendezvous``) gets ``handler`` instead, which is also what
    makes torch's rendezvous build its events at all; any other destination (``console``, a user's)
    keeps its handler and ``handler`` is added next to it. torch sets each event logger's level
    from ``LOGLEVEL`` and records at INFO, so ``LOGLEVEL=WARNING`` would drop every event: the
    logger is lowered to INFO and the level the user asked for moves onto the handlers that were
    already there, which therefore see exactly what they saw before.
    """
    registry = torch_event_handlers._log_handlers  # torch's registry has no public setter
    loggers = torch_events._events_loggers  # torch caches one logger per destination
    previous, had_logger = registry.get(destination), destination in loggers
    replaces = previous is None or isinstance(previous, logging.NullHandler)
    if replaces:
        registry[destination] = handler

    logger = torch_events._get_or_create_logger(destination)
    saved_level = logger.level
    saved = [(h, h.level) for h in logger.handlers if h is not handler]
    for existing, _ in saved:
        if isinstance(existing, logging.NullHandler):
            logger.removeHandler(existing)
        else:
            existing.setLevel(max(existing.level, logger.getEffectiveLevel()))
    if handler not in logger.handlers:
        logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)
        for existing, level in saved:
            existing.setLevel(level)
            logger.addHandler(existing)  # no-op when still attached
        if not had_logger and loggers.get(destination) is logger:
            del loggers[destination]
        if replaces and registry.get(destination) is handler:
            if previous is None:
                del registry[destination]
            else:
                registry[destination] = previous

    return undo


def configure_metrics(handler: Any, group: str | None = None) -> Undo:
    """``torch.distributed.elastic.metrics.configure(handler, group)``, undoable.

    ``group=None`` makes ``handler`` the default for every group without a handler of its own,
    which is how torchelastic's own ``torchelastic`` metrics reach it.
    """
    if group is None:
        previous = torch_metrics._default_metrics_handler
    else:
        previous = torch_metrics._metrics_map.get(group)
    torch_metrics.configure(handler, group)

    def undo() -> None:
        if group is None:
            if torch_metrics._default_metrics_handler is handler:  # not replaced since
                torch_metrics.configure(previous)
        elif torch_metrics._metrics_map.get(group) is not handler:
            return  # replaced or removed since: not ours to undo
        elif previous is None:
            torch_metrics._metrics_map.pop(group, None)
        else:
            torch_metrics.configure(previous, group)

    return undo


class _InheritedWindows:
    """Which ``torch.monitor.Stat`` windows a forked child drops: each Stat's first (see the
    module docstring). A Stat is known by its event's keys (``<name>.<aggregation>``)."""

    def __init__(self) -> None:
        self._seen: set[frozenset[str]] | None = None  # None: not a forked child
        self._lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        self._seen = set()
        self._lock = threading.Lock()

    def inherited(self, name: str, data: dict[str, Any]) -> bool:
        """Whether the event is a Stat window the child's copy of torch's Stat inherited."""
        seen = self._seen
        if seen is None or name != contract.STAT_EVENT:
            return False
        keys = frozenset(data)
        with self._lock:
            if keys in seen:
                return False
            seen.add(keys)
        _log.debug("tb_monitor: dropped the first window of %s in a forked child", sorted(keys))
        return True


_inherited = _InheritedWindows()
os.register_at_fork(after_in_child=_inherited.after_fork_in_child)


def register_monitor_handler(handler: Callable[[Event], Any]) -> Undo:
    """Register ``handler`` with ``torch.monitor``, handing it our ``Event`` for each torch event.

    torch crashes the process at exit (SIGSEGV) when a Python handler is still registered as its
    Stats log their last window, so the handler is unregistered when the process ends (before our
    writers close) as well as by the returned undo. A handler that raises is logged once and never
    reaches the code that logged the event.
    """
    reported = threading.Event()

    def on_torch_event(event: torch.monitor.Event) -> None:
        try:
            data = event.data
            if _inherited.inherited(event.name, data):
                return
            handler(Event(event.name, event.timestamp, data))
        except Exception as exc:
            reraise_theirs(exc)
            if not reported.is_set():
                reported.set()
                _log.exception("tb_monitor handler %r failed on a torch.monitor event", handler)

    handle = torch.monitor.register_event_handler(on_torch_event)
    lock = threading.Lock()
    registered = [True]

    def undo() -> None:
        with lock:
            if not registered[0]:
                return
            registered[0] = False
        _shutdown.cancel(undo)
        torch.monitor.unregister_event_handler(handle)

    _shutdown.at_exit(undo, _shutdown.PRODUCERS)
    return undo


class TorchBridge:
    """Everything ``install`` put into torch's registries; ``close()`` takes it all back out."""

    def __init__(self, undos: Iterable[Undo]) -> None:
        self._undos = list(undos)

    def close(self) -> None:
        """Restore torch's registries as they were, most recent installation first."""
        undos, self._undos = self._undos, []
        for undo in reversed(undos):
            undo()

    def __enter__(self) -> TorchBridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def install(
    *,
    logging_handler: logging.Handler | None = None,
    metric_handler: Any = None,
    monitor_handler: Callable[[Event], Any] | None = None,
    destinations: Iterable[str] = DEFAULT_DESTINATIONS,
) -> TorchBridge:
    """Install our handlers into torch: events destinations, the default metric handler,
    torch.monitor.

    Each handler given is installed; one left as None is not (the agent has no torch.monitor
    Stats to capture, for instance).
    """
    undos: list[Undo] = []
    try:
        if logging_handler is not None:
            for destination in dict.fromkeys(destinations):
                undos.append(capture_events(logging_handler, destination))
        if metric_handler is not None:
            undos.append(configure_metrics(metric_handler))
        if monitor_handler is not None:
            undos.append(register_monitor_handler(monitor_handler))
    except BaseException:
        TorchBridge(undos).close()
        raise
    return TorchBridge(undos)
