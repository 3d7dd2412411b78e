"""torchelastic-compatible events, delivered through standard ``logging`` handlers.

Each destination name maps to one ``logging.Handler`` (see ``handlers``); ``record(event,
destination)`` logs the event's JSON to it. Code written against
``torch.distributed.elastic.events`` ports by changing the import prefix, and needs no torch::

    from tb_monitor.elastic import events

    events.register_destination("mine", logging.FileHandler("events.jsonl"))
    events.record(events.Event("job.started", events.EventSource.AGENT), "mine")

Our additions: ``register_destination`` and ``unregister_destination``; an unknown destination raises
``handlers.UnknownDestinationError`` (a ``ValueError`` naming it, and a ``KeyError`` like torch's);
each log record carries the event object itself as ``record.tb_event``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import traceback

from tb_monitor.elastic.events import handlers
from tb_monitor.elastic.events.api import (
    Event,
    EventMetadataValue,
    EventSource,
    NodeState,
    RdzvEvent,
)
from tb_monitor.elastic.events.handlers import UnknownDestinationError, get_logging_handler

__all__ = [
    "Event",
    "EventMetadataValue",
    "EventSource",
    "NodeState",
    "RdzvEvent",
    "UnknownDestinationError",
    "construct_and_record_rdzv_event",
    "get_logging_handler",
    "record",
    "record_rdzv_event",
    "register_destination",
    "unregister_destination",
]

# One logger per destination, read without a lock; _lock guards creation and re-registration.
_events_loggers: dict[str, logging.Logger] = {}
_lock = threading.Lock()


class _EventsLogger(logging.Logger):
    """A logger outside logging's registry that still obeys ``logging.disable()``.

    ``Logger.isEnabledFor`` caches its answer, and ``logging.disable()`` clears only the caches
    of registered loggers; so this one decides afresh each time.
    """

    def isEnabledFor(self, level: int) -> bool:
        return not self.disabled and level > self.manager.disable and level >= self.level


def register_destination(name: str, handler: logging.Handler) -> None:
    """Send the events recorded to destination ``name`` to ``handler``, replacing any previous one.

    The destination's logger, if events were already recorded to it, switches to ``handler``
    at once. Registering ``dynamic_rendezvous`` turns on rendezvous events, which
    ``construct_and_record_rdzv_event`` skips while that destination is a ``NullHandler``.
    """
    if not isinstance(name, str):
        raise TypeError(f"event destination must be a str, got {name!r} ({type(name).__name__})")
    if not name:
        raise ValueError("event destination must be a non-empty str, got ''")
    if not isinstance(handler, logging.Handler):
        raise TypeError(
            f"handler for event destination {name!r} must be a logging.Handler, got {handler!r}"
        )
    with _lock:
        handlers._log_handlers[name] = handler
        logger = _events_loggers.get(name)
        if logger is not None:
            logger.handlers = [handler]  # one atomic store: a concurrent record sees old or new


def unregister_destination(name: str) -> logging.Handler:
    """Forget destination ``name`` and its logger; returns the handler it had.

    Recording to it afterwards raises ``UnknownDestinationError`` until it is registered again.
    """
    with _lock:
        handler = get_logging_handler(name)
        del handlers._log_handlers[name]
        _events_loggers.pop(name, None)
        return handler


def _get_or_create_logger(destination: str = "null") -> logging.Logger:
    """The logger of ``destination``: its one handler, level INFO, not propagating.

    Not propagating means each event is handled once, never again by the root logger's handlers.
    """
    try:
        return _events_loggers[destination]
    except (KeyError, TypeError):  # TypeError: an unhashable destination, named below
        pass
    with _lock:  # also orders creation after any concurrent register_destination
        # Looked up at call time (tests patch it); raises for a bad or unknown destination.
        handler = get_logging_handler(destination)
        logger = _events_loggers.get(destination)
        if logger is None:
            # Not logging.getLogger(): torchelastic names its loggers the same, and in a process
            # using both, one shared logger would hold both handlers and deliver every event twice.
            logger = _EventsLogger(f"torchelastic-events-{destination}")
            # torchelastic takes the level from $LOGLEVEL, so LOGLEVEL=WARNING (a common
            # setting for torchrun's own chatter) silently drops every event, and an unknown
            # value makes record() raise. Events are data, not diagnostics: always INFO.
            logger.setLevel(logging.INFO)
            logger.propagate = False
            logger.addHandler(handler)
            _events_loggers[destination] = logger
        return logger


def record(event: Event, destination: str = "null") -> None:
    """Log ``event`` to ``destination``'s handler, at INFO, with the event's JSON as the message.

    Our addition to torchelastic's ``record``: the log record also carries the event object
    itself as ``record.tb_event``, so a handler need not parse the JSON back.
    """
    _log(event, destination)


def record_rdzv_event(event: RdzvEvent) -> None:
    """Log a rendezvous event to the ``dynamic_rendezvous`` destination, as ``record`` does."""
    _log(event, "dynamic_rendezvous")


def _log(event: Event | RdzvEvent, destination: str) -> None:
    _get_or_create_logger(destination).info(event.serialize(), extra={"tb_event": event})


def construct_and_record_rdzv_event(
    run_id: str,
    message: str,
    node_state: NodeState,
    name: str = "",
    hostname: str = "",
    pid: int | None = None,
    master_endpoint: str = "",
    local_id: int | None = None,
    rank: int | None = None,
) -> None:
    """Build a ``RdzvEvent`` and record it, unless ``dynamic_rendezvous`` is a ``NullHandler``.

    Defaults as torchelastic's: ``hostname`` is this host's FQDN, ``pid`` this process's id,
    the event name is ``<caller's file name>:<name or caller's function>``, and a ``FAILED``
    event carries the traceback of the exception being handled.
    """
    # Skip the work below when nobody listens.
    if isinstance(get_logging_handler("dynamic_rendezvous"), logging.NullHandler):
        return

    if not hostname:
        hostname = socket.getfqdn()
    if not pid:
        pid = os.getpid()

    # torchelastic calls inspect.stack(), which reads the source of every frame; the caller's
    # frame alone gives the same file and function.
    filename = "no_file"
    try:
        caller = sys._getframe(1)
    except ValueError:
        pass
    else:
        filename = os.path.basename(caller.f_code.co_filename)
        if not name:
            name = caller.f_code.co_name
        del caller  # holding a frame keeps its locals alive

    error_trace = traceback.format_exc() if node_state == NodeState.FAILED else ""

    event = RdzvEvent(
        name=f"{filename}:{name}",
        run_id=run_id,
        message=message,
        hostname=hostname,
        pid=pid,
        node_state=node_state,
        master_endpoint=master_endpoint,
        rank=rank,
        local_id=local_id,
        error_trace=error_trace,
    )
    record_rdzv_event(event)
