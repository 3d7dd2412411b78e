"""tb-monitor: PyTorch's telemetry APIs, written to TensorBoard off the training thread.

The top level is the ``torch.monitor``-compatible surface (``Aggregation``, ``Stat``, ``Event``,
``log_event``, ``register_event_handler``, ...) plus ``init(logdir)``, which wires every API to
TensorBoard and to any other ``Sink`` given, and the notebook readers ``read_scalars`` /
``read_events``.

    >>> import tb_monitor
    >>> with tb_monitor.init("runs/exp1"):
    ...     loss = tb_monitor.Stat("loss", [tb_monitor.Aggregation.MEAN], timedelta(seconds=10))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "COUNT",
    "MAX",
    "MEAN",
    "MIN",
    "STAT_EVENT",
    "SUM",
    "Sink",
    "VALUE",
    "Aggregation",
    "Event",
    "EventHandlerHandle",
    "Stat",
    "SummaryWriter",
    "TensorboardEventHandler",
    "data_value_t",
    "init",
    "log_event",
    "read_events",
    "read_scalars",
    "register_event_handler",
    "step",
    "unregister_event_handler",
    "_WaitCounter",
    "_WaitCounterTracker",
]

# Names resolve on first use, so `import tb_monitor` stays cheap (no TensorBoard protos, no
# pandas) for code that only needs Stats and events.
_LAZY = {
    "Aggregation": "tb_monitor._stat",
    "Stat": "tb_monitor._stat",
    "Event": "tb_monitor._event",
    "EventHandlerHandle": "tb_monitor._event",
    "data_value_t": "tb_monitor._event",
    "log_event": "tb_monitor._event",
    "register_event_handler": "tb_monitor._event",
    "unregister_event_handler": "tb_monitor._event",
    "TensorboardEventHandler": "tb_monitor.sinks",
    "Sink": "tb_monitor.sinks.base",
    "SummaryWriter": "tb_monitor.summary",
    "STAT_EVENT": "tb_monitor.contract",
    "step": "tb_monitor.rank.health",
    "_WaitCounter": "tb_monitor._wait_counter",
    "_WaitCounterTracker": "tb_monitor._wait_counter",
    "init": "tb_monitor.monitor",
    "read_scalars": "tb_monitor.logdir.readers",
    "read_events": "tb_monitor.logdir.readers",
}

if TYPE_CHECKING:
    from tb_monitor._event import (
        Event,
        EventHandlerHandle,
        data_value_t,
        log_event,
        register_event_handler,
        unregister_event_handler,
    )
    from tb_monitor._stat import Aggregation, Stat
    from tb_monitor._wait_counter import _WaitCounter, _WaitCounterTracker
    from tb_monitor.contract import STAT_EVENT
    from tb_monitor.logdir.readers import read_events, read_scalars
    from tb_monitor.monitor import init
    from tb_monitor.rank.health import step
    from tb_monitor.sinks import TensorboardEventHandler
    from tb_monitor.sinks.base import Sink
    from tb_monitor.summary import SummaryWriter


#: torch.monitor exports the aggregations at module level too.
_AGGREGATION_NAMES = ("VALUE", "MEAN", "COUNT", "SUM", "MAX", "MIN")


def __getattr__(name: str) -> Any:
    if name in _AGGREGATION_NAMES:
        value = getattr(importlib.import_module("tb_monitor._stat").Aggregation, name)
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tb_monitor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
