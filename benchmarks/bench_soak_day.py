"""Soak: a simulated day of a large elastic job through every sink, memory per simulated hour.

Every node's agent and every rank get the sinks ``tb-monitor run --prometheus-port`` gives them:
a ``TensorboardSink`` (the ``AsyncWriter``, into ``<run id>/agent-<host>`` and
``<run id>/rank-<N>``) and a ``PrometheusSink``. They are fed, hour by hour in simulated time,
what ``bench_prometheus`` simulates at a real job's rates: torch's three records of each c10d
keep-alive, the agent's events and metrics, a restart, every rank's rank-health windows. The
sinks live in ``--procs`` writer processes, each holding its share of the nodes (as a node's
processes would); a real TensorBoard with the Timeline plugin reads the logdir as it grows.

Printed per simulated hour: the largest writer process's RSS, TensorBoard's RSS (its data server
included), the events the Timeline shows against those written, and each RSS's growth over the
hour before. Goal: no growth after the first hour.

    python benchmarks/bench_soak_day.py                          # quick: 64 ranks, 6 hours
    python benchmarks/bench_soak_day.py --ranks 1024 --hours 24   # the day: long
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_prometheus import RUN_ID, Node, Shape, agent_hour, rank_hour  # noqa: E402
from bench_timeline import ROUTE, TensorBoard, _poll_until, _rss_bytes  # noqa: E402

from tb_monitor import contract  # noqa: E402
from tb_monitor.sinks.base import TimelineRecord  # noqa: E402
from tb_monitor.synthetic import DEFAULT_START  # noqa: E402


def _rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS"))


class Writers:
    """The sinks of some nodes of the job, in this process: per node its agent's, per rank its
    own, each a TensorBoard sink and a Prometheus sink."""

    def __init__(self, shape: Shape, nodes: list[int], logdir: str) -> None:
        from tb_monitor.sinks.prometheus import PrometheusSink
        from tb_monitor.sinks.tensorboard import TensorboardSink

        self.nodes = [Node(i, shape) for i in nodes]
        self.agents, self.ranks = [], []
        for node in self.nodes:
            agent_dir = f"{logdir}/{contract.agent_run_name(RUN_ID)}-{node.host}"
            self.agents.append(
                [TensorboardSink(agent_dir), PrometheusSink(labels={"node": node.host})]
            )
            self.ranks.append(
                [
                    [
                        TensorboardSink(f"{logdir}/{RUN_ID}/rank-{rank}"),
                        PrometheusSink(labels={"node": node.host, "rank": str(rank)}),
                    ]
                    for rank in node.ranks
                ]
            )
        start = [node.join(0, DEFAULT_START - 30.0) for node in self.nodes]
        self.timeline = sum(
            self._feed(sinks, records) for sinks, records in zip(self.agents, start, strict=True)
        )

    @staticmethod
    def _feed(sinks: list, records: list) -> int:
        timeline = 0
        for each in records:
            if type(each) is TimelineRecord:
                timeline += 1
                for sink in sinks:
                    sink.timeline(each)
            else:
                for sink in sinks:
                    sink.metric(each)
        return timeline

    def hour(self, hour: int) -> int:
        """Feed hour ``hour`` and flush every sink; the timeline records it held."""
        windows, timeline = rank_hour(hour), 0
        for node, agent, ranks in zip(self.nodes, self.agents, self.ranks, strict=True):
            records, looks = agent_hour(node, hour)
            timeline += self._feed(agent, records) + self._feed(agent, looks)
            for sinks in ranks:
                for batch in windows:
                    for window in batch:
                        for sink in sinks:
                            sink.window(window)
        for sinks in [*self.agents, *(s for ranks in self.ranks for s in ranks)]:
            for sink in sinks:
                sink.flush()
        self.timeline += timeline
        return self.timeline


def child(shape: Shape, nodes: list[int], logdir: str) -> None:
    """A writer process: an hour per line on stdin, a JSON line per hour on stdout."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # an event file per writer
    writers = Writers(shape, nodes, logdir)
    print(json.dumps({"hour": 0, "rss": _rss(), "timeline": writers.timeline}), flush=True)
    for line in sys.stdin:
        hour = int(line)
        timeline = writers.hour(hour)
        print(json.dumps({"hour": hour, "rss": _rss(), "timeline": timeline}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--procs", type=int, default=2, help="writer processes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = Shape(args.ranks, args.per_node, args.hours, (1.5,), 0.1, False)
    if args.child:
        nodes, logdir = json.loads(args.child)
        child(shape, nodes, logdir)
        return
    with tempfile.TemporaryDirectory() as logdir:
        shares = [list(range(shape.nodes))[p :: args.procs] for p in range(args.procs)]
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, *sys.argv[1:], "--child", json.dumps([share, logdir])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for share in shares
            if share
        ]
        rows = [json.loads(proc.stdout.readline()) for proc in procs]
        print(f"{shape.ranks} ranks on {shape.nodes} nodes, {shape.hours} simulated hours")
        print(f"{'hour':>4} {'writer RSS MiB':>15} {'growth':>8} {'TB RSS MiB':>11} {'growth':>8} "
              f"{'events shown / written':>24}")  # fmt: skip
        last_writer = last_tb = None
        with TensorBoard(logdir) as tb:
            for hour in range(1, shape.hours + 1):
                for proc in procs:
                    proc.stdin.write(f"{hour}\n")
                    proc.stdin.flush()
                rows = [json.loads(proc.stdout.readline()) for proc in procs]
                written = sum(row["timeline"] for row in rows)
                polled = _poll_until(
                    tb, ROUTE + "?width=1000", lambda d, w=written: d["total"] >= w, 900, 1.0
                )
                writer_rss = max(row["rss"] for row in rows) / 2**20
                tb_rss = _rss_bytes(tb.process.pid) / 2**20
                grew = [
                    "" if last is None else f"{now - last:+8.1f}"
                    for now, last in ((writer_rss, last_writer), (tb_rss, last_tb))
                ]
                print(
                    f"{hour:>4} {writer_rss:>15.1f} {grew[0]:>8} {tb_rss:>11.1f} {grew[1]:>8} "
                    f"{polled.data['total']:>11,} / {written:<11,}",
                    flush=True,
                )
                last_writer, last_tb = writer_rss, tb_rss
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=600)


if __name__ == "__main__":
    os.environ.setdefault("TB_MONITOR_RANK_WINDOW_S", "10")
    main()
