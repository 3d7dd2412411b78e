"""The Prometheus sink over simulated hours of a large elastic job, beside the sink it replaced.

Each node of the job has the sinks ``tb-monitor run --prometheus-port`` gives it: its agent's
(torchelastic's rendezvous, agent and worker events; its metrics) and one per rank (the rank's
health windows). Fed at the rates a real job produces them, in simulated time:

- per node, every ``--monitor-interval`` (torchrun's default 0.1 s) the four metrics the agent
  puts each time it looks at its workers; every 5 s a keep-alive, the three records torch's c10d
  rendezvous makes for it (``tb_monitor.synthetic.keep_alive_round``);
- per rank, every 10 s the windows rank health closes (step, collectives, DDP's wait, six
  heartbeats);
- at the start, and at each restart (``--restarts``, hours into the job), every node's rendezvous
  round, its agent's events and its workers' START, after the failed attempt's ends as
  ``tb-monitor run``'s agent records them; and torchelastic's ``@prof`` timings.

``--one-sink`` hands every node's agent records to one sink (a process that sees the whole job:
the worst case for working out the job's state).

Per simulated hour: traced memory (tracemalloc, in a pass of its own, so that tracing slows
nothing else) and its growth over the hour, the CPU seconds the sinks took for the hour's records
(making them not counted), the slowest node's scrape (``generate_latest`` of the node's sinks
together, as its agent serves them) and the restarts and state served, for ours and the anchor:
the sink before this change (``git show ANCHOR:...``, run as a module of its own), each in a
process of its own. RSS is not shown: the records the benchmark makes and drops every hour
dwarf what either sink keeps. Goals: memory flat after the first hour, a scrape under 100 ms,
an hour with a restart costing about what one without does.

    python benchmarks/bench_prometheus.py                      # quick: under two minutes
    python benchmarks/bench_prometheus.py --ranks 1024 --hours 24
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
import types
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event
from tb_monitor.elastic.metrics.api import MetricData
from tb_monitor.sinks.base import TimelineRecord, Window
from tb_monitor.synthetic import DEFAULT_START, join_round, keep_alive_round

ANCHOR = "1ea15f5"  # the sink before it was bounded
ROOT = Path(__file__).resolve().parent.parent
RUN_ID = "day"
_AGENT = "torchelastic.worker.status."
_MONITOR = "LocalElasticAgent._monitor_workers"
_PROF = ("SimpleElasticAgent._rendezvous", "SimpleElasticAgent._initialize_workers")
#: The Stats rank health closes every window, and their aggregations.
_RANK_STATS = {
    contract.RANK_STEP: ("count", "sum", "min", "max", "p50", "p95"),
    contract.RANK_COLLECTIVE: ("count", "sum", "max"),
    contract.RANK_GRAD_WAIT: ("count", "sum", "max"),
    **{contract.RANK_PREFIX + beat: ("value",) for beat in contract.RANK_BEATS},
}
_TAGS = {stat: [contract.stat_tag(stat, a) for a in aggs] for stat, aggs in _RANK_STATS.items()}


@dataclass(frozen=True)
class Shape:
    """The simulated job and how it is fed."""

    ranks: int
    per_node: int
    hours: int
    restarts: tuple[float, ...]  # hours into the job
    monitor_s: float
    one_sink: bool

    @property
    def nodes(self) -> int:
        return max(1, self.ranks // self.per_node)


# ---------------------------------------------------------------------------------------------
# The records, in torch's own shapes
# ---------------------------------------------------------------------------------------------


class Node:
    """One node: its agent's identity and the records it makes."""

    def __init__(self, index: int, shape: Shape) -> None:
        self.index, self.shape = index, shape
        self.host, self.pid = f"node-{index:04d}", 4000 + 97 * index
        self.ranks = range(index * shape.per_node, (index + 1) * shape.per_node)
        self.beat = keep_alive_round(RUN_ID, self.host, self.pid)

    def event(self, state: str, at: float, attempt: int, rank: int | None = None, **extra):
        """A ``torchelastic.worker.status`` event as ``SimpleElasticAgent._construct_event``
        makes it: the agent's own, or (``rank``) one of its worker's."""
        md: dict[str, object] = {"group_world_size": self.shape.nodes, "entry_point": "train.py"}
        if rank is not None:
            md.update(local_rank=[rank % self.shape.per_node], role_rank=[rank])
            md.update(role_world_size=[self.shape.ranks], exit_code=[extra.get("exit_code")])
        metadata = {
            "run_id": RUN_ID, "global_rank": rank, "group_rank": self.index,
            "worker_id": None if rank is None else str(self.pid + 1 + rank), "role": "default",
            "hostname": self.host, "state": state, "total_run_time": 0, "rdzv_backend": "c10d",
            "raw_error": extra.get("raw_error"), "metadata": json.dumps(md),
            "agent_restarts": attempt, "duration_ms": extra.get("duration_ms"),
        }  # fmt: skip
        source, kind = ("AGENT", contract.AGENT) if rank is None else ("WORKER", contract.WORKER)
        event = Event(_AGENT + state, source, int(at * 1000), metadata)
        return record(kind, event.serialize(), at)

    def join(self, attempt: int, at: float) -> list:
        """The node's rendezvous round, its agent's events and its workers' START."""
        last = self.index == self.shape.nodes - 1
        payloads = join_round(
            RUN_ID, self.host, self.pid, attempt, self.index, self.shape.nodes, completes=last
        )
        found = [record(contract.RENDEZVOUS, p, at + 0.05 * k) for k, p in enumerate(payloads)]
        found.append(self.event("RENDEZVOUS", at + 2.01, attempt, duration_ms=2010.0))
        found.append(self.event("ASSIGN_WORKER_RANKS", at + 2.02, attempt, duration_ms=3.2))
        found += [self.event("START", at + 2.4, attempt, rank) for rank in self.ranks]
        found += [MetricData(at, "torchelastic", f"{fn}.duration.ms", 2400.0) for fn in _PROF]
        found += [MetricData(at, "torchelastic", f"{fn}.success", 1) for fn in _PROF]
        return found

    def fail(self, attempt: int, at: float, failing: int) -> list:
        """Its workers' ends in a failed attempt: worker 0 of node ``failing`` raised, the others
        were terminated (``tb-monitor run`` records them for every failed attempt)."""
        found = []
        for rank in self.ranks:
            if self.index == failing and rank == self.ranks[0]:
                error = json.dumps({"message": {"message": "RuntimeError: NCCL error"}})
                found.append(self.event("FAILED", at, attempt, rank, raw_error=error, exit_code=1))
            else:
                found.append(self.event("TERMINATED", at + 0.8, attempt, rank))
        return found


