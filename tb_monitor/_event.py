"""Events and the handler registry: the ``torch.monitor`` event API.

An ``Event`` is a name, a timestamp and a flat mapping of values. ``log_event`` hands it to every
registered handler, in registration order, on the caller's thread. Handlers are plain callables.

Where we differ from ``torch.monitor`` (on purpose):
- a handler that raises is isolated: the other handlers still run, the caller never sees the
  error, it is logged once per handler (``logging.getLogger("tb_monitor")``) and counted
  (``EventHandlerHandle.errors``); torch hands it to the caller and skips the handlers after it.
  Telemetry must not break training: ``put_metric`` does the same (``elastic.metrics.api``);
- ``bool`` data values stay ``bool`` (torch turns them into ``1.0``) and numpy scalars are
  accepted as the Python numbers they hold;
- events compare equal by value; an empty event name is rejected;
- unregistering a handle twice raises ``ValueError`` (torch crashes the process).

    >>> handle = register_event_handler(print)
    >>> log_event(Event("epoch", datetime.now(), {"loss": 0.25}))
    >>> unregister_event_handler(handle)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Union

from tb_monitor._guard import reraise_theirs

__all__ = [
    "Event",
    "EventHandlerHandle",
    "data_value_t",
    "log_event",
    "register_event_handler",
    "unregister_event_handler",
]

#: The types an event's data values may have (as ``torch.monitor.data_value_t``).
data_value_t = Union[str, float, int, bool]  # noqa: UP007 (a runtime alias that also works on 3.10)

_log = logging.getLogger("tb_monitor")


def _data_value(key: str, value: Any) -> str | float | int | bool:
    """``value`` as the exact Python type it stands for, or TypeError naming ``key``."""
    kind = type(value)
    if kind is float or kind is int or kind is str or kind is bool:
        return value
    if isinstance(value, bool):  # bool subclasses are impossible, but keep bool before int
        return bool(value)
    if isinstance(value, float):  # numpy.float64 is a float subclass
        return float(value)
    if isinstance(value, int):  # IntEnum and friends
        return int(value)
    if isinstance(value, str):
        return str(value)
    item = getattr(value, "item", None)
    if kind.__module__ == "numpy" and callable(item):  # numpy scalars: bool_, int32, float32, ...
        converted = item()
        if type(converted) in (bool, int, float, str):
            return converted
    raise TypeError(
        f"event data value for key {key!r} must be str, int, float or bool (or a numpy scalar), "
        f"got {value!r} of type {kind.__qualname__}"
    )


class Event:
    """One event: a ``name``, a ``timestamp`` and ``data`` mapping str keys to ``data_value_t``.

    The data is copied and validated: keys must be str, values str, int, float or bool (numpy
    scalars become the Python value they hold); anything else raises TypeError naming the key.
    """

    __slots__ = ("data", "name", "timestamp")
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __init__(self, name: str, timestamp: datetime, data: Mapping[str, data_value_t]) -> None:
        if not isinstance(name, str):
            raise TypeError(f"event name must be a str, got {name!r}")
        if not name:
            raise ValueError("event name must not be empty")
        if not isinstance(timestamp, datetime):
            raise TypeError(
                f"event {name!r}: timestamp must be a datetime.datetime, got {timestamp!r}"
            )
        if not isinstance(data, Mapping):
            raise TypeError(f"event {name!r}: data must be a mapping of str keys, got {data!r}")
        checked: dict[str, str | float | int | bool] = {}
        for key, value in data.items():
            if type(key) is not str:
                raise TypeError(f"event {name!r}: data keys must be str, got key {key!r}")
            checked[key] = _data_value(key, value)
        self.name = name
        self.timestamp = timestamp
        self.data = checked

    def __repr__(self) -> str:
        return f"Event(name={self.name!r}, timestamp={self.timestamp!r}, data={self.data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.name, self.timestamp, self.data) == (other.name, other.timestamp, other.data)


def _handler_name(handler: Callable[..., Any]) -> str:
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    module = getattr(handler, "__module__", None) or type(handler).__module__
    return f"{module}.{name}" if module else name


class EventHandlerHandle:
    """What ``register_event_handler`` returns; pass it to ``unregister_event_handler``."""

    __slots__ = ("errors", "handler")

    def __init__(self, handler: Callable[[Event], Any]) -> None:
        self.handler = handler
        #: Events the handler raised on, and so lost; only the first is reported.
        self.errors = 0

    def __repr__(self) -> str:
        return f"<EventHandlerHandle {_handler_name(self.handler)}>"


# Copy-on-write: registration replaces the tuple under the lock, log_event reads it lock-free, so
# a handler (un)registered while events are being logged never disturbs an iteration in flight.
_handlers: tuple[EventHandlerHandle, ...] = ()
_registry_lock = threading.Lock()


def register_event_handler(handler: Callable[[Event], Any]) -> EventHandlerHandle:
    """Call ``handler(event)`` for every logged event, after the handlers registered before it."""
    global _handlers
    if not callable(handler):
        raise TypeError(f"event handler must be callable, got {handler!r}")
    handle = EventHandlerHandle(handler)
    with _registry_lock:
        _handlers = (*_handlers, handle)
    return handle


def unregister_event_handler(handle: EventHandlerHandle) -> None:
    """Stop calling the handler behind ``handle``; ValueError if it is not registered."""
    global _handlers
    if not isinstance(handle, EventHandlerHandle):
        raise TypeError(f"expected an EventHandlerHandle, got {handle!r}")
    with _registry_lock:
        if handle not in _handlers:
            raise ValueError(f"{handle!r} is not registered (already unregistered?)")
        _handlers = tuple(h for h in _handlers if h is not handle)


def _dispatch(handlers: tuple[EventHandlerHandle, ...], event: Event) -> None:
    for handle in handlers:
        try:
            handle.handler(event)
        except Exception as exc:
            reraise_theirs(exc)
            handle.errors += 1
            if handle.errors == 1:
                _log.exception(
                    "tb_monitor event handler %s raised while handling event %r; it stays "
                    "registered and its further errors are not reported",
                    _handler_name(handle.handler),
                    event.name,
                )


def log_event(event: Event) -> None:
    """Hand ``event`` to every registered handler, in order; a no-op when there is none.

    A handler that raises never reaches the caller and never stops the handlers after it.
    """
    if type(event) is not Event and not isinstance(event, Event):
        raise TypeError(f"log_event expects an Event, got {event!r}")
    handlers = _handlers
    if handlers:
        _dispatch(handlers, event)
