"""The handlers: how monitor events, metrics and torchelastic events reach a writer.

Each sink takes a writer: our ``AsyncWriter``, a ``tensorboardX.SummaryWriter``, a
``torch.utils.tensorboard.SummaryWriter``, or a logdir path (the sink then owns an
``AsyncWriter``; ``close()`` it, or let process exit do so).

- ``TensorboardEventHandler``: a ``torch.monitor``-compatible event handler. A Stat window becomes
  one scalar per aggregation (``<stat>.<agg>``, step = window index); any other event a text
  summary (a table of its data) and a timeline record.
- ``TensorboardMetricHandler``: a torchelastic ``MetricHandler``. A metric becomes the scalar
  ``<group>/<name>``; a Custom Scalars layout gets one category per group.
- ``TensorboardLoggingHandler``: a ``logging.Handler`` to use as a torchelastic events
  destination. Each ``Event``/``RdzvEvent`` becomes a timeline record holding torch's JSON, plus
  a one-line text summary under ``events/<kind>``.

A sink whose writer was closed logs that once and drops what it is given: telemetry never stops
training.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from tb_monitor import contract
from tb_monitor.elastic.metrics.api import MetricData, MetricHandler
from tb_monitor.sinks import summaries
from tb_monitor.sinks.base import TimelineHandler, TimelineRecord, Window
from tb_monitor.sinks.writer import AsyncWriter, WriterClosedError

__all__ = [
    "TensorboardEventHandler",
    "TensorboardLoggingHandler",
    "TensorboardMetricHandler",
]

_log = logging.getLogger(__name__)


class _SummaryWriterAdapter:
    """A tensorboardX or torch ``SummaryWriter`` behind ``AsyncWriter``'s methods.

    Their ``add_scalar`` writes scalars; text, timeline records and layouts, built with
    TensorBoard's protos (tensorboardX's lack ``data_class``), go to their file writer, re-parsed into tensorboardX's own ``Summary`` class where needed: protobuf keeps the
    field it does not know, so the bytes on disk still carry it. Steps are counted per tag here,
    since these writers do not allocate them.
    """

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self._steps: dict[str, int] = {}
        self._summary_class: Any = None
        if type(writer).__module__.startswith("tensorboardX"):
            from tensorboardX.proto import summary_pb2

            self._summary_class = summary_pb2.Summary

    closed = False  # these writers reopen a file when used after close()

    @property
    def run_dir(self) -> str:
        return self._writer.logdir if hasattr(self._writer, "logdir") else self._writer.log_dir

    def _next(self, tag: str) -> int:
        step = self._steps.get(tag, 0)
        self._steps[tag] = step + 1
        return step

    def add_scalar(
        self, tag: str, value: float, wall_time: float | None = None, step: int | None = None
    ) -> None:
        step = self._next(tag) if step is None else step
        self._writer.add_scalar(tag, value, global_step=step, walltime=wall_time)

    def add_scalars(self, mapping: Mapping[str, float], wall_time: float | None = None) -> None:
        for tag, value in mapping.items():
            self.add_scalar(tag, value, wall_time)

    def add_text(self, tag: str, text: str, wall_time: float | None = None) -> None:
        # Not their add_text: tensorboardX renames the tag to "<tag>/text_summary".
        self.add_summary(summaries.text_summary(tag, text), wall_time)

    def add_timeline(
        self, kind: str, payload_json: str, wall_time: float, *, heartbeat: bool | None = None
    ) -> None:
        # One record per event: these writers batch nothing, keep-alives or not.
        self.add_summary(summaries.timeline_summary(kind, payload_json), wall_time)

    def add_summary(self, summary: Any, wall_time: float | None = None) -> None:
        step = self._next(summary.value[0].tag)
        if self._summary_class is not None:
            summary = self._summary_class.FromString(summary.SerializeToString())
        self._writer._get_file_writer().add_summary(summary, global_step=step, walltime=wall_time)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _as_writer(target: Any) -> tuple[Any, bool]:
    """The writer a sink writes to, and whether the sink owns it (made it from a path)."""
    if isinstance(target, AsyncWriter):
        if target.closed:
            raise ValueError(f"cannot write to {target!r}: it is closed")
        return target, False
    if isinstance(target, (str, os.PathLike)):
        return AsyncWriter(target), True
    if callable(getattr(target, "add_scalar", None)) and callable(
        getattr(target, "_get_file_writer", None)
    ):
        return _SummaryWriterAdapter(target), False
    raise TypeError(
        "expected an AsyncWriter, a tensorboardX or torch.utils.tensorboard SummaryWriter, or a "
        f"logdir path; got {target!r}"
    )


class _Sink:
    """What every sink shares: its writer, and reporting a closed writer once."""

    def __init__(self, writer_or_logdir: Any) -> None:
        self._writer, self._owns_writer = _as_writer(writer_or_logdir)
        self._reported_closed = False

    @property
    def writer(self) -> Any:
        """The writer this sink writes to (an ``AsyncWriter`` or an adapted ``SummaryWriter``)."""
        return self._writer

    def close(self) -> None:
        """Close the writer if this sink created it from a logdir path."""
        if self._owns_writer:
            self._writer.close()

    def _writer_closed(self, exc: WriterClosedError) -> None:
        if not self._reported_closed:
            self._reported_closed = True
            _log.error("%s: %s; dropping its records from now on", type(self).__name__, exc)


# ---------------------------------------------------------------------------------------------
# torch.monitor events
# ---------------------------------------------------------------------------------------------


def _cell(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _markdown_table(data: Mapping[str, object]) -> str:
    if not data:
        return "*(no data)*"
    rows = "".join(f"| {_cell(key)} | {_cell(value)} |\n" for key, value in data.items())
    return "| key | value |\n| --- | --- |\n" + rows


class TensorboardEventHandler(_Sink):
    """Writes ``torch.monitor``-style events to TensorBoard; a drop-in for torch's handler.

        >>> handle = tb_monitor.register_event_handler(TensorboardEventHandler("runs/exp1"))

    Stat windows (``torch.monitor.Stat`` events) become one scalar per aggregation, tagged
    ``<stat>.<agg>`` and stepped by window index; other events a text summary (tag = the event's
    name) and a ``monitor`` timeline record ``{"name", "timestamp" (epoch s), "data"}``.
    """

    def __call__(self, event: Any) -> None:
        try:
            if event.name == contract.STAT_EVENT:
                self._writer.add_scalars(event.data, event.timestamp.timestamp())
            else:
                self._write_event(event)
        except WriterClosedError as exc:
            self._writer_closed(exc)

    def write_window(self, window: Window) -> None:
        """Write a Stat window's scalars (what ``__call__`` does with a Stat event)."""
        try:
            self._writer.add_scalars(window.data, window.timestamp.timestamp())
        except WriterClosedError as exc:
            self._writer_closed(exc)

    def _write_event(self, event: Any) -> None:
        wall_time = event.timestamp.timestamp()
        payload = json.dumps({"name": event.name, "timestamp": wall_time, "data": event.data})
        self._writer.add_text(event.name, _markdown_table(event.data), wall_time)
        self._writer.add_timeline(contract.MONITOR, payload, wall_time)


