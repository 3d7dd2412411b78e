"""The ``Sink`` protocol: what a destination of tb_monitor's records receives, and the records.

A sink is any object with these six methods; nothing of ours needs subclassing (the protocol is
checked by duck typing). ``tb_monitor.init(logdir, sinks=[...])`` hands every sink each record
once, on the thread that produced it, so a sink must be quick (queue the work, as the
TensorBoard sink does) and thread-safe:

- ``window(Window)``: a closed ``Stat`` window (the ``torch.monitor.Stat`` event);
- ``metric(MetricData)``: a torchelastic metric data point (``timestamp``, ``group_name``,
  ``name``, ``value``);
- ``event(Event)``: any other ``torch.monitor``-style event (``name``, ``timestamp``, ``data``);
- ``timeline(TimelineRecord)``: a torchelastic ``Event``/``RdzvEvent`` sent to an events
  destination, as the timeline stores it;
- ``flush()`` when the monitor flushes, ``close()`` once when it closes.

A sink that raises is isolated by the monitor: one warning names it, its drops are counted
(``Monitor.drops``), the other sinks still get the record and training never sees the error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from tb_monitor import contract

if TYPE_CHECKING:
    from tb_monitor._event import Event
    from tb_monitor.elastic.metrics.api import MetricData

__all__ = ["Sink", "TimelineHandler", "TimelineRecord", "Window"]

_log = logging.getLogger("tb_monitor")


class Window(NamedTuple):
    """A closed Stat window: the Stat's ``stat`` name, ``data`` exactly as torch.monitor logs it
    (``"<stat>.<aggregation>"`` -> value) and the window's end as ``timestamp``."""

    stat: str
    data: Mapping[str, float]
    timestamp: datetime

    @classmethod
    def from_event(cls, event: Event) -> Window:
        """The window a ``torch.monitor.Stat`` event carries."""
        first = next(iter(event.data), "")
        return cls(first.rpartition(".")[0], event.data, event.timestamp)

    @property
    def aggregations(self) -> dict[str, float]:
        """The values by aggregation name, lower case (``{"mean": 0.5, "max": 2.0}``)."""
        return {key.rpartition(".")[2]: value for key, value in self.data.items()}


class TimelineRecord(NamedTuple):
    """A torchelastic event as the timeline stores it: its ``kind`` (``rendezvous``, ``agent``,
    ``worker``), torch's JSON ``payload`` exactly, its ``wall_time`` (epoch seconds) and its
    ``fields`` decoded (``contract.decode_record``: name, source, state, rank, metadata, ...)."""

    kind: str
    payload: str
    wall_time: float
    fields: Mapping[str, Any]

    @classmethod
    def from_log_record(cls, record: logging.LogRecord) -> TimelineRecord | None:
        """The torchelastic event a destination's log record carries, or None when it carries
        none. The message is the event's JSON, whichever ``record`` logged it (torch's, or
        ``tb_monitor.elastic.events.record``, which also attaches the event as ``tb_event``)."""
        payload = record.getMessage()
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict) or not ("node_state" in data or "source" in data):
            return None
        kind, wall_time = _kind_and_time(data, record.created)
        return cls(kind, payload, wall_time, contract.decode_record(kind, data))


def _kind_and_time(data: Mapping[str, Any], created: float) -> tuple[str, float]:
    """Timeline kind of a serialized event, and its wall time (ms timestamps; 0 means unknown)."""
    if "node_state" in data:
        return contract.RENDEZVOUS, created  # RdzvEvent carries no time of its own
    kind = contract.AGENT if data.get("source") == "AGENT" else contract.WORKER
    timestamp = data.get("timestamp") or 0
    return kind, (timestamp / 1000.0 if timestamp else created)


class TimelineHandler(logging.Handler):
    """A torchelastic events destination that hands each event on as a ``TimelineRecord``
    (to ``write``, which subclasses define). Log records that carry no event are ignored, with
    one warning; a failure is ``logging``'s to report (``handleError``), never the caller's."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self._reported_non_event = False

    def write(self, record: TimelineRecord) -> None:
        raise NotImplementedError

    def emit(self, record: logging.LogRecord) -> None:
        try:
            timeline = TimelineRecord.from_log_record(record)
            if timeline is not None:
                self.write(timeline)
            elif not self._reported_non_event:
                self._reported_non_event = True
                _log.warning(
                    "%s ignores log records that are not torchelastic events, such as %r",
                    type(self).__name__,
                    record.getMessage()[:200],
                )
        except Exception:
            self.handleError(record)


@runtime_checkable
class Sink(Protocol):
    """Where tb_monitor's records go besides (or instead of) TensorBoard. See the module doc."""

    def window(self, window: Window) -> None:
        """A Stat window closed."""

    def metric(self, metric: MetricData) -> None:
        """A torchelastic metric was put."""

    def event(self, event: Event) -> None:
        """A ``torch.monitor``-style event other than a Stat window was logged."""

    def timeline(self, record: TimelineRecord) -> None:
        """A torchelastic event reached an events destination."""

    def flush(self) -> None:
        """Deliver what is buffered (the monitor's ``flush()``)."""

    def close(self) -> None:
        """Release what the sink holds; called once, when the monitor closes."""
