"""torchelastic's event records: ``Event`` and ``RdzvEvent``, serialized exactly as torch does.

Same names, fields and JSON as ``torch.distributed.elastic.events.api``, without torch: an event
serialized by either side deserializes on the other. Our addition is validation at construction,
so a bad field fails where it is made (naming it) instead of in a handler later: ``metadata``
values must be ``EventMetadataValue``; ``source`` and ``node_state`` accept their enum's names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

__all__ = ["Event", "EventMetadataValue", "EventSource", "NodeState", "RdzvEvent"]

EventMetadataValue = str | int | float | bool | None

_E = TypeVar("_E", bound=Enum)
_S = TypeVar("_S", bound="_Serialized")


class EventSource(str, Enum):
    """Known identifiers of the event producers."""

    AGENT = "AGENT"
    WORKER = "WORKER"


class NodeState(str, Enum):
    """The states that a node can be in rendezvous."""

    INIT = "INIT"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class _Serialized:
    """JSON in and out, as torchelastic's events do it; ``str(event)`` is the JSON."""

    def __str__(self) -> str:
        return self.serialize()

    @classmethod
    def deserialize(cls: type[_S], data: str | _S) -> _S:
        """The event in ``data``: torchelastic's JSON (as ``serialize`` writes it) or an event."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, str):
            raise TypeError(
                f"{cls.__name__}.deserialize takes a JSON str or a {cls.__name__}, got {data!r}"
            )
        fields = json.loads(data)
        if not isinstance(fields, dict):
            raise ValueError(f"{cls.__name__}.deserialize needs a JSON object, got {data!r}")
        return cls(**fields)

    def serialize(self) -> str:
        """The event as JSON, byte for byte as torchelastic writes it (``json.dumps(asdict(...))``).

        The fields are flat (``metadata`` holds scalars only), so a plain dict of them in
        declaration order is what ``asdict`` gives, without its deep copy: a third the time.
        """
        names = self.__dataclass_fields__  # type: ignore[attr-defined]
        return json.dumps({name: getattr(self, name) for name in names})


@dataclass
class Event(_Serialized):
    """Something meaningful that happened during a torchelastic job.

    Args:
        name: event name.
        source: the event producer, e.g. agent or worker (an ``EventSource`` or its name).
        timestamp: timestamp in milliseconds when event occurred.
        metadata: additional data that is associated with the event.
    """

    name: str
    source: EventSource
    timestamp: int = 0
    metadata: dict[str, EventMetadataValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_type("Event.name", self.name, str)
        self.source = _member(EventSource, self.source, "Event.source")
        _check_type("Event.timestamp", self.timestamp, (int, float))
        _check_metadata(self.metadata)


@dataclass
class RdzvEvent(_Serialized):
    """A rendezvous event.

    Args:
        name: Event name. (E.g. Current action being performed)
        run_id: The run id of the rendezvous
        message: The message describing the event
        hostname: Hostname of the node
        pid: The process id of the node
        node_state: The state of the node (a ``NodeState`` or its name)
        master_endpoint: The master endpoint for the rendezvous store, if known
        rank: The rank of the node, if known
        local_id: The local_id of the node, if defined in dynamic_rendezvous.py
        error_trace: Error stack trace, if this is an error event.
    """

    name: str
    run_id: str
    message: str
    hostname: str
    pid: int
    node_state: NodeState
    master_endpoint: str = ""
    rank: int | None = None
    local_id: int | None = None
    error_trace: str = ""

    def __post_init__(self) -> None:
        for name in ("name", "run_id", "message", "hostname", "master_endpoint", "error_trace"):
            _check_type(f"RdzvEvent.{name}", getattr(self, name), str)
        _check_type("RdzvEvent.pid", self.pid, int)
        _check_type("RdzvEvent.rank", self.rank, (int, type(None)))
        _check_type("RdzvEvent.local_id", self.local_id, (int, type(None)))
        self.node_state = _member(NodeState, self.node_state, "RdzvEvent.node_state")


def _check_type(what: str, value: object, types: type | tuple[type, ...]) -> None:
    if not isinstance(value, types):
        expected = " or ".join(
            t.__name__ for t in (types if isinstance(types, tuple) else (types,))
        )
        raise TypeError(f"{what} must be {expected}, got {value!r} ({type(value).__name__})")


def _member(enum: type[_E], value: object, what: str) -> _E:
    """``value`` as a member of ``enum``, which also accepts the member's name."""
    if isinstance(value, enum):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"{what} must be a {enum.__name__} or its name, got {value!r} ({type(value).__name__})"
        )
    try:
        return enum[value]
    except KeyError:
        known = ", ".join(enum.__members__)
        raise ValueError(f"unknown {enum.__name__} {value!r} for {what}; known: {known}") from None


def _check_metadata(metadata: object) -> None:
    _check_type("Event.metadata", metadata, dict)
    for key, value in metadata.items():  # type: ignore[attr-defined]
        if not isinstance(key, str):
            raise TypeError(f"Event.metadata key {key!r} must be a str ({type(key).__name__})")
        if not isinstance(value, EventMetadataValue):
            raise TypeError(
                f"Event.metadata[{key!r}] = {value!r} ({type(value).__name__}) is not an "
                "EventMetadataValue (str, int, float, bool or None)"
            )
