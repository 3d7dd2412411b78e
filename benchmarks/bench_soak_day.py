"""Soak: a simulated day of a large elastic job through every sink, memory per simulated hour.

Every node's agent and every rank get the sinks ``tb-monitor run --prometheus-port`` gives them:
a ``TensorboardSink`` (the ``AsyncWriter``, into ``<run id>/agent-<host>`` and
``<run id>/rank-<N>``) and a ``PrometheusSink``. They are fed, hour by hour in simulated time,
what ``bench_prometheus`` simulates at a real job's rates: torch's three records of each c10d
keep-alive, the agent's events and metrics, a restart, every rank's rank-health windows. The
sinks live in ``--procs`` writer processes, each holding its share of the nodes (as a node's
processes would); a real TensorBoard with the Timeline plugin reads the logdir as it grows.

Printed per simulated hour: the largest writer process's RSS, each TensorBoard's own RSS and its
data server's (read at rest, ``SETTLE_S`` after the Timeline shows the hour's events), the events
the Timeline shows against those written, and each RSS's growth over the hour before; at the end,
each one's growth after the first hour. Beside ours, a TensorBoard with the plugin of ``--anchor``
(a ``git archive`` of it) reads the same logdir. Goal: no growth after the first hour.

The data server keeps a reservoir of each scalar series (``--samples_per_plugin scalars=N``, 1000
by default): a rank's windows fill theirs in about three simulated hours, then it stays flat;
``--tb-args "--samples_per_plugin scalars=100"`` shows it filled within the first hour.

    python benchmarks/bench_soak_day.py                           # quick: 64 ranks, 6 hours
    python benchmarks/bench_soak_day.py --ranks 128 --hours 10    # ~8 min on 2 cores
    python benchmarks/bench_soak_day.py --ranks 1024 --hours 24   # the day: long
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The plugin before its analysis rows were bounded (one per sync of every keep-alive round).
ANCHOR = "d1fc9c2"
#: Seconds from the Timeline showing an hour's events to reading RSS: past the refresher's idle
#: poll (``POLL_S``), which trims the heap a request left.
SETTLE_S = 5.0
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_prometheus import RUN_ID, Node, Shape, agent_hour, rank_hour  # noqa: E402
from bench_scale import _baseline_source, _source  # noqa: E402
from bench_timeline import ROUTE, TensorBoard, _poll_until, _rss_bytes  # noqa: E402

from tb_monitor import contract  # noqa: E402
from tb_monitor.sinks.base import TimelineRecord  # noqa: E402
from tb_monitor.synthetic import DEFAULT_START  # noqa: E402


def _rss(pid: int | str = "self") -> int:
    """A process's resident bytes (this one's by default)."""
    with open(f"/proc/{pid}/status") as status:
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


def _rss_parts(pid: int) -> tuple[float, float]:
    """TensorBoard's own RSS and its children's (the data server, read helpers while they
    live), MiB."""
    own = _rss(pid)
    return own / 2**20, (_rss_bytes(pid) - own) / 2**20


class Viewer:
    """A TensorBoard on the logdir (ours, or with the plugin of an anchor's tree), its RSS
    per simulated hour."""

    def __init__(self, name: str, logdir: str, extra: list[str], src: str | None) -> None:
        self.name, self.rows = name, []
        with _source(src) if src else contextlib.nullcontext():
            self.tb = TensorBoard(logdir, *extra)

    def wait(self, written: int) -> int:
        """Wait until it shows ``written`` events; how many it shows."""
        polled = _poll_until(
            self.tb, ROUTE + "?width=1000", lambda d, w=written: d["total"] >= w, 900, 1.0
        )
        return polled.data["total"]

    def measure(self) -> tuple[float, float]:
        """Its RSS and its children's now, kept for the summary."""
        self.rows.append(_rss_parts(self.tb.process.pid))
        return self.rows[-1]


def _growth(values: list[float]) -> str:
    """Growth after the first hour: in all, and per hour."""
    if len(values) < 2:
        return "n/a"
    grew = values[-1] - values[0]
    return f"{grew:+.1f} MiB ({grew / (len(values) - 1):+.1f} MiB/h)"


def _report(viewers: list[Viewer], writer: list[float]) -> None:
    print("growth after the first hour:")
    print(f"  writer (largest process)      {_growth(writer)}")
    for viewer in viewers:
        own = [row[0] for row in viewer.rows]
        both = [row[0] + row[1] for row in viewer.rows]
        print(
            f"  TensorBoard {viewer.name:<8} process {_growth(own)}, with data server {_growth(both)}"
        )


def _soak(shape: Shape, procs: list, viewers: list[Viewer]) -> None:
    head = "".join(f" | {v.name:^8} TB MiB  data srv  growth" for v in viewers)
    print(f"{'hour':>4} {'writer MiB':>10} {'growth':>7}{head}  events shown / written")
    writer: list[float] = []
    for hour in range(1, shape.hours + 1):
        for proc in procs:
            proc.stdin.write(f"{hour}\n")
            proc.stdin.flush()
        rows = [json.loads(proc.stdout.readline()) for proc in procs]
        written = sum(row["timeline"] for row in rows)
        writer.append(max(row["rss"] for row in rows) / 2**20)
        line = f"{hour:>4} {writer[-1]:>10.1f} {_delta(writer):>7}"
        shown = min(viewer.wait(written) for viewer in viewers)
        time.sleep(SETTLE_S)  # at rest: a poll's passing buffers freed, the heap trimmed
        for viewer in viewers:
            own, server = viewer.measure()
            both = [r[0] + r[1] for r in viewer.rows]
            line += f" | {own:>15.1f} {server:>9.1f} {_delta(both):>7}"
        print(f"{line}  {shown:>9,} / {written:<9,}", flush=True)
    _report(viewers, writer)


def _delta(values: list[float]) -> str:
    return "" if len(values) < 2 else f"{values[-1] - values[-2]:+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--procs", type=int, default=2, help="writer processes")
    parser.add_argument(
        "--anchor", default=ANCHOR, help="a revision to read beside ours ('': none)"
    )
    parser.add_argument("--tb-args", default="", help="extra tensorboard flags, one string")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = Shape(args.ranks, args.per_node, args.hours, (1.5,), 0.1, False)
    if args.child:
        nodes, logdir = json.loads(args.child)
        child(shape, nodes, logdir)
        return
    with tempfile.TemporaryDirectory() as logdir, contextlib.ExitStack() as stack:
        shares = [list(range(shape.nodes))[p :: args.procs] for p in range(args.procs)]
        argv = [a for a in sys.argv[1:] if not a.startswith("--tb-args")]
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, *argv, "--child", json.dumps([share, logdir])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for share in shares
            if share
        ]
        [json.loads(proc.stdout.readline()) for proc in procs]
        extra = args.tb_args.split()
        print(f"{shape.ranks} ranks on {shape.nodes} nodes, {shape.hours} simulated hours; "
              f"tensorboard {' '.join(extra) or '(default flags)'}")  # fmt: skip
        viewers = [Viewer("ours", logdir, extra, None)]
        if args.anchor:
            src = _baseline_source(args.anchor, stack.enter_context(tempfile.TemporaryDirectory()))
            viewers.append(Viewer(args.anchor, logdir, extra, src))
        for viewer in viewers:
            stack.enter_context(viewer.tb)
        _soak(shape, procs, viewers)
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=600)


if __name__ == "__main__":
    os.environ.setdefault("TB_MONITOR_RANK_WINDOW_S", "10")
    main()
