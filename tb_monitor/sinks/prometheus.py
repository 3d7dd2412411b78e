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
- the job's health: ``tb_monitor_restarts_total`` and ``tb_monitor_job_state{state=...}``
  (1 for the current one of ``JOB_STATES``, 0 for the others), the restarts and state of the
  ``JobReport`` (``tb_monitor.analysis.health``, what ``tb-monitor report`` prints) over the
  timeline records the sink has seen, renewed when an agent's event arrives. Rendezvous
  keep-alives are not kept (most of a long job's records, and they change nothing).

So a rank adds 2 series, and a node's agent 7 (restarts, their ``_created``, 5 states) plus one
per ``@prof`` function torchelastic times (8 in torch 2.13): a 1,024-rank job on 128 nodes
exposes 2,048 + 128 x 15 = 3,968 series (``tests/sinks/test_prometheus.py`` counts them), and
each Stat aggregation or metric that every rank adds costs one more series per rank.

Under ``tb-monitor run --prometheus-port`` every process of a node writes its series to the
agent's ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multi-process mode,
gauges ``mostrecent``) and the agent serves the node's aggregate. A port already in use is one
warning: the sink goes on without serving, and training never notices.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tb_monitor import contract
from tb_monitor.sinks.base import TimelineRecord, Window

if TYPE_CHECKING:
    from tb_monitor._event import Event
    from tb_monitor.analysis.health import JobReport
    from tb_monitor.elastic.metrics.api import MetricData

__all__ = ["JOB_STATES", "MULTIPROC_DIR_ENV", "PROMETHEUS_ENV", "PrometheusSink", "job_state"]

#: Set (to "1") by ``tb-monitor run --prometheus-port`` for its workers: their ``init`` adds a
#: ``PrometheusSink`` that writes to the agent's multi-process directory.
PROMETHEUS_ENV = "TB_MONITOR_PROMETHEUS"
#: Where prometheus_client's multi-process mode keeps every process's values (read at import).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The job states ``tb_monitor_job_state`` tells apart.
JOB_STATES = ("rendezvous", "running", "failed", "terminated", "succeeded")
#: Prefix of every series.
PREFIX = "tb_monitor_"

_AGENT_EVENT = "torchelastic.worker.status."
_TORCHELASTIC_FLAGS = ("torchelastic", "workers.")  # group, and name prefix
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # CamelCase -> camel_case
_UNSAFE = re.compile(r"[^a-z0-9]+")
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


def job_state(report: JobReport) -> str:
    """The job's state in ``report``: ``succeeded``, ``failed`` or ``terminated`` (a signal to
    its agent: a preemption) once it has ended (its verdict), ``running`` while an attempt runs,
    else ``rendezvous`` (before the first attempt, and between an attempt that ended and the
    restart)."""
    if report.finished:
        return report.status if report.status in ("failed", "terminated") else "succeeded"
    running = any(job.status == "RUNNING" for job in report.jobs)
    return "running" if running else "rendezvous"


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
    ``CollectorRegistry``) holds the series; a new one by default. ``labels`` are the
    process's (default: ``node``, and ``rank`` under torchrun).
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
        # The timeline records seen, rendezvous keep-alives left out: what the job's report reads.
        self._rows: list[dict[str, Any]] = []
        self._rows_lock = threading.Lock()
        self._restarts = 0
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
                self._set(
                    "rank_step_seconds",
                    "Mean step time in the rank's last window.",
                    aggregations["sum"] / count,
                )
        elif window.stat == contract.RANK_COLLECTIVE:
            if "sum" in aggregations:
                self._set(
                    "rank_collective_seconds",
                    "Seconds the rank spent in collectives in its last window.",
                    aggregations["sum"],
                )
        elif not window.stat.startswith(contract.RANK_PREFIX):  # heartbeats: a series each per rank
            base, scale = series_name(window.stat)
            for aggregation, value in aggregations.items():
                name = base if aggregation == "value" else f"{base}_{aggregation}"
                help_text = f"{aggregation} of the Stat {window.stat!r} over its last window."
                self._set(name, help_text, value * scale)

    def metric(self, metric: MetricData) -> None:
        _, group, name, value = metric
        if (
            name.endswith((".success", ".failure"))
            or (group, name[: len("workers.")]) == _TORCHELASTIC_FLAGS
            or not isinstance(value, (int, float))
        ):
            return
        base, scale = series_name(name)
        help_text = "The last value of a torchelastic metric, by group."
        self._set(f"metric_{base}", help_text, value * scale, group=group)

    def event(self, event: Event) -> None:
        """Events other than Stat windows are points in time: nothing to export."""

    def timeline(self, record: TimelineRecord) -> None:
        """Keep the record for the job's report; an agent's event publishes the report's restarts
        and state. Records reach here on torchelastic's thread (the agent's), not training's."""
        fields = record.fields
        if record.kind == contract.RENDEZVOUS and contract.is_heartbeat(fields):
            return  # most of a long job's records, and they change nothing in the report
        row = {**fields, "kind": record.kind, "run": self._run, "wall_time": record.wall_time}
        with self._rows_lock:
            self._rows.append(row)
            if str(fields.get("name") or "").startswith(_AGENT_EVENT):
                self._publish(self._job_report())

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

    # -- the job's report ----------------------------------------------------------------------

    @property
    def _run(self) -> str:
        """The run the records stand in: this node's agent (``analysis.attempts.finished_jobs``
        reads an agent's verdict from its run)."""
        return f"agent-{self._labels.get('node', 'node')}"

    def _job_report(self) -> JobReport:
        from tb_monitor.analysis.health import report_of  # numpy: not at ``import tb_monitor``

        return report_of("", self._rows)

    def _publish(self, report: JobReport) -> None:
        """The report's restarts (a counter only grows) and its state, one of ``JOB_STATES``."""
        counter = self._series("restarts", "Times the job's workers were restarted.", "Counter")
        restarts = sum(job.restarts for job in report.jobs)
        if restarts > self._restarts:
            counter.inc(restarts - self._restarts)
            self._restarts = restarts
        state = job_state(report)
        for each in JOB_STATES:
            self._set("job_state", "1 for the job's current state.", each == state, state=each)

    # -- series -------------------------------------------------------------------------------

    def _set(self, name: str, help_text: str, value: float, **labels: str) -> None:
        self._series(name, help_text, "Gauge", **labels).set(value)

    def _series(self, name: str, help_text: str, kind: str, **labels: str) -> Any:
        """The series ``name`` (a ``kind`` family: Gauge or Counter) of this process's labels
        and ``labels``; the family is made on first use."""
        family = self._families.get(name)
        if family is None:
            with self._lock:
                family = self._families.get(name) or self._new_family(name, help_text, labels, kind)
        return family.labels(**self._labels, **labels) if self._labels or labels else family

    def _new_family(self, name: str, help_text: str, labels: Mapping[str, str], kind: str) -> Any:
        options = {"multiprocess_mode": "mostrecent"} if kind == "Gauge" else {}
        family = getattr(self._client, kind)(
            PREFIX + name, help_text, [*self._labels, *labels], registry=self.registry, **options
        )
        self._families[name] = family
        return family

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
        the aggregate of every process writing there (this one's too)."""
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        if not directory or not os.path.isdir(directory):
            return self.registry
        from prometheus_client import multiprocess, values

        served = self._client.CollectorRegistry()
        multiprocess.MultiProcessCollector(served, path=directory)
        if not values.ValueClass._multiprocess:  # imported before the directory was set
            served.register(self.registry)
        return served
