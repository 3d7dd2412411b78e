"""One run directory's writer, with the methods of torch's ``FileWriter`` on our ``AsyncWriter``.

``SummaryWriter`` keeps one per directory (its own, each ``add_scalars`` sub-run, each
``add_hparams`` run), as torch keeps its ``all_writers``. Events are built on the writer's thread:
the caller's thread hands over a callable (``add_built``) or a proto it already holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.summary import builders

__all__ = ["FileWriter"]


class FileWriter:
    """Writes Events to one run directory (local, ``s3://``, ``gs://``) off the caller's thread.

    ``max_queue`` is accepted as torch's is; the queue's bound is ``AsyncWriter``'s own
    (65,536 records), so a burst of small records never makes the caller wait.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ) -> None:
        self._log_dir = str(log_dir)
        self.max_queue = max_queue
        self.filename_suffix = filename_suffix
        self.writer = AsyncWriter(
            self._log_dir, flush_secs=flush_secs, filename_suffix=filename_suffix
        )

    def get_logdir(self) -> str:
        """The directory this writer's event file is in."""
        return self._log_dir

    def add_built(self, build: Callable[[], Any], walltime: float | None = None) -> None:
        """Write the Event ``build()`` returns, called on the writer's thread."""
        self.writer.add_built(build, walltime)

    def add_event(self, event: Any, step: Any = None, walltime: float | None = None) -> None:
        """Write ``event`` (a copy: the caller may change it), at ``step`` if given."""
        made = type(event)()
        made.CopyFrom(event)
        if step is not None:
            made.step = int(step)
        self.writer.add_built(lambda: made, walltime)

    def add_summary(
        self, summary: Any, global_step: Any = None, walltime: float | None = None
    ) -> None:
        """Write ``summary`` (a ``Summary`` proto) in an Event at ``global_step``."""
        built = builders.event(global_step, summary=summary)
        self.writer.add_built(lambda: built, walltime)

    def add_graph(self, graph_profile: tuple[Any, Any], walltime: float | None = None) -> None:
        """Write a traced graph and its run metadata, serialized on the writer's thread."""
        graph, stepstats = graph_profile
        self.writer.add_built(lambda: builders.event(graph_def=graph.SerializeToString()), walltime)
        self.writer.add_built(lambda: _run_metadata(stepstats), walltime)

    def add_onnx_graph(self, graph: Any, walltime: float | None = None) -> None:
        """Write an ONNX model's graph, serialized on the writer's thread."""
        self.writer.add_built(lambda: builders.event(graph_def=graph.SerializeToString()), walltime)

    def flush(self) -> None:
        """Write everything accepted so far and sync it."""
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def _run_metadata(stepstats: Any) -> Any:
    from tensorboard.compat.proto.event_pb2 import TaggedRunMetadata

    metadata = TaggedRunMetadata(tag="step1", run_metadata=stepstats.SerializeToString())
    return builders.event(tagged_run_metadata=metadata)
