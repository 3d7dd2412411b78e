"""Users' jobs under faults: shutdown time under ``tb-monitor run`` against plain torchrun, and
how long until a stalled rank is named, per script, side by side in one run (CPU, gloo).

The scripts are the unmodified users' scripts of tests/integration/scripts/users/ (a DDP script in
pytorch/examples' style, a Lightning ``Trainer``, a Hugging Face ``Trainer``), run as two-node jobs
(2 agents x 2 workers on 127.0.0.1) by ``tests/users_jobs.py``. Once rank 3 trains, a fault comes
from outside:

- ``node-kill9``: ``kill -9`` of the node of ranks 2 and 3 (agent and workers at once); the time
  is until the other node's agent and workers are gone;
- ``agent-sigterm``: SIGTERM to that node's agent (a scheduler's preemption); until every process
  of the job is gone;
- ``stall``: SIGSTOP of rank 3 (``tb-monitor run`` only); the time until ``tb-monitor report
  --json`` names rank 3 as the rank the job waits for (issue 26 asks for at most 30 s).

    python benchmarks/bench_users.py [--script ddp lightning hf] [--scenario NAME ...] [--rounds 1]

tests/integration/test_users_jobs.py asserts the same behaviours; benchmarks/bench_shutdown.py
times more shutdown scenarios of the DDP script alone.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from users_jobs import DDP, HF, LIGHTNING, SHORT_WINDOWS, UserJob, user_job  # noqa: E402

#: Each script, the arguments that keep it training, and what it prints once it trains.
SCRIPTS = {
    "ddp": (DDP, ("100000", "100000"), "Epoch 2 "),
    "lightning": (LIGHTNING, ("--max_epochs", "100000"), "All distributed processes registered"),
    "hf": (HF, ("--max_steps", "100000"), "'loss'"),
}
SCENARIOS = ("node-kill9", "agent-sigterm", "stall")
GIVE_UP_S = 120.0  # a shutdown or a stall not named by then is reported as "> GIVE_UP_S"
STALL_GIVE_UP_S = 60.0


def _node_kill9(job: UserJob) -> tuple[int, ...]:
    node = job.node_of(2)
    job.kill_node(node)
    return (1 - node,)


def _agent_sigterm(job: UserJob) -> tuple[int, ...]:
    job.signal_agent(job.node_of(2), signal.SIGTERM)
    return (0, 1)


FAULTS: dict[str, Callable[[UserJob], tuple[int, ...]]] = {
    "node-kill9": _node_kill9,
    "agent-sigterm": _agent_sigterm,
}


def shutdown_s(tmp: Path, script: str, fault: str, monitored: bool) -> float | None:
    """Seconds from the fault until the processes it leaves have exited (None: never did)."""
    path, args, training = SCRIPTS[script]
    with user_job(tmp, path, *args, monitored=monitored, env=SHORT_WINDOWS) as job:
        _training(job, training)
        nodes = FAULTS[fault](job)
        try:
            return job.wait(GIVE_UP_S, nodes=nodes)
        except TimeoutError:
            return None


def stall_named_s(tmp: Path, script: str) -> float | None:
    """Seconds from SIGSTOP of rank 3 until the report names it as waited for (None: never)."""
    path, args, training = SCRIPTS[script]
    with user_job(tmp, path, *args, env=SHORT_WINDOWS) as job:
        _training(job, training)
        job.signal_rank(3, signal.SIGSTOP)
        stopped = time.monotonic()
        while time.monotonic() - stopped < STALL_GIVE_UP_S:
            if 3 in job.report()["ranks"]["waited_for"]:
                return time.monotonic() - stopped
            time.sleep(0.5)
        return None


def _training(job: UserJob, training: str) -> None:
    """Wait until every rank has a worker and the script says it trains, and a little more."""
    job.wait_for_workers()
    job.wait_for_output(training)
    time.sleep(2.0)


def _seconds(values: list[float | None], give_up: float) -> str:
    done = [v for v in values if v is not None]
    if len(done) < len(values):
        return f"> {give_up:.0f} s"
    return f"{statistics.median(done):6.2f} s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", nargs="+", choices=SCRIPTS, default=["ddp"])
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-users-"))
    print(f"{'script':10} {'scenario':14} {'tb-monitor run':>15} {'torchrun':>10} {'ratio':>6}")
    for script in args.script:
        for scenario in args.scenario:
            runs = [f"{script}-{scenario}-{n}" for n in range(args.rounds)]
            if scenario == "stall":
                named = [stall_named_s(tmp / run, script) for run in runs]
                print(f"{script:10} {'stall named':14} {_seconds(named, STALL_GIVE_UP_S):>15}")
                continue
            ours, plain = [], []
            for run in runs:  # alternated, so load on the machine hits both alike
                plain.append(shutdown_s(tmp / run / "torchrun", script, scenario, False))
                ours.append(shutdown_s(tmp / run / "tb-monitor", script, scenario, True))
            ratio = "-"
            if None not in ours and None not in plain:
                ratio = f"{statistics.median(ours) / statistics.median(plain):5.2f}x"
            print(
                f"{script:10} {scenario:14} {_seconds(ours, GIVE_UP_S):>15} "
                f"{_seconds(plain, GIVE_UP_S):>10} {ratio:>6}",
                flush=True,
            )


if __name__ == "__main__":
    main()
