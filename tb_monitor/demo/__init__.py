"""The demo: a real two-node elastic job with a restart, then TensorBoard on its logdir.

    tb-monitor demo [--logdir DIR] [--port N] [--no-serve]      (``tb_monitor.cli.demo``)

Two ``tb-monitor run`` agents (separate processes, rendezvous on 127.0.0.1) start two CPU workers
each running :mod:`tb_monitor.demo.train`; one worker fails on the first attempt, so the group
restarts once. A live line shows the attempt, running ranks, steps and events captured so far,
read back from the logdir itself. Then TensorBoard serves the logdir and the Timeline tab's URL
is printed (``--no-serve`` stops after the job). The agents' own output is kept in
``<logdir>/demo-logs/``.

The workers record rank health (``init(torch=True)``) in windows of ``RANK_WINDOW_S`` (0.5 s,
unless ``TB_MONITOR_RANK_WINDOW_S`` is set): the Ranks view and ``rank_windows`` have a few
windows per attempt to show.

The agents run with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with torch 2.13 a two-agent restart
on one host is flaky when the rendezvous TCP store is shared (pytorch/pytorch#135712).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import IO

from tb_monitor import contract, export
from tb_monitor.logdir import readers

__all__ = [
    "JOB_ARGS",
    "NODES",
    "RANK_WINDOW_S",
    "RUN_ID",
    "WORKERS",
    "Progress",
    "agent_command",
    "progress",
    "run_job",
    "serve",
]
_PROG = "tb-monitor demo"
#: Run id of the demo job: its runs are ``demo/agent-...`` and ``demo/rank-<N>``.
RUN_ID = "demo"
#: Nodes (agents) and workers per node.
NODES, WORKERS = 2, 2
#: Arguments of the training script (see ``tb_monitor.demo.train``).
#: The workers' rank-health window (``TB_MONITOR_RANK_WINDOW_S``), unless the environment sets one.
RANK_WINDOW_S = "0.5"
JOB_ARGS = ("--steps", "40", "--step-seconds", "0.05", "--fail-step", "10")
_STEPS = int(JOB_ARGS[1])
_STEP_TAG = contract.metric_tag("demo", "step")


# ---------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def agent_command(logdir: str, rdzv_port: int) -> list[str]:
    """The ``tb-monitor run`` command line of one of the demo's agents."""
    return [
        sys.executable,
        "-m",
        "tb_monitor.cli",
        "run",
        "--logdir",
        logdir,
        "--nnodes",
        str(NODES),
        "--nproc-per-node",
        str(WORKERS),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{rdzv_port}",
        "--rdzv-id",
        RUN_ID,
        "--max-restarts",
        "1",
        "-m",
        "tb_monitor.demo.train",
        *JOB_ARGS,
    ]


def run_job(logdir: str) -> int:
    """Run the job into ``logdir`` with a live progress line; the agents' exit code."""
    logs = os.path.join(logdir, "demo-logs")
    os.makedirs(logs, exist_ok=True)
    # Rank health in half-second windows (unless set): the demo's attempts last seconds.
    env = {
        "TB_MONITOR_RANK_WINDOW_S": RANK_WINDOW_S,
        **os.environ,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    command = agent_command(logdir, _free_port())
    agents: list[tuple[subprocess.Popen[bytes], IO[bytes], str]] = []
    try:
        for index in range(NODES):
            path = os.path.join(logs, f"agent-{index}.log")
            out = open(path, "wb")  # noqa: SIM115 (closed below, after the agent exits)
            agents.append(
                (
                    subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT),
                    out,
                    path,
                )
            )
        _watch(logdir, [agent for agent, _, _ in agents])
    finally:
        for agent, out, _ in agents:
            if agent.poll() is None:
                agent.terminate()  # torchrun stops its workers on SIGTERM
                try:
                    agent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait()
            out.close()
    failed = [(agent.returncode, path) for agent, _, path in agents if agent.returncode != 0]
    for code, path in failed:
        print(f"{_PROG}: an agent exited with code {code}; its output: {path}", file=sys.stderr)
    if failed:
        return 1
    _print_summary(logdir)
    return 0


