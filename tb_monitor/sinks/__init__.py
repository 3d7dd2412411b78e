"""Sinks: where records go. The ``Sink`` protocol, the TensorBoard sink and its pieces.

- ``base``: the ``Sink`` protocol and what a sink receives (``Window``, ``TimelineRecord``).
- ``fanout``: one handler per registry handing each record to every sink, isolating failures.
- ``tensorboard``: ``TensorboardSink``, the three TensorBoard handlers on one writer.
- ``memory``: ``MemorySink``, which keeps what it receives (tests; ``tb_monitor.testing``).
- ``prometheus``: ``PrometheusSink``, series on ``/metrics`` (the ``prometheus`` extra);
  ``prometheus_job``: the job's restarts and state, worked out when scraped.
- ``handlers``: the TensorBoard handlers of torch.monitor events, metrics and torchelastic events.
- ``encoding``: the hand-written wire format of the hot path (and its C twin, ``_encoding.c``).
- ``batching``: timeline events gathered into batched records, keep-alives in bounded runs.
- ``summaries``: records as TensorBoard's own protos (timeline, text, Custom Scalars layout).
- ``service``: the one background thread per process that drains every writer.
- ``writer``: ``AsyncWriter``, the caller-side queue, step allocation and files.
- ``closing``: how a flush or close waits for the drain, and the ledger of what it holds.
- ``filekeeper``, ``steps``: one writer's event file under storage faults; its steps file.
"""

from tb_monitor.sinks.base import Sink, TimelineRecord, Window
from tb_monitor.sinks.handlers import (
    TensorboardEventHandler,
    TensorboardLoggingHandler,
    TensorboardMetricHandler,
)
from tb_monitor.sinks.tensorboard import TensorboardSink
from tb_monitor.sinks.writer import DROPPED_TAG, AsyncWriter, WriterClosedError

__all__ = [
    "DROPPED_TAG",
    "AsyncWriter",
    "Sink",
    "TensorboardEventHandler",
    "TensorboardLoggingHandler",
    "TensorboardMetricHandler",
    "TensorboardSink",
    "TimelineRecord",
    "Window",
    "WriterClosedError",
]
