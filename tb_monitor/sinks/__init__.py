"""Sinks: how each kind of record becomes a TensorBoard summary, and the writer that stores it.

- ``handlers``: ``TensorboardEventHandler`` (torch.monitor events), ``TensorboardMetricHandler``
  (torchelastic metrics), ``TensorboardLoggingHandler`` (torchelastic events destination).
- ``summaries``: records as TensorBoard's own protos (timeline, text, Custom Scalars layout).
- ``encoding``: the hand-written wire format of the hot path (and its C twin, ``_encoding.c``).
- ``service``: the one background thread per process that drains every writer.
- ``writer``: ``AsyncWriter``, the caller-side queue, step allocation and files.
"""

from tb_monitor.sinks.handlers import (
    TensorboardEventHandler,
    TensorboardLoggingHandler,
    TensorboardMetricHandler,
)
from tb_monitor.sinks.writer import DROPPED_TAG, AsyncWriter, WriterClosedError

__all__ = [
    "DROPPED_TAG",
    "AsyncWriter",
    "TensorboardEventHandler",
    "TensorboardLoggingHandler",
    "TensorboardMetricHandler",
    "WriterClosedError",
]
