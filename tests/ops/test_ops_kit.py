"""The operators' kit (``ops/``): its alert rules pass promtool's check and unit tests, and the
dashboard and rules query only series a real Prometheus sink serves."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from conftest import need, need_program
from promql_names import (
    dashboard_queries,
    grafana_to_promql,
    metric_names,
    rule_queries,
    template_metric_names,
    template_queries,
)

from tb_monitor import contract
from tb_monitor.elastic.metrics.api import MetricData
from tb_monitor.sinks.base import TimelineRecord, Window
from tb_monitor.synthetic import job_records, rank_heartbeat_scalars, rank_window_scalars

yaml = need("yaml")
need("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tb_monitor.sinks.prometheus import PrometheusSink  # noqa: E402

OPS = Path(__file__).resolve().parents[2] / "ops"
RULES = OPS / "prometheus" / "tb-monitor.rules.yml"
RULES_TESTS = OPS / "prometheus" / "tb-monitor.rules.test.yml"
DASHBOARD = OPS / "grafana" / "tb-monitor.json"
ALERTS = {
    "TbMonitorNodeStalled",
    "TbMonitorRankStalled",
    "TbMonitorStraggler",
    "TbMonitorJobRestarted",
    "TbMonitorJobFailed",
}


@pytest.fixture(scope="module")
def promtool() -> str:
    """Prometheus's own promtool (Debian's ``prometheus`` package)."""
    return need_program("promtool", "prometheus")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def feed(sink: PrometheusSink) -> None:
    """What a rank's sink and its agent's get of a job restarted once: rank health's windows
    and heartbeats, torchelastic metrics (the agent's stall among them) and the job's
    timeline records."""
    windows: dict[str, dict[str, float]] = {}
    scalars = {**rank_window_scalars(0.4, 0.1, 20), **rank_heartbeat_scalars(20, 20, 20, 0.0, 0.1)}
    for tag, value in scalars.items():
        windows.setdefault(tag.rsplit(".", 1)[0], {})[tag] = value
    for stat, tags in windows.items():
        sink.window(Window(stat, tags, datetime(2026, 1, 1, 12)))
    sink.metric(MetricData(0.0, "torchelastic", "SimpleElasticAgent._rendezvous.duration.ms", 40))
    sink.metric(MetricData(0.0, contract.NODE_STALLED_GROUP, contract.NODE_STALLED, 12.0))
    for records in job_records(nodes=1, workers_per_node=2, restarts=1).values():
        for kind, payload, wall_time in records:
            fields = contract.decode_record(kind, json.loads(payload))
            sink.timeline(TimelineRecord(kind, payload, wall_time, fields))


@pytest.fixture(scope="module")
def scrape() -> str:
    """``/metrics`` of a real Prometheus sink fed a job, fetched over HTTP."""
    sink = PrometheusSink(port=0, addr="127.0.0.1", labels={"node": "n1", "rank": "0"})
    try:
        feed(sink)
        url = f"http://127.0.0.1:{sink.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()
    finally:
        sink.close()


@pytest.fixture(scope="module")
def exported(scrape) -> set[str]:
    """The names of the samples the sink serves, ours only (prometheus_client's own aside)."""
    return {
        sample.name
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name.startswith("tb_monitor_")
    }


def kit_rules() -> dict:
    return yaml.safe_load(RULES.read_text())


def alert_rules() -> list[dict]:
    return [rule for group in kit_rules()["groups"] for rule in group["rules"] if "alert" in rule]


def kit_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_rules_pass_promtool_check_rules(promtool):
    """promtool finds the rules file valid: YAML, PromQL, templates."""
    done = run(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_unit_tests_pass_promtool_test_rules(promtool):
    """Each alert fires on the series built to fire it and stays silent on a healthy job's."""
    done = run(promtool, "test", "rules", str(RULES_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_unit_tests_cover_every_alert_firing_and_silent():
    """Every alert of the rules file is tested firing and tested silent."""
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    silent = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert fired == silent == ALERTS == {r["alert"] for r in alert_rules()}


def test_every_alert_has_a_severity_and_says_which_job():
    """Each alert carries a severity label and a summary naming the job from its labels."""
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert "{{ $labels.job }}" in rule["annotations"]["summary"], rule["alert"]


def test_the_rules_and_their_tests_name_only_series_the_sink_serves(exported):
    """Every name in the rules' queries and in their unit tests' input series is served."""
    names = set().union(*map(metric_names, rule_queries(kit_rules())))
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    names |= {s["series"].split("{")[0] for test in tests for s in test["input_series"]}
    assert names, "no names read"
    assert names <= exported, names - exported


def test_the_dashboards_queries_name_only_series_the_sink_serves(exported):
    """Every name in the dashboard's panel and variable queries is served."""
    dashboard = kit_dashboard()
    names = set().union(*map(metric_names, dashboard_queries(dashboard)))
    names |= set().union(*map(template_metric_names, template_queries(dashboard)))
    assert names, "no names read"
    assert names <= exported, names - exported


def test_the_dashboards_queries_are_promql_promtool_accepts(promtool, tmp_path):
    """Each panel query, with Grafana's variables given values, passes promtool as a rule."""
    queries = [grafana_to_promql(q, {"job": "train"}) for q in dashboard_queries(kit_dashboard())]
    rules = [{"record": f"dashboard:query_{i}", "expr": q} for i, q in enumerate(queries)]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run(promtool, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(queries)} rules found" in done.stdout


def test_the_dashboard_is_templated_on_the_job():
    """A job variable lists the jobs' label values, and every panel query selects by it."""
    dashboard = kit_dashboard()
    (job,) = [v for v in dashboard["templating"]["list"] if v["name"] == "job"]
    assert job["type"] == "query"
    assert job["query"]["query"].startswith("label_values(") and job["query"]["query"].endswith(
        ", job)"
    )
    queries = list(dashboard_queries(dashboard))
    assert queries and all('job="$job"' in q for q in queries)


def test_a_real_scrape_passes_promtool_check_metrics(promtool, scrape):
    """promtool's lint of names, units and help finds nothing in what the sink serves."""
    done = subprocess.run(
        [promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tb_monitor_rank_step_seconds" in scrape and "tb_monitor_restarts_total" in scrape