# ---------------------------------------------------------------------------------------------
# torchelastic metrics
# ---------------------------------------------------------------------------------------------


class TensorboardMetricHandler(_Sink, MetricHandler):
    """A torchelastic metric handler writing each metric as the scalar ``<group>/<name>``.

        >>> tb_monitor.elastic.metrics.configure(TensorboardMetricHandler(writer))

    Steps count per tag; wall time is the metric's timestamp. Each new group adds a category
    to the run's Custom Scalars layout.
    """

    def __init__(self, writer_or_logdir: Any) -> None:
        super().__init__(writer_or_logdir)
        self._tags: dict[str, dict[str, str]] = {}  # group -> name -> tag
        self._add_scalar = self._writer.add_scalar  # bound once: emit is every metric's hot path

    def emit(self, metric_data: MetricData) -> None:
        timestamp, group, name, value = metric_data
        try:
            tag = self._tags[group][name]
        except (KeyError, TypeError):
            tag = None
        try:
            if tag is None:
                tag = self._new_tag(group, name)
            self._add_scalar(tag, value, timestamp)
        except WriterClosedError as exc:
            self._writer_closed(exc)

    def _new_tag(self, group: str, name: str) -> str:
        tag = contract.metric_tag(group, name)
        if group not in self._tags:
            self._writer.add_summary(summaries.custom_scalars_summary([*self._tags, group]))
            self._tags[group] = {}
        self._tags[group][name] = tag
        return tag


# ---------------------------------------------------------------------------------------------
# torchelastic events
# ---------------------------------------------------------------------------------------------


def _summary_line(fields: Mapping[str, Any]) -> str:
    parts = [f"**{_cell(fields['name'])}**"]
    if fields["state"]:
        parts.append(_cell(fields["state"]))
    if fields["hostname"] or fields["pid"] is not None:
        parts.append(f"{_cell(fields['hostname'] or '?')}:{_cell(fields['pid'] or '?')}")
    if fields["rank"] is not None:
        parts.append(f"rank {_cell(fields['rank'])}")
    if fields["message"]:
        parts.append(_cell(fields["message"]))
    return " · ".join(parts)


class TensorboardLoggingHandler(_Sink, TimelineHandler):
    """A ``logging.Handler`` to register as a torchelastic events destination.

        >>> events.register_destination("tensorboard", TensorboardLoggingHandler(writer))

    Reads the event from the message, the event's JSON as either ``record`` (torch's or
    ``tb_monitor.elastic.events.record``) logs it. Writes a timeline record of kind
    ``rendezvous``/``agent``/``worker`` holding ``event.serialize()`` exactly, at the event's own
    time (the log record's time when the event has none), and a one-line text summary under
    ``events/<kind>`` (not for rendezvous keep-alives, which are on the timeline as runs). Messages that are not events are ignored, with one warning.
    """

    def __init__(self, writer_or_logdir: Any, level: int = logging.NOTSET) -> None:
        _Sink.__init__(self, writer_or_logdir)
        TimelineHandler.__init__(self, level)

    def write(self, record: TimelineRecord) -> None:
        """Write one timeline record and its text summary (what ``emit`` does once parsed)."""
        try:
            heartbeat = record.kind == contract.RENDEZVOUS and contract.is_heartbeat(record.fields)
            self._writer.add_timeline(
                record.kind, record.payload, record.wall_time, heartbeat=heartbeat
            )
            if not heartbeat:  # keep-alives would bury the Text tab
                text = _summary_line(record.fields)
                self._writer.add_text(f"events/{record.kind}", text, record.wall_time)
        except WriterClosedError as exc:
            self._writer_closed(exc)

    def close(self) -> None:
        """Detach from logging and close the writer if this handler created it."""
        TimelineHandler.close(self)
        _Sink.close(self)
