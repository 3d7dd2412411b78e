"""The Prometheus sink: scraped over real HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import logging
import socket
import urllib.request
from datetime import datetime, timedelta

import pytest
from conftest import need

import tb_monitor
from tb_monitor import contract
from tb_monitor.elastic import events, metrics
from tb_monitor.sinks.base import Window
from tb_monitor.sinks.prometheus import JOB_STATES, PROMETHEUS_ENV, PrometheusSink, series_name

need("prometheus_client")
from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

HOUR = timedelta(hours=1)
NOW = datetime(2026, 1, 1, 12)


def scrape(port: int) -> dict[str, list]:
    """``/metrics`` fetched over HTTP and parsed: the samples of each family, by name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def agent_event(state: str, source: events.EventSource, restarts: int) -> events.Event:
    """An event as torchelastic's agent records it (``_construct_event``)."""
    metadata = {"state": state, "agent_restarts": restarts, "group_rank": 0}
    return events.Event(f"torchelastic.worker.status.{state}", source, metadata=metadata)


@pytest.fixture
def served(logdir):
    """A monitor with a Prometheus sink on a free port of 127.0.0.1, as rank 3 of node n1."""
    sink = PrometheusSink(port=0, addr="127.0.0.1", labels={"node": "n1", "rank": "3"})
    with tb_monitor.init(logdir, sinks=[sink]):
        yield sink


def test_stat_windows_are_gauges_of_their_aggregations(served):
    """Each aggregation of a window is a gauge named after the Stat, with the process's labels."""
    with tb_monitor.Stat(
        "data/load_s", [tb_monitor.Aggregation.MEAN, tb_monitor.Aggregation.MAX], HOUR
    ) as s:
        s.add(1.0)
        s.add(3.0)
    families = scrape(served.port)
    labels = {"node": "n1", "rank": "3"}
    assert families["tb_monitor_data_load_seconds_mean"] == [
        ("tb_monitor_data_load_seconds_mean", labels, 2.0)
    ]
    assert families["tb_monitor_data_load_seconds_max"] == [
        ("tb_monitor_data_load_seconds_max", labels, 3.0)
    ]


def test_rank_health_is_step_and_collective_seconds_per_rank(served):
    """The step Stat becomes the mean step time, the collective Stat the seconds in
    collectives; heartbeat Stats are not series."""
    step = {"count": 4.0, "sum": 2.0, "min": 0.4, "max": 0.6}
    collective = {"count": 4.0, "sum": 0.5, "max": 0.2}
    for stat, values in ((contract.RANK_STEP, step), (contract.RANK_COLLECTIVE, collective)):
        served.window(Window(stat, {contract.stat_tag(stat, k): v for k, v in values.items()}, NOW))
    beat = contract.RANK_PREFIX + "steps"
    served.window(Window(beat, {contract.beat_tag("steps"): 40.0}, NOW))
    families = scrape(served.port)
    assert families["tb_monitor_rank_step_seconds"][0][1:] == ({"node": "n1", "rank": "3"}, 0.5)
    assert families["tb_monitor_rank_collective_seconds"][0][2] == 0.5
    assert not [name for name in families if name.startswith("tb_monitor_rank_steps")]


def test_metrics_are_gauges_by_group_in_base_units(served):
    """A metric is a gauge labelled with its group; milliseconds become seconds; per-call
    success/failure points are not series."""
    metrics.put_metric("SimpleElasticAgent._rendezvous.duration.ms", 1500, "torchelastic")
    metrics.put_metric("SimpleElasticAgent._rendezvous.success", 1, "torchelastic")
    metrics.put_metric("tokens", 512, "train")
    families = scrape(served.port)
    name = "tb_monitor_metric_simple_elastic_agent_rendezvous_duration_seconds"
    assert families[name] == [(name, {"node": "n1", "rank": "3", "group": "torchelastic"}, 1.5)]
    assert families["tb_monitor_metric_tokens"][0][1]["group"] == "train"
    assert not [name for name in families if name.endswith("success")]


def test_restarts_and_job_state_follow_the_agents_events(served):
    """The agent's events count restarts and set exactly one of the job states to 1."""
    events.record(agent_event("START", events.EventSource.WORKER, 0), "tensorboard")
    events.record(agent_event("FAILED", events.EventSource.WORKER, 0), "tensorboard")
    events.record(agent_event("RENDEZVOUS", events.EventSource.AGENT, 1), "tensorboard")
    events.record(agent_event("START", events.EventSource.WORKER, 1), "tensorboard")
    families = scrape(served.port)
    (restarts,) = families["tb_monitor_restarts"]
    assert restarts[0] == "tb_monitor_restarts_total" and restarts[2] == 1.0
    states = {labels["state"]: value for _, labels, value in families["tb_monitor_job_state"]}
    assert states == {state: float(state == "running") for state in JOB_STATES}


