"""The Prometheus sink holds what its series need and uses only prometheus_client's public API."""

from __future__ import annotations

import ast
import gc
import json
import types
from datetime import datetime, timezone
from pathlib import Path

from conftest import need

from tb_monitor import contract
from tb_monitor.elastic.metrics.api import MetricData
from tb_monitor.sinks.base import TimelineRecord, Window
from tb_monitor.sinks.prometheus import PrometheusSink
from tb_monitor.synthetic import job_records, keep_alive_round

need("prometheus_client")

ROOT = Path(__file__).resolve().parents[2]
_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def held(root: object) -> int:
    """How many objects ``root`` holds: all it reaches, but for modules, classes and functions,
    which every sink shares."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return len(seen)


def rank_windows(at: float) -> list[Window]:
    """What one rank's health closes every window: step, collectives, heartbeats; and a Stat of
    the training script's own."""
    end = datetime.fromtimestamp(at, tz=timezone.utc)
    stats = {
        contract.RANK_STEP: {"count": 100.0, "sum": 10.0, "min": 0.09, "max": 0.2, "p50": 0.1},
        contract.RANK_COLLECTIVE: {"count": 100.0, "sum": 2.0, "max": 0.1},
        **{contract.RANK_PREFIX + beat: {"value": at} for beat in contract.RANK_BEATS},
        "data/load_s": {"mean": at % 1, "max": 1.0},
    }
    return [
        Window(stat, {contract.stat_tag(stat, k): v for k, v in values.items()}, end)
        for stat, values in stats.items()
    ]


def agent_metrics(at: float) -> list[MetricData]:
    """What torchelastic's agent puts each time it looks at its workers."""
    fn = "LocalElasticAgent._monitor_workers"
    return [
        MetricData(at, "torchelastic", f"{fn}.success", 1),
        MetricData(at, "torchelastic", f"{fn}.duration.ms", at % 7),
        MetricData(at, "torchelastic", "workers.default.remaining_restarts", 3),
        MetricData(at, "torchelastic", "workers.default.healthy", 1),
    ]


def keep_alive(at: float) -> list[TimelineRecord]:
    """One keep-alive round of the node's agent, as torch records it."""
    return [
        TimelineRecord("rendezvous", p, at, contract.decode_record("rendezvous", json.loads(p)))
        for p in keep_alive_round("job", "node-000", 4000)
    ]


def hours(sink: PrometheusSink, since: float, count: int) -> None:
    """``count`` hours of a node's records from ``since``: a keep-alive round every 5 s, rank
    windows every 10 s, the agent's metrics every second."""
    for second in range(int(since), int(since) + count * 3600):
        for metric in agent_metrics(second):
            sink.metric(metric)
        if second % 5 == 0:
            for record in keep_alive(second):
                sink.timeline(record)
        if second % 10 == 0:
            for window in rank_windows(second):
                sink.window(window)


def test_what_the_sink_holds_does_not_grow_with_time():
    """Two more hours of windows, metrics and keep-alives leave the sink holding as many objects."""
    sink = PrometheusSink(labels={"node": "n1", "rank": "0"})
    start = []
    for run_records in job_records(nodes=1, workers_per_node=2, restarts=0).values():
        for kind, payload, at in run_records:
            fields = contract.decode_record(kind, json.loads(payload))
            start.append(TimelineRecord(kind, payload, at, fields))
    since = max(r.wall_time for r in start if r.fields["state"] == "START")
    for record in sorted(start, key=lambda r: r.wall_time):
        if record.wall_time <= since:  # up to the workers' start
            sink.timeline(record)
    hours(sink, since, 1)
    families = list(sink.registry.collect())
    after_one = held(sink)
    hours(sink, since + 3600, 2)
    assert held(sink) == after_one
    assert [f.name for f in sink.registry.collect()] == [f.name for f in families]
    states = {
        s.labels["state"]: s.value for f in families for s in f.samples if "state" in s.labels
    }
    assert states["running"] == 1.0


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _private_reaches(tree: ast.AST) -> list[str]:
    """prometheus_client's private modules or names imported, and private attributes of
    anything but our own objects (``self._x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
            parts = [*node.module.split("."), *(alias.name for alias in node.names)]
            found += [f"from {node.module} import ..." for part in parts if _private(part)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if any(map(_private, a.name.split(".")))]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and not _ours(node.value):
            found.append(ast.unparse(node))
    return found


def test_the_sink_reaches_no_private_name_of_prometheus_client():
    """The sink's modules use no private module, name or attribute of prometheus_client."""
    paths = sorted((ROOT / "tb_monitor" / "sinks").glob("prometheus*.py"))
    assert len(paths) >= 2
    for path in paths:
        text = path.read_text()
        assert "prometheus_client._" not in text, path
        assert _private_reaches(ast.parse(text)) == [], path
