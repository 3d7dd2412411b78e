"""TensorBoard's own loaders, as the tests of the sinks read back through them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer


@dataclass
class Loaded:
    """A logdir loaded by TensorBoard's Python loader, keeping every point (size guidance 0)."""

    multiplexer: Any
    provider: Any

    def scalars(self) -> dict[str, dict[str, list[tuple[int, float]]]]:
        """run → tag → [(step, value)] as the scalars plugin sees them."""
        data = self.provider.read_scalars(
            context.RequestContext(), experiment_id="", plugin_name="scalars", downsample=10**9
        )
        return {
            run: {tag: [(p.step, p.value) for p in points] for tag, points in tags.items()}
            for run, tags in data.items()
        }

    def tensors(self, plugin_name: str) -> dict[str, dict[str, list[Any]]]:
        """run → tag → tensor points a plugin of that name is handed by the data provider."""
        return self.provider.read_tensors(
            context.RequestContext(), experiment_id="", plugin_name=plugin_name, downsample=10**9
        )


def load(logdir) -> Loaded:
    """Load ``logdir`` with TensorBoard's EventMultiplexer and its data provider."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        size_guidance={"scalars": 0, "tensors": 0}
    )
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return Loaded(multiplexer, data_provider.MultiplexerDataProvider(multiplexer, str(logdir)))


def timeline_payloads(datum: Any) -> list[str]:
    """The event payloads of one timeline record as a data provider hands it (either version)."""
    from tb_monitor import contract

    values = datum.numpy
    batched = values.ndim > 0
    events = contract.record_events(values.reshape(-1).tolist(), datum.wall_time, batched)
    return [payload for _, payload in events]
