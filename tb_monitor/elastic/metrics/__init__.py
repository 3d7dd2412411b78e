"""torchelastic-compatible metrics: ``import tb_monitor.elastic.metrics as metrics``.

A metric is identified by ``(metric_group, metric_name)``; each group is routed to a
``MetricHandler`` with ``configure`` (``group=None`` sets the default for every group not
configured by name; out of the box that default drops everything). A handler that raises
never reaches the code that put the metric, unlike torch's: it is logged once and counted
(``handler_errors``); only a bad value of the caller's is raised, naming the metric. Code written
against ``torch.distributed.elastic.metrics`` ports by changing the import prefix, and needs no
torch::

    import tb_monitor.elastic.metrics as metrics

    metrics.configure(metrics.ConsoleMetricsHandler(), group="my_app")
    metrics.put_metric("calculate_latency", 12, "my_app")  # [<time>][my_app]: calculate_latency=12


    @metrics.prof(group="my_app")  # my_app: <module>.train.success|failure, .duration.ms
    def train(): ...
"""

from tb_monitor.elastic.metrics import api
from tb_monitor.elastic.metrics.api import *  # noqa: F403
from tb_monitor.elastic.metrics.api import MetricsConfig

__all__ = [*api.__all__, "initialize_metrics"]


def initialize_metrics(cfg: MetricsConfig | None = None) -> None:
    """torchelastic's hook for a metrics back end, given its ``MetricsConfig``.

    A no-op, as in torch: route metrics with ``configure`` (or ``tb_monitor.init``). A ``cfg``
    that is not a ``MetricsConfig`` (or None) is a TypeError naming it.
    """
    if cfg is not None and not isinstance(cfg, MetricsConfig):
        raise TypeError(f"initialize_metrics takes a MetricsConfig or None, got {cfg!r}")
