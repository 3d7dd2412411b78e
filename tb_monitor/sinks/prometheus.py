"""``PrometheusSink``: Stat windows, torchelastic metrics, restarts and the job's state as
Prometheus series, served on ``/metrics`` (``pip install 'tb-monitor[prometheus]'``).

Names follow Prometheus's rules: a ``tb_monitor_`` prefix, the unit in the name (``_seconds``;
a ``_s``/``_ms`` suffix becomes ``_seconds``, milliseconds divided by 1,000), ``_total`` for the
counter, anything else outside ``[a-zA-Z0-9_]`` an underscore. Who reported a value is a label
(``rank``, ``node``, ``group``), never the record itself:

- a Stat window: one gauge per aggregation, ``tb_monitor_<stat>_<aggregation>`` (``VALUE``:
  ``tb_monitor_<stat>``), labelled with the process's ``rank`` (under torchrun) and ``node``;
- rank health (``rank.health``): ``tb_monitor_rank_step_seconds`` (mean step time
  of the rank's last window) and ``tb_monitor_rank_collective_seconds`` (seconds it spent in
  collectives in that window), by ``rank``; its heartbeat Stats are not exported;
- a torchelastic metric: the gauge ``tb_monitor_metric_<name>`` by ``group`` (its last value).
  Points that only say something happened are not series: ``<fn>.success``/``.failure`` (one
  per call of a ``@prof`` function) and torchelastic's ``workers.<role>.*`` flags and counts
  (its run's outcome, state and remaining restarts), which the next two series say instead;
- the job's health, from the first of torchelastic's agent records on:
  ``tb_monitor_restarts_total`` and ``tb_monitor_job_state{state=...}`` (1 for the current one
  of ``JOB_STATES``, 0 for the others), the restarts and state of the ``JobReport``
  (``tb_monitor.analysis.health``, what ``tb-monitor report`` prints) over the timeline records
  the sink has seen, worked out when scraped (``sinks.prometheus_job``).

What the sink holds is one value per series, and of the timeline only the records that can
change the job's restarts or state: it grows with the job's ranks, attempts and names, never
with its length. So a rank adds its two rank-health series, a node's agent its restarts (and
their ``_created``), one series per job state and one per ``@prof`` function torchelastic
times, and each Stat aggregation or metric that every rank adds costs one more series per rank
(``tests/sinks/test_prometheus.py`` counts them for a large job).

Under ``tb-monitor run --prometheus-port`` every process of a node writes its gauges to the
agent's ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multi-process mode, gauges
``mostrecent``) and the agent serves the node's aggregate, with its own series and the job's
(a collector's are never written there). A port already in use is one warning: the sink goes
on without serving, and training never notices.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tb_monitor import contract
from tb_monitor.sinks.base import TimelineRecord, Window
from tb_monitor.sinks.prometheus_job import JOB_STATES, JobCollector, JobRecords, job_state

if TYPE_CHECKING:
    from tb_monitor._event import Event
    from tb_monitor.elastic.metrics.api import MetricData

__all__ = [
    "JOB_STATES",
    "MULTIPROC_DIR_ENV",
    "PROMETHEUS_ENV",
    "PrometheusSink",
    "job_state",
    "series_name",
]

#: Set (to "1") by ``tb-monitor run --prometheus-port`` for its workers: their ``init`` adds a
#: ``PrometheusSink`` that writes to the agent's multi-process directory.
PROMETHEUS_ENV = "TB_MONITOR_PROMETHEUS"
#: Where prometheus_client's multi-process mode keeps every process's values (read at import).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Prefix of every series.
PREFIX = "tb_monitor_"

_TORCHELASTIC_FLAGS = ("torchelastic", "workers.")  # group, and name prefix
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # CamelCase -> camel_case
_UNSAFE = re.compile(r"[^a-z0-9]+")
_METRIC_HELP = "The last value of a torchelastic metric, by group."
_RANK_HELP = {
    "rank_step_seconds": "Mean step time in the rank's last window.",
    "rank_collective_seconds": "Seconds the rank spent in collectives in its last window.",
}
_log = logging.getLogger("tb_monitor")


def series_name(name: str) -> tuple[str, float]:
    """A record's name as a Prometheus name (without the prefix), and the factor that turns its
    value into the name's unit: ``"Agent._run.duration.ms"`` -> ``("agent_run_duration_seconds",
    0.001)``."""
    base = _UNSAFE.sub("_", _WORD.sub("_", name).lower()).strip("_") or "unnamed"
    for suffix, scale in (("_ms", 0.001), ("_s", 1.0)):
        if base.endswith(suffix):
            return base[: -len(suffix)] + "_seconds", scale
    return base, 1.0


def _process_labels() -> dict[str, str]:
    labels = {"node": socket.gethostname()}
    if "RANK" in os.environ:
        labels["rank"] = os.environ["RANK"]
    return labels


def _prometheus_client() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            f"the Prometheus sink needs prometheus_client ({exc}): "
            "pip install 'tb-monitor[prometheus]'"
        ) from None
    return prometheus_client


class PrometheusSink:
    """A ``Sink`` exposing what it receives as Prometheus series (see the module doc).

    ``port`` serves ``/metrics`` on ``addr`` (``0``: any free port, see ``port``); None serves
    nothing (a torchrun worker: its agent serves). ``registry`` (a prometheus_client
    ``CollectorRegistry``) holds the series; a new one by default, and one sink's only (a second
    sink on it is a ValueError: the job's series would be there twice). ``labels`` are the
    process's (default: ``node``, and ``rank`` under torchrun).

        sink = PrometheusSink(port=9100)
        tb_monitor.init("runs/exp", sinks=[sink])
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        addr: str = "0.0.0.0",
        registry: Any = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        client = _prometheus_client()
        self._client = client
        self.registry = client.CollectorRegistry() if registry is None else registry
        self._labels = dict(_process_labels() if labels is None else labels)
        self._families: dict[str, Any] = {}
        self._lock = threading.Lock()  # families are made once, by whichever thread is first
        # Per series (what it is of, and its own labels): the gauge and the factor to its unit.
        self._gauges: dict[tuple[str, ...], tuple[Any, float]] = {}
        self._job = JobRecords(f"agent-{self._labels.get('node', 'node')}")
        self.registry.register(JobCollector(self._job, PREFIX, self._labels))
        self._server: Any = None
        self.port: int | None = None  # the port it serves on
        if port is not None:
            self._serve(port, addr)

    # -- the Sink methods ---------------------------------------------------------------------

    def window(self, window: Window) -> None:
        aggregations = window.aggregations
        if window.stat == contract.RANK_STEP:
            count = aggregations.get("count", 0.0)
            if count > 0 and "sum" in aggregations:
                self._rank_gauge("rank_step_seconds").set(aggregations["sum"] / count)
        elif window.stat == contract.RANK_COLLECTIVE:
            if "sum" in aggregations:
                self._rank_gauge("rank_collective_seconds").set(aggregations["sum"])
        elif not window.stat.startswith(contract.RANK_PREFIX):  # heartbeats: a series each per rank
            for aggregation, value in aggregations.items():
                gauge, scale = self._stat_gauge(window.stat, aggregation)
                gauge.set(value * scale)

    def metric(self, metric: MetricData) -> None:
        _, group, name, value = metric
        if (
            name.endswith((".success", ".failure"))
            or (group, name[: len("workers.")]) == _TORCHELASTIC_FLAGS
            or not isinstance(value, (int, float))
        ):
            return
        gauge, scale = self._gauges.get(("metric", name, group)) or self._metric_gauge(name, group)
        gauge.set(value * scale)

    def event(self, event: Event) -> None:
        """Events other than Stat windows are points in time: nothing to export."""

    def timeline(self, record: TimelineRecord) -> None:
        """Keep what the record can change of the job's restarts and state, worked out when
        scraped. Records reach here on torchelastic's thread (the agent's), not training's."""
        self._job.add(record.kind, record.wall_time, record.fields)

    def flush(self) -> None:
        """Values are live: nothing is buffered."""

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __repr__(self) -> str:
        return f"<PrometheusSink port={self.port!r}>"

    # -- series -------------------------------------------------------------------------------

    def _rank_gauge(self, name: str) -> Any:
        """The gauge of one of rank health's two series."""
        found = self._gauges.get(("rank", name))
        if found is None:
            found = self._gauges[("rank", name)] = (self._series(name, _RANK_HELP[name]), 1.0)
        return found[0]

    def _stat_gauge(self, stat: str, aggregation: str) -> tuple[Any, float]:
        """The gauge of one aggregation of a Stat, and the factor to its unit."""
        key = ("stat", stat, aggregation)
        found = self._gauges.get(key)
        if found is None:
            base, scale = series_name(stat)
            name = base if aggregation == "value" else f"{base}_{aggregation}"
            help_text = f"{aggregation} of the Stat {stat!r} over its last window."
            found = self._gauges[key] = (self._series(name, help_text), scale)
        return found

    def _metric_gauge(self, name: str, group: str) -> tuple[Any, float]:
        base, scale = series_name(name)
        found = (self._series(f"metric_{base}", _METRIC_HELP, group=group), scale)
        self._gauges[("metric", name, group)] = found
        return found

    def _series(self, name: str, help_text: str, **labels: str) -> Any:
        """The gauge ``name`` of this process's labels and ``labels``; the family is made on
        first use."""
        family = self._families.get(name)
        if family is None:
            with self._lock:
                family = self._families.get(name) or self._new_family(name, help_text, labels)
        return family.labels(**self._labels, **labels) if self._labels or labels else family

    def _new_family(self, name: str, help_text: str, labels: Mapping[str, str]) -> Any:
        family = self._client.Gauge(
            PREFIX + name,
            help_text,
            [*self._labels, *labels],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self._families[name] = family
        return family

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, port: int, addr: str) -> None:
        try:
            self._server, _ = self._client.start_http_server(port, addr, self._served())
        except OSError as exc:
            _log.warning(
                "tb_monitor: Prometheus metrics are not served: port %s: %s (training goes on)",
                port,
                exc,
            )
            return
        self.port = self._server.server_port

    def _served(self) -> Any:
        """What ``/metrics`` shows: this sink's registry, or with ``$PROMETHEUS_MULTIPROC_DIR``
        the aggregate of every process writing there and this one's own series."""
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        if not directory or not os.path.isdir(directory):
            return self.registry
        from prometheus_client import multiprocess

        served = self._client.CollectorRegistry()
        node = multiprocess.MultiProcessCollector(None, path=directory)
        served.register(_NodeAggregate(node, self.registry))
        return served


class _NodeAggregate:
    """The node's series: what every process wrote to the multi-process directory, and this
    process's own series that are not there (the job's, which a collector makes; and all of
    them where prometheus_client was imported before the directory was set, so that this
    process's gauges live in its memory instead). A series in both is served once."""

    def __init__(self, node: Any, own: Any) -> None:
        self._node, self._own = node, own

    def collect(self) -> Iterator[Any]:
        families = {family.name: family for family in self._node.collect()}
        served = {_sample_key(s) for family in families.values() for s in family.samples}
        for family in self._own.collect():
            known = families.get(family.name)
            if known is None:
                families[family.name] = family
            else:
                known.samples.extend(s for s in family.samples if _sample_key(s) not in served)
        yield from families.values()


def _sample_key(sample: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample.name, tuple(sorted(sample.labels.items()))
