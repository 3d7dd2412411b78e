"""Closes on a busy machine: what is lost, how long a close takes, how much memory a writer holds.

``--writers`` (8) processes each record ``--keep-alives`` (128,000) rendezvous keep-alives with
the public API (``construct_and_record_rdzv_event``, 32 nodes a process, a distinct message each)
inside ``with tb_monitor.init(logdir)`` and exit, while one busy-loop process per core keeps the
CPU saturated. Run once with *today's* code (``git archive`` of ``--baseline``, its C
accelerators built as ours are) and once with this tree's, ``--rounds`` times each, the versions
taking turns to go first, on a local disk or (``--store s3``) a SeaweedFS bucket.

Printed per version: the events read back of those accepted, the closes that gave up, the
slowest close, the slowest recording, and the largest writer's peak RSS; then ours / today's.

    python benchmarks/bench_busy_close.py [--writers 8] [--keep-alives 128000] [--store s3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_scale import _baseline_source  # noqa: E402  (today's code, built as ours is)
from busy_cpu import LOWEST, busy_neighbours  # noqa: E402  (the tests' busy machine)

BASELINE = "1ea15f5"  # before closes waited for progress and runs were bounded
RECORDER = """
    import sys, time
    import tb_monitor
    from tb_monitor.elastic import events
    from tb_monitor.elastic.events import NodeState

    logdir, count = sys.argv[1], int(sys.argv[2])
    start = time.perf_counter()
    with tb_monitor.init(logdir):
        for i in range(count):
            node = i % 32
            events.construct_and_record_rdzv_event(
                run_id="job", message=f"keep-alive {i} of node {node}",
                node_state=NodeState.RUNNING, name="DynamicRendezvousHandler._keep_alive",
                hostname=f"node-{node}", pid=1000 + node,
            )
        recorded = time.perf_counter()
    closed = time.perf_counter()
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a writer would report the
    # benchmark's own peak at the fork (the events it read back in an earlier round).
    with open("/proc/self/status") as status:
        rss = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM:"))
    print(f"{recorded - start:.3f} {closed - recorded:.3f} {rss}", flush=True)
"""


@dataclass
class Figures:
    read_back: int
    accepted: int
    gave_up: int
    close_s: float
    record_s: float
    rss: int


def run(source: str, logdir: str, writers: int, keep_alives: int, env: dict) -> Figures:
    """One version's writers on a busy machine, then what reached the logdir."""
    env = {**env, "PYTHONPATH": source}
    script = textwrap.dedent(RECORDER)
    with busy_neighbours():
        procs = [
            subprocess.Popen(
                [*LOWEST, sys.executable, "-c", script, f"{logdir}/agent-{i}", str(keep_alives)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=source,
            )
            for i in range(writers)
        ]
        outs = [proc.communicate() for proc in procs]
    rows = [tuple(map(float, out.split())) for out, _ in outs]
    gave_up = sum("gave up" in err for _, err in outs)
    from tb_monitor.logdir import readers  # this tree's reader for both: it reads every version

    return Figures(
        read_back=len(readers.read_events(logdir)),
        accepted=writers * keep_alives,
        gave_up=gave_up,
        close_s=max(row[1] for row in rows),
        record_s=max(row[0] for row in rows),
        rss=int(max(row[2] for row in rows)),
    )


@contextlib.contextmanager
def store(kind: str, folder: str) -> Iterator[tuple[str, dict]]:
    """Where the logdirs go, and the environment the writers need to reach it."""
    if kind == "local":
        yield folder, dict(os.environ)
        return
    from object_store import benchmark_s3

    with benchmark_s3() as server:
        yield f"s3://{server.make_bucket()}", server.child_env()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--keep-alives", type=int, default=128_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--baseline", default=BASELINE, help="the git revision of 'today'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, store(args.store, folder) as (base, env):
        sources = {"today": _baseline_source(args.baseline, folder), "ours": str(ROOT)}
        results: dict[str, list[Figures]] = {"today": [], "ours": []}
        for round_ in range(args.rounds):
            order = ("today", "ours") if round_ % 2 == 0 else ("ours", "today")
            for side in order:
                logdir = f"{base}/{side}-{round_}"
                figures = run(sources[side], logdir, args.writers, args.keep_alives, env)
                results[side].append(figures)
                print(f"round {round_} {side}: {figures}", flush=True)
    print(
        f"\n{args.writers} writers x {args.keep_alives:,} keep-alives on a busy CPU "
        f"({args.store}), worst of {args.rounds} round(s)"
    )
    print(f"{'':24}{'today':>14}{'ours':>14}{'ours/today':>12}")

    def row(what: str, get, fmt: str = "{:,.0f}", worst=max) -> None:
        today, ours = (worst(get(f) for f in results[side]) for side in ("today", "ours"))
        ratio = f"{ours / today:12.3f}" if today else f"{'-':>12}"
        print(f"{what:<24}{fmt.format(today):>14}{fmt.format(ours):>14}{ratio}")

    row("read back", lambda f: f.read_back, worst=min)
    row("accepted", lambda f: f.accepted)
    row("closes that gave up", lambda f: f.gave_up)
    row("slowest close (s)", lambda f: f.close_s, "{:.2f}")
    row("slowest recording (s)", lambda f: f.record_s, "{:.1f}")
    row("peak writer RSS (MiB)", lambda f: f.rss / 2**20, "{:.1f}")


if __name__ == "__main__":
    main()
