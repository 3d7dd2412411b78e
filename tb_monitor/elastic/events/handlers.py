"""The registry of event destinations: one ``logging.Handler`` per destination name.

Same built-in destinations as torchelastic's (``console``, ``dynamic_rendezvous``, ``null``);
``tb_monitor.elastic.events.register_destination`` adds or replaces one.
"""

from __future__ import annotations

import logging

__all__ = ["UnknownDestinationError", "get_logging_handler"]

_log_handlers: dict[str, logging.Handler] = {
    "console": logging.StreamHandler(),
    "dynamic_rendezvous": logging.NullHandler(),
    "null": logging.NullHandler(),
}


class UnknownDestinationError(ValueError, KeyError):
    """No handler is registered for an event destination.

    A ``ValueError`` with a message naming the destination; also a ``KeyError``, which is what
    torchelastic raises, so code catching that keeps working.
    """

    # KeyError would print the message as a quoted repr.
    __str__ = ValueError.__str__


def get_logging_handler(destination: str = "null") -> logging.Handler:
    """The handler registered for ``destination``."""
    try:
        return _log_handlers[destination]
    except (KeyError, TypeError):
        if not isinstance(destination, str):
            raise TypeError(
                f"event destination must be a str, got {destination!r} "
                f"({type(destination).__name__})"
            ) from None
        known = ", ".join(sorted(_log_handlers))
        raise UnknownDestinationError(
            f"unknown event destination {destination!r}; known destinations: {known} "
            "(add one with tb_monitor.elastic.events.register_destination)"
        ) from None