def test_a_port_in_use_is_one_warning_and_training_goes_on(logdir, caplog):
    """A busy port: a warning naming it, no exception, and the records still reach the sinks."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="tb_monitor"):
            sink = PrometheusSink(port=port, addr="127.0.0.1")
            with tb_monitor.init(logdir, sinks=[sink]) as monitor:
                metrics.put_metric("tokens", 1, "train")
                assert monitor.drops(sink) == 0
    assert sink.port is None
    assert f"port {port}" in caplog.text
    families = {
        f.name for f in text_string_to_metric_families(generate_latest(sink.registry).decode())
    }
    assert "tb_monitor_metric_tokens" in families


def test_names_follow_prometheus_rules():
    """Names are snake case in [a-z0-9_], with the unit spelled out and values scaled to it."""
    assert series_name(contract.RANK_STEP) == ("rank_step_seconds", 1.0)
    assert series_name("Agent._run.duration.ms") == ("agent_run_duration_seconds", 0.001)
    assert series_name("épochs/µ-batch") == ("pochs_batch", 1.0)
    assert series_name("///") == ("unnamed", 1.0)


def _rank_windows(sink: PrometheusSink) -> None:
    """Every window rank health closes in one window length (step, collective, heartbeats)."""
    stats = {
        contract.RANK_STEP: {"count": 100.0, "sum": 10.0, "min": 0.09, "max": 0.2},
        contract.RANK_COLLECTIVE: {"count": 100.0, "sum": 2.0, "max": 0.1},
        **{contract.RANK_PREFIX + beat: {"value": 1.0} for beat in contract.RANK_BEATS},
    }
    for stat, values in stats.items():
        sink.window(Window(stat, {f"{stat}.{k}": v for k, v in values.items()}, NOW))


def _agent_records(sink: PrometheusSink) -> None:
    """What a torchelastic agent sends: its @prof timings and worker-group metrics, and the
    events of a run restarted once."""
    from tb_monitor.sinks.base import TimelineRecord

    timed = [
        "SimpleElasticAgent._rendezvous",
        "SimpleElasticAgent._assign_worker_ranks",
        "SimpleElasticAgent._initialize_workers",
        "SimpleElasticAgent._restart_workers",
        "SimpleElasticAgent.run",
        "LocalElasticAgent._stop_workers",
        "LocalElasticAgent._start_workers",
        "LocalElasticAgent._monitor_workers",
    ]
    points = [(f"{fn}.{what}", 1) for fn in timed for what in ("success", "failure")]
    points += [(f"{fn}.duration.ms", 40) for fn in timed]
    flags = ["run_total", "run_success_with_retries", "flakiness", "remaining_restarts", "healthy"]
    points += [(f"workers.default.{flag}", 1) for flag in flags]
    for name, value in points:
        sink.metric(metrics.MetricData(0.0, "torchelastic", name, value))
    for state, restarts in (("START", 0), ("FAILED", 0), ("RENDEZVOUS", 1), ("SUCCEEDED", 1)):
        fields = {
            "name": f"torchelastic.worker.status.{state}",
            "metadata": {"agent_restarts": restarts},
        }
        sink.timeline(TimelineRecord(contract.AGENT, "{}", 0.0, fields))


def test_a_1024_rank_job_exposes_at_most_4000_series():
    """1,024 ranks (8 per node, 128 agents) with rank health and a restarted run: at most 4,000
    series, 2 of them per rank."""
    texts = []
    for rank in range(1024):
        sink = PrometheusSink(labels={"node": f"node-{rank // 8}", "rank": str(rank)})
        _rank_windows(sink)
        texts.append(generate_latest(sink.registry).decode())
    for node in range(128):
        sink = PrometheusSink(labels={"node": f"node-{node}"})
        _agent_records(sink)
        texts.append(generate_latest(sink.registry).decode())
    samples = [
        sample
        for text in texts
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    per_rank = [s for s in samples if "rank" in s.labels]
    assert len(per_rank) == 2 * 1024
    assert len(samples) <= 4000, len(samples)


def test_tb_monitor_run_workers_get_a_sink_that_serves_nothing(logdir, monkeypatch):
    """With ``$TB_MONITOR_PROMETHEUS`` (set by ``tb-monitor run --prometheus-port`` for its
    workers) ``init`` adds a Prometheus sink that keeps series for the agent to serve."""
    monkeypatch.setenv(PROMETHEUS_ENV, "1")
    with tb_monitor.init(logdir) as monitor:
        (sink,) = [s for s in monitor.sinks if isinstance(s, PrometheusSink)]
        metrics.put_metric("tokens", 3, "train")
    assert sink.port is None
    text = generate_latest(sink.registry).decode()
    assert [f.name for f in text_string_to_metric_families(text)] == ["tb_monitor_metric_tokens"]


@pytest.mark.parametrize(("fail_last", "state"), [(False, "succeeded"), (True, "failed")])
def test_restarts_and_job_state_are_the_job_reports(tmp_path, fail_last, state):
    """Fed a job's timeline records, the sink serves the restarts and the verdict of the job's
    JobReport (what ``tb-monitor report`` prints)."""
    from tb_monitor.analysis.health import job_report
    from tb_monitor.analysis.sources import timeline_rows
    from tb_monitor.sinks.base import TimelineRecord
    from tb_monitor.testing import generate_job

    job = generate_job(
        tmp_path / "logs", nodes=2, workers_per_node=2, restarts=2, fail_last=fail_last
    )
    sink = PrometheusSink(labels={"node": "n1"})
    for row in timeline_rows(job.logdir, "test"):
        fields = {name: row[name] for name in contract.FIELDS}
        sink.timeline(TimelineRecord(row["kind"], "{}", row["wall_time"], fields))
    families = {
        family.name: family.samples
        for family in text_string_to_metric_families(generate_latest(sink.registry).decode())
    }
    (report_job,) = job_report(job.logdir).jobs
    (restarts,) = [s for s in families["tb_monitor_restarts"] if s.name.endswith("_total")]
    assert restarts.value == report_job.restarts == 2
    states = {s.labels["state"]: s.value for s in families["tb_monitor_job_state"]}
    assert states == {each: float(each == state) for each in JOB_STATES}


@pytest.mark.parametrize("status", ["failed", "terminated", "succeeded"])
def test_a_finished_jobs_state_is_its_reports_verdict(status):
    """A finished job's state is its report's verdict: a preempted job reads terminated."""
    from types import SimpleNamespace

    from tb_monitor.sinks.prometheus import job_state

    assert job_state(SimpleNamespace(finished=True, status=status, jobs=())) == status