def record(kind: str, payload: str, at: float) -> TimelineRecord:
    """A record as an events destination hands it over: decoded afresh from torch's JSON."""
    return TimelineRecord(kind, payload, at, contract.decode_record(kind, json.loads(payload)))


def restart_at(shape: Shape, hour: int) -> list[tuple[int, float]]:
    """``(attempt, seconds into the hour)`` of the restarts in hour ``hour`` (1 is the first)."""
    return [
        (attempt, (when - (hour - 1)) * 3600.0)
        for attempt, when in enumerate(shape.restarts, start=1)
        if hour - 1 <= when < hour
    ]


def agent_hour(node: Node, hour: int) -> tuple[list, list[MetricData]]:
    """The node's agent records of hour ``hour``: its events, keep-alives and ``@prof`` timings
    in time order, and the metrics it puts each time it looks at its workers. Those are made
    once per value and handed over again (no sink reads a metric's time)."""
    shape, start = node.shape, DEFAULT_START + (hour - 1) * 3600.0
    due = {int(s): (attempt, s) for attempt, s in restart_at(shape, hour)}
    found = []
    for second in range(3600):
        if second in due:
            attempt, offset = due[second]
            failing = (attempt * 7 + 3) % shape.nodes
            found += node.fail(attempt - 1, start + offset, failing)
            found += node.join(attempt, start + offset + 3.0)
        if second % 5 == 0:
            at = start + second
            found += [
                record(contract.RENDEZVOUS, p, at + 0.002 * k) for k, p in enumerate(node.beat)
            ]
    looks = [
        [
            MetricData(start, "torchelastic", f"{_MONITOR}.success", 1),
            MetricData(start, "torchelastic", f"{_MONITOR}.duration.ms", 0.4 + each),
            MetricData(start, "torchelastic", "workers.default.remaining_restarts", 3),
            MetricData(start, "torchelastic", "workers.default.healthy", 1),
        ]
        for each in range(3)
    ]
    per_hour = round(3600 / shape.monitor_s)
    return found, (looks[0] + looks[1] + looks[2]) * (per_hour // 3)


def rank_hour(hour: int) -> list[list[Window]]:
    """A rank's windows of hour ``hour``, ten seconds at a time (every rank's alike: no sink
    keeps a window, each sets its own series)."""
    start = DEFAULT_START + (hour - 1) * 3600.0
    found = []
    for second in range(10, 3601, 10):
        end = datetime.fromtimestamp(start + second, tz=timezone.utc)
        values = (0.1 + second % 7 / 100, float(second), 0.05, 0.2, 0.1, 0.15)
        found.append(
            [
                Window(stat, dict(zip(tags, values, strict=False)), end)
                for stat, tags in _TAGS.items()
            ]
        )
    return found


# ---------------------------------------------------------------------------------------------
# One implementation, fed hour by hour (in a process of its own)
# ---------------------------------------------------------------------------------------------


def sink_module(implementation: str) -> types.ModuleType:
    """Ours, or the anchor's module as it was at ``ANCHOR``."""
    if implementation == "ours":
        from tb_monitor.sinks import prometheus

        return prometheus
    path = "tb_monitor/sinks/prometheus.py"
    source = subprocess.run(
        ["git", "show", f"{ANCHOR}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("anchor_prometheus")
    exec(compile(source, f"{ANCHOR}:{path}", "exec"), module.__dict__)
    return module


class Job:
    """Every sink of the simulated job: per node its agent's and its ranks'."""

    def __init__(self, module: types.ModuleType, shape: Shape) -> None:
        from prometheus_client import CollectorRegistry

        self.shape, self.nodes = shape, [Node(i, shape) for i in range(shape.nodes)]
        sink = module.PrometheusSink
        one = sink(labels={"node": "job"}) if shape.one_sink else None
        self.agents = [one or sink(labels={"node": n.host}) for n in self.nodes]
        self.ranks = [
            [sink(labels={"node": n.host, "rank": str(r)}) for r in n.ranks] for n in self.nodes
        ]
        self.served = []  # per node, what its agent serves: its sinks together
        for agent, ranks in zip(self.agents, self.ranks, strict=True):
            registry = CollectorRegistry()
            for each in (agent, *ranks):
                registry.register(each.registry)
            self.served.append(registry)

    def start(self) -> None:
        for node, agent in zip(self.nodes, self.agents, strict=True):
            feed(agent, node.join(0, DEFAULT_START - 30.0))

    def hour(self, hour: int) -> float:
        """Feed hour ``hour``; the CPU seconds the sinks took (making the records not counted)."""
        windows, spent = rank_hour(hour), 0.0
        for node, agent, ranks in zip(self.nodes, self.agents, self.ranks, strict=True):
            records, looks = agent_hour(node, hour)
            begin = time.process_time()
            feed(agent, records)
            metric = agent.metric
            for each in looks:
                metric(each)
            for sink in ranks:
                window = sink.window
                for batch in windows:
                    for each in batch:
                        window(each)
            spent += time.process_time() - begin
        return spent

    def scrape_ms(self) -> float:
        """The slowest node's ``/metrics``, rendered."""
        from prometheus_client import generate_latest

        slowest = 0.0
        for registry in self.served[:1] if self.shape.one_sink else self.served:
            begin = time.perf_counter()
            generate_latest(registry)
            slowest = max(slowest, time.perf_counter() - begin)
        return slowest * 1000.0

    def state(self) -> tuple[float | None, str | None]:
        """Node 0's restarts and job state, as served."""
        samples = {
            (s.name, s.labels.get("state")): s.value
            for family in self.served[0].collect()
            for s in family.samples
        }
        states = [state for (name, state), v in samples.items() if name.endswith("job_state") and v]
        return samples.get(("tb_monitor_restarts_total", None)), (states or [None])[0]


def feed(sink, records: list) -> None:
    timeline, metric = sink.timeline, sink.metric
    for each in records:
        (timeline if type(each) is TimelineRecord else metric)(each)


def measured(implementation: str, shape: Shape, traced: bool) -> Iterator[dict]:
    """Per hour (0: the sinks made and the job started) what one implementation took: traced
    memory when ``traced`` (then nothing else), else CPU and scrape. The analysis is imported
    first (the anchor imports it at its first agent record, ours at its first scrape)."""
    import tb_monitor.analysis.health  # noqa: F401

    module = sink_module(implementation)
    if traced:
        tracemalloc.start()
    job = Job(module, shape)
    job.start()
    for hour in range(shape.hours + 1):
        cpu = job.hour(hour) if hour else 0.0
        gc.collect()
        row: dict = {"hour": hour, "restart": bool(hour and restart_at(shape, hour))}
        if traced:
            row["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
        else:
            row.update(cpu_s=cpu, scrape_ms=job.scrape_ms())
            row["restarts"], row["state"] = job.state()
        yield row


# ---------------------------------------------------------------------------------------------
# Both side by side
# ---------------------------------------------------------------------------------------------


def _child(implementation: str, shape: Shape, traced: bool) -> list[dict]:
    """One implementation's rows, measured in a process of its own."""
    given = json.dumps(asdict(shape))
    command = [sys.executable, __file__, "--child", implementation, "--shape", given]
    if traced:
        command.append("--traced")
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"{implementation} failed:\n{out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def _times(ours: float, anchor: float) -> str:
    return f"{anchor / ours:6.1f}x" if ours > 0 else f"{'-':>7}"


def _memory(rows: dict[str, list[dict]], hour: int) -> str:
    """The hour's traced memory of both, each with its growth over the hour, and their ratio."""
    if "traced_mib" not in rows["ours"][hour]:
        return f"{'(not traced)':^44}"
    now = [rows[name][hour]["traced_mib"] for name in ("ours", "anchor")]
    before = [rows[name][hour - 1]["traced_mib"] if hour else 0.0 for name in ("ours", "anchor")]
    (o, a), (po, pa) = now, before
    return f"{o:7.1f} ({o - po:+6.2f}) {a:8.1f} ({a - pa:+7.2f}) {_times(o, a)}"


def report(shape: Shape, rows: dict[str, list[dict]]) -> None:
    """The per-hour table, ours beside the anchor, then what the goals ask of each."""
    print(f"{'':5}| {'traced MiB (+ over the hour)':^44} | {'CPU s, the sinks':^24} |"
          f" {'scrape ms':^15} | restarts, state")  # fmt: skip
    print(f"hour | {'ours':>16} {'anchor':>17} {'a/o':>7} | {'ours':>7} {'anchor':>8} {'a/o':>7} |"
          f" {'ours':>7} {'anchor':>7} | ours / anchor (node 0)")  # fmt: skip
    for hour in range(shape.hours + 1):
        o, a = rows["ours"][hour], rows["anchor"][hour]
        print(
            f"{hour:4d}{'*' if o['restart'] else ' '}| {_memory(rows, hour)} |"
            f" {o['cpu_s']:7.2f} {a['cpu_s']:8.2f} {_times(o['cpu_s'], a['cpu_s'])} |"
            f" {o['scrape_ms']:7.1f} {a['scrape_ms']:7.1f} |"
            f" {o['restarts']:g} {o['state']} / {a['restarts']:g} {a['state']}"
        )  # fmt: skip
    print("(* an hour with a restart; hour 0: the sinks made and the job started)")
    for name in ("ours", "anchor"):
        print(f"{name:>6}: {_goals(rows[name])}")


def _goals(rows: list[dict]) -> str:
    """Memory growth per hour after the first (calm hours, restart hours), the slowest scrape,
    and what a restart hour costs against a calm one (medians)."""
    said = []
    later = rows[2:]
    if later and "traced_mib" in later[0]:
        for restart, what in ((False, "a calm hour"), (True, "a restart hour")):
            grew = [
                r["traced_mib"] - rows[r["hour"] - 1]["traced_mib"]
                for r in later
                if r["restart"] == restart
            ]
            if grew:
                said.append(f"memory {statistics.mean(grew):+.3f} MiB in {what}")
    said.append(f"scrape at most {max(r['scrape_ms'] for r in rows[1:]):.1f} ms")
    calm = [r["cpu_s"] for r in rows[1:] if not r["restart"]]
    busy = [r["cpu_s"] for r in rows[1:] if r["restart"]]
    if calm and busy:
        ratio = statistics.median(busy) / statistics.median(calm)
        said.append(f"a restart hour costs {ratio:.2f}x a calm one")
    return "; ".join(said)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--per-node", type=int, default=8, help="ranks per node")
    parser.add_argument("--hours", type=int, default=3)
    parser.add_argument(
        "--restarts", help="hours into the job, e.g. 1.5,16.5 (default: 1.5, and 2/3 in from 6 h)"
    )
    parser.add_argument("--monitor-interval", type=float, default=0.1, help="seconds (torchrun's)")
    parser.add_argument("--one-sink", action="store_true", help="every node's records to one sink")
    parser.add_argument("--no-trace", action="store_true", help="skip the traced-memory pass")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        given = json.loads(args.shape)
        shape = Shape(**{**given, "restarts": tuple(given["restarts"])})
        for row in measured(args.child, shape, args.traced):
            print(json.dumps(row), flush=True)
        return
    hours = args.hours
    restarts = args.restarts or ("1.5" if hours < 6 else f"1.5,{2 * hours // 3 + 0.5}")
    when = tuple(sorted({float(h) for h in restarts.split(",") if h.strip()}))
    shape = Shape(args.ranks, args.per_node, hours, when, args.monitor_interval, args.one_sink)
    sinks = "one sink for every agent" if shape.one_sink else "a sink per agent and per rank"
    print(
        f"bench_prometheus: {shape.ranks} ranks on {shape.nodes} nodes, {hours} simulated hours,"
        f" restarts at {', '.join(f'{h:g} h' for h in when)}; {sinks}; anchor {ANCHOR}"
    )
    begin = time.perf_counter()
    rows = {name: _child(name, shape, traced=False) for name in ("ours", "anchor")}
    for name in () if args.no_trace else ("ours", "anchor"):
        for row, traced in zip(rows[name], _child(name, shape, traced=True), strict=True):
            row["traced_mib"] = traced["traced_mib"]
    report(shape, rows)
    print(f"({time.perf_counter() - begin:.0f} s)")


if __name__ == "__main__":
    main()