@dataclass
class Progress:
    """What the logdir shows of the job so far."""

    attempt: int | None = None
    running_ranks: int = 0
    step: int = 0
    events: int = 0

    def line(self) -> str:
        """The compact live line: attempt, ranks, steps, events."""
        attempt = "-" if self.attempt is None else str(self.attempt)
        return (
            f"attempt {attempt} · ranks running {self.running_ranks}/{NODES * WORKERS} · "
            f"step {self.step}/{_STEPS} · {self.events} events"
        )


def progress(logdir: str) -> Progress:
    """Read the job's progress back from ``logdir`` (tolerates files being written)."""
    if not os.path.isdir(logdir):
        return Progress()
    rows = list(readers.iter_timeline_rows(logdir))
    marks = export.spans(rows)
    workers = [s for s in marks if s.lane.kind == contract.WORKER and s.end is not None]
    attempt = max((s.number for s in workers if s.number is not None), default=None)
    running = {s.lane for s in workers if s.open}
    last_step: dict[str, tuple[float, float]] = {}
    for scalar in readers.iter_scalars(logdir):
        if scalar.tag == _STEP_TAG and scalar.wall_time >= last_step.get(scalar.run, (0.0,))[0]:
            last_step[scalar.run] = (scalar.wall_time, scalar.value)
    steps = [int(value) + 1 for _, value in last_step.values()]
    return Progress(attempt, len(running), min(steps) if steps else 0, len(rows))


def _watch(logdir: str, agents: list[subprocess.Popen[bytes]]) -> None:
    """Show the live line until every agent has exited."""
    tty = sys.stdout.isatty()
    shown = ""
    last_print = 0.0
    while True:
        codes = [agent.poll() for agent in agents]
        # One agent failing leaves the other waiting in rendezvous for minutes: stop watching.
        done = all(code is not None for code in codes) or any(code for code in codes)
        line = progress(logdir).line()
        now = time.monotonic()
        if tty:
            print(f"\r{line}\033[K", end="", flush=True)
        elif line != shown and (now - last_print >= 2.0 or done):
            print(line, flush=True)  # a log-friendly line, at most every 2 s
            shown, last_print = line, now
        if done:
            break
        time.sleep(0.5)
    if tty:
        print()


def _print_summary(logdir: str) -> None:
    """One line per attempt, and for a failed one why (the job's ``JobReport``)."""
    from tb_monitor.analysis.health import job_report

    for attempt in job_report(logdir).attempts:
        print(
            f"attempt {attempt.attempt}: {attempt.outcome} after {attempt.duration_s:.1f} s; "
            f"rendezvous {attempt.rendezvous_s:.1f} s"
        )
        cause = attempt.root_cause
        if cause is not None:
            others = ", ".join(map(str, attempt.collateral_ranks)) or "none"
            lost = f"; {attempt.time_lost_s:.1f} s lost" if attempt.time_lost_s is not None else ""
            print(f"  root cause: rank {cause.rank}: {cause.reason}")
            stopped = "stopped by restart" if attempt.restarted else "stopped when the job ended"
            print(f"  {stopped}: ranks {others}{lost}")
    print(f"the whole story: tb-monitor report {logdir}")


# ---------------------------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------------------------


def serve(logdir: str, port: int) -> int:
    """Serve ``logdir`` with TensorBoard on 127.0.0.1 and print the Timeline URL; Ctrl-C stops."""
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        logdir,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    server = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}/"
    try:
        if not _wait_until_up(server, url, timeout=120):
            print(f"{_PROG}: TensorBoard did not start on port {port}", file=sys.stderr)
            return 1
        print(f"\nTimeline: {url}#{contract.PLUGIN_NAME}\n(Ctrl-C to stop)", flush=True)
        server.wait()
        return 0 if server.returncode in (0, -2) else 1
    except KeyboardInterrupt:
        return 0
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


#: Local URLs must not go through an HTTP proxy from the environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _wait_until_up(server: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with _NO_PROXY.open(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.3)
    return False
