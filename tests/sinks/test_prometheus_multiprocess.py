"""``tb-monitor run --prometheus-port``'s node: workers write to the multi-process directory, the
agent serves their aggregate with its own series and the job's, each series once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from conftest import need

from tb_monitor.sinks.prometheus import MULTIPROC_DIR_ENV

need("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: A worker: rank ``RANK``'s step time, written to the directory its environment names.
WORKER = """
    from datetime import datetime
    from tb_monitor import contract
    from tb_monitor.sinks.base import Window
    from tb_monitor.sinks.prometheus import PrometheusSink

    sink = PrometheusSink(labels={"node": "n1", "rank": RANK})
    stat = contract.RANK_STEP
    sink.window(Window(stat, {stat + ".count": 4.0, stat + ".sum": 2.0}, datetime.now()))
"""

#: What the agent records (``sink``: its PrometheusSink): a metric of its own, its workers' start.
AGENT_RECORDS = """
    from tb_monitor.elastic.metrics.api import MetricData
    from tb_monitor.sinks.base import TimelineRecord

    sink.metric(MetricData(0.0, "torchelastic", "SimpleElasticAgent._rendezvous.duration.ms", 40))
    for kind, source, state in (("agent", "AGENT", "RENDEZVOUS"), ("worker", "WORKER", "START")):
        name = "torchelastic.worker.status." + state
        fields = {"name": name, "state": state, "source": source, "metadata": {"agent_restarts": 0}}
        sink.timeline(TimelineRecord(kind, "{}", 1.0, fields))
"""

_SERVE = """
    import sys
    from tb_monitor.sinks.prometheus import PrometheusSink

    sink = PrometheusSink(port=0, addr="127.0.0.1", labels={"node": "n1"})
"""
_WAIT = """
    print(sink.port, flush=True)
    sys.stdin.readline()
    sink.close()
"""
#: An agent in its own process: serves the node, prints the port and exits on a line of input.
AGENT = "".join(textwrap.dedent(part) for part in (_SERVE, AGENT_RECORDS, _WAIT))


def _python(code: str, directory: Path, rank: str = "") -> subprocess.Popen:
    """``code`` run in a process of its own with the multi-process directory (``RANK``: rank)."""
    return subprocess.Popen(
        [sys.executable, "-c", f"RANK = {rank!r}\n{textwrap.dedent(code)}"],
        cwd=ROOT,
        env={**os.environ, MULTIPROC_DIR_ENV: str(directory)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _workers(directory: Path) -> None:
    for rank in ("0", "1"):
        worker = _python(WORKER, directory, rank)
        assert worker.wait(timeout=120) == 0


def _scrape(port: int) -> list[tuple[str, tuple, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _assert_the_node(samples: list[tuple[str, tuple, float]]) -> None:
    keys = [(name, labels) for name, labels, _ in samples]
    assert len(keys) == len(set(keys)), sorted(keys)
    values = {key: value for key, value in zip(keys, (v for *_, v in samples), strict=True)}
    for rank in ("0", "1"):
        assert values[("tb_monitor_rank_step_seconds", (("node", "n1"), ("rank", rank)))] == 0.5
    metric = "tb_monitor_metric_simple_elastic_agent_rendezvous_duration_seconds"
    assert values[(metric, (("group", "torchelastic"), ("node", "n1")))] == 0.04
    assert values[("tb_monitor_restarts_total", (("node", "n1"),))] == 0.0
    assert values[("tb_monitor_job_state", (("node", "n1"), ("state", "running")))] == 1.0


def test_an_agent_in_multiprocess_mode_serves_the_node_once(tmp_path):
    """An agent whose own gauges go to the directory serves each series once, the job's too."""
    _workers(tmp_path)
    agent = _python(AGENT, tmp_path)
    try:
        port = int(agent.stdout.readline())
        _assert_the_node(_scrape(port))
    finally:
        agent.communicate("\n", timeout=60)
    assert agent.returncode == 0


def test_an_agent_that_imported_prometheus_client_first_serves_the_node_once(tmp_path, monkeypatch):
    """An agent that imported prometheus_client before the directory serves each series once."""
    from tb_monitor.sinks.prometheus import PrometheusSink

    _workers(tmp_path)
    monkeypatch.setenv(MULTIPROC_DIR_ENV, str(tmp_path))
    sink = PrometheusSink(port=0, addr="127.0.0.1", labels={"node": "n1"})
    try:
        exec(textwrap.dedent(AGENT_RECORDS), {"sink": sink})
        _assert_the_node(_scrape(sink.port))
    finally:
        sink.close()


@pytest.fixture(autouse=True)
def _no_directory_leaks(monkeypatch):
    """Each test sets the directory for its own processes only."""
    monkeypatch.delenv(MULTIPROC_DIR_ENV, raising=False)
