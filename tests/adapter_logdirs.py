"""What the framework adapters' tests read back, with TensorBoard's own readers: a run's scalars,
texts and HParams session, and the HParams dashboard's experiment as its backend builds it.

Used by ``tests/integration/test_adapters_*.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["hparams_experiment", "scalars", "session_end", "session_start", "texts"]


def _run(run_dir: Path | str) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalars(run_dir: Path | str) -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag of one run: its ``(step, value)`` points."""
    run = _run(run_dir)
    return {tag: [(e.step, e.value) for e in run.Scalars(tag)] for tag in run.Tags()["scalars"]}


def texts(run_dir: Path | str) -> dict[str, list[str]]:
    """Each text tag of one run (the text plugin's tensors): its strings."""
    from tensorboard.util import tensor_util

    run = _run(run_dir)
    found: dict[str, list[str]] = {}
    for tag in run.Tags()["tensors"]:
        if run.SummaryMetadata(tag).plugin_data.plugin_name == "text":
            found[tag] = [
                tensor_util.make_ndarray(e.tensor_proto).item().decode() for e in run.Tensors(tag)
            ]
    return found


def session_start(run_dir: Path | str) -> Any:
    """The run's HParams ``SessionStartInfo`` (TensorBoard keeps a tag's first metadata)."""
    from tensorboard.plugins.hparams import metadata

    content = _run(run_dir).SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content
    return metadata.parse_session_start_info_plugin_data(content)


def session_end(run_dir: Path | str) -> Any:
    """The run's HParams ``SessionEndInfo``."""
    from tensorboard.plugins.hparams import metadata

    content = _run(run_dir).SummaryMetadata(metadata.SESSION_END_INFO_TAG).plugin_data.content
    return metadata.parse_session_end_info_plugin_data(content)


def hparams_experiment(logdir: Path | str) -> Any:
    """The HParams dashboard's experiment for ``logdir`` (an ``api_pb2.Experiment``: its
    hyperparameters and metrics), as TensorBoard's hparams backend builds it."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context

    runs = multiplexer.EventMultiplexer()
    runs.AddRunsFromDirectory(str(logdir))
    runs.Reload()
    provider = data_provider.MultiplexerDataProvider(runs, str(logdir))
    backend = backend_context.Context(
        base_plugin.TBContext(data_provider=provider, multiplexer=runs, logdir=str(logdir))
    )
    ctx = context.RequestContext()
    content = backend.hparams_metadata(ctx, "")
    listed = backend.hparams_from_data_provider(ctx, "", None)
    return backend.experiment_from_metadata(ctx, "", True, content, listed)
