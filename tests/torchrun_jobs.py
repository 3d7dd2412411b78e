"""Real two-agent torchrun jobs for the acceptance tests, one per scenario, shared by the session.

A pytest plugin, loaded by ``pytest_plugins`` in tests/conftest.py, so the integration tests, the
restart analysis tests and the browser tests reuse one job per scenario (each takes ~20 s).

Two agents run as separate processes on 127.0.0.1 (``--nnodes 2 --nproc-per-node 2``, c10d
rendezvous, gloo on CPU), as two machines would. ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with
torch 2.13 a two-agent restart on one host is flaky when the rendezvous TCP store is shared with
the workers (torch issue 135712). ``LOGLEVEL=WARNING`` is set on purpose: torchelastic's event
loggers take their level from it, and our capture must not lose anything to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ports import free_port

from tb_monitor import contract
from tb_monitor.logdir import readers

SCRIPT = Path(__file__).parent / "integration" / "scripts" / "train_elastic.py"
#: The rank the restarted job's first attempt fails on (with a ValueError at step 3).
FAIL_RANK = 2
#: The rank the always-failing and the SIGKILLed jobs fail on.
OTHER_FAIL_RANK = 1
MAX_RESTARTS = 2
JOB_TIMEOUT = 120  # seconds; a job takes ~15-20 s here


def timeline(logdir: Path | str) -> list[dict]:
    """The timeline records under ``logdir`` so far (none before it exists)."""
    if isinstance(logdir, Path) and not logdir.exists():
        return []
    return list(readers.decode_timeline(readers.iter_timeline(logdir)))


def tb_monitor_command(*args: str) -> list[str]:
    """``tb-monitor ARGS`` with this interpreter."""
    return [sys.executable, "-m", "tb_monitor.cli", *args]


def tb_monitor_run(*args: str) -> list[str]:
    return tb_monitor_command("run", *args)


@dataclass
class Job:
    """A finished two-agent job: exit codes, output, and its logdir read back."""

    run_id: str
    returncodes: list[int]
    output: str
    events: list[dict]
    scalars: list[readers.Scalar]
    started: float
    logdir: str = field(default="")

    def runs(self, prefix: str) -> set[str]:
        return {e["run"] for e in self.events if e["run"].startswith(f"{self.run_id}/{prefix}")}

    def events_named(self, name: str) -> list[dict]:
        return [e for e in self.events if e["name"] == name]

    def scalar_values(self, run_prefix: str, tag: str) -> list[float]:
        return [
            s.value
            for s in self.scalars
            if s.run.startswith(f"{self.run_id}/{run_prefix}") and s.tag == tag
        ]


#: What a job's output says when it failed for the machine's sake (see the module's docstring).
MACHINE_FAULTS = ("eaddrinuse", "address already in use", "rendezvousclosederror")


def machine_fault(job: Job, expected: tuple[str, ...] = ()) -> str | None:
    """The machine's fault a failed job names in its output, or None (the job's own failure);
    ``expected``: what the job's own failure says anyway, so no machine's fault."""
    if all(code == 0 for code in job.returncodes):
        return None
    output = job.output.lower()
    return next((f for f in MACHINE_FAULTS if f in output and f not in expected), None)


def _retry(path: Path | str) -> Path | str:
    return path.with_name(f"{path.name}-retry") if isinstance(path, Path) else f"{path}-retry"


def run_job(
    logdir: Path | str, *script_args: str, max_restarts: int, expected: tuple[str, ...] = ()
) -> Job:
    """Run two agents of one job to the end and read the logdir back; once more, into
    ``LOGDIR-retry`` on a new port and run id (and a fresh ``--marker``, so a fail-once job fails
    again), when the first run failed for the machine's sake (``expected``: what the job's own
    failure prints, never a reason to run it again)."""
    job = run_job_once(logdir, *script_args, max_restarts=max_restarts)
    fault = machine_fault(job, expected)
    if fault is not None:
        warnings.warn(
            f"job {job.run_id} failed with {fault!r}, the machine's fault: run again", stacklevel=2
        )
        args = [
            _retry(arg) if before == "--marker" else arg
            for before, arg in zip(("", *script_args), script_args, strict=False)
        ]
        job = run_job_once(_retry(logdir), *map(str, args), max_restarts=max_restarts)
    return job


def two_agent_command(
    logdir: Path | str, script: Path | str, run_id: str, *script_args: str, max_restarts: int
) -> list[str]:
    """``tb-monitor run`` of one of a job's two agents (2 workers each, c10d on 127.0.0.1)."""
    return tb_monitor_run(
        "--logdir",
        str(logdir),
        *two_agent_args(script, run_id, *script_args, max_restarts=max_restarts),
    )


def two_agent_args(
    script: Path | str,
    run_id: str,
    *script_args: str,
    max_restarts: int,
    nnodes: int = 2,
    endpoint: str = "127.0.0.1",
) -> list[str]:
    """torchrun's arguments for one of a job's two agents (``nnodes`` of them: 2 workers each,
    c10d on ``endpoint``, a fresh port), the same under ``tb-monitor run`` and plain torchrun."""
    return [
        f"--nnodes={nnodes}",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}:{free_port()}",
        f"--rdzv-id={run_id}",
        f"--max-restarts={max_restarts}",
        str(script),
        *script_args,
    ]


def agent_env(**extra: str) -> dict[str, str]:
    """The agents' environment: ours, one thread per worker, no inherited logdir, and ``extra``."""
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1"}
    env.pop(contract.LOGDIR_ENV, None)
    return {**env, **extra}


def run_job_once(logdir: Path | str, *script_args: str, max_restarts: int) -> Job:
    """Run two agents of one job to the end and read the logdir back."""
    from conftest import need

    need("torch")
    run_id = f"job-{uuid.uuid4().hex[:8]}"
    command = two_agent_command(logdir, SCRIPT, run_id, *script_args, max_restarts=max_restarts)
    env = agent_env(LOGLEVEL="WARNING")
    started = time.time()
    agents = [
        subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # so a hung job is killed with all its workers
        )
        for _ in range(2)
    ]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=JOB_TIMEOUT)[0])
    finally:
        stop_agents(agents)
    return Job(
        run_id=run_id,
        returncodes=[agent.returncode for agent in agents],
        output="\n".join(outputs),
        events=timeline(logdir),
        scalars=list(readers.iter_scalars(logdir)),
        started=started,
        logdir=str(logdir),
    )


@pytest.fixture(scope="session")
def restarted(tmp_path_factory) -> Job:
    """A job whose rank 2 raises a ValueError at step 3 of its first attempt only."""
    tmp = tmp_path_factory.mktemp("restarted")
    args = ("--fail-rank", str(FAIL_RANK), "--fail", "once", "--marker", str(tmp / "failed"))
    args += ("--fail-exc", "ValueError", "--fail-step", "3")
    return run_job(tmp / "logs", *args, max_restarts=MAX_RESTARTS)


@pytest.fixture(scope="session")
def always_failing(tmp_path_factory) -> Job:
    """A job whose rank 1 raises a RuntimeError on every attempt (one restart allowed). Its
    end closes the rendezvous: the other agent's RendezvousClosedError is the job's own."""
    tmp = tmp_path_factory.mktemp("always")
    args = ("--fail-rank", str(OTHER_FAIL_RANK), "--fail", "always")
    return run_job(tmp / "logs", *args, max_restarts=1, expected=("rendezvousclosederror",))


@pytest.fixture(scope="session")
def sigkilled(tmp_path_factory) -> Job:
    """A job whose rank 1 is killed by SIGKILL on its first attempt (it records nothing itself)."""
    tmp = tmp_path_factory.mktemp("sigkill")
    args = ("--fail-rank", str(OTHER_FAIL_RANK), "--fail", "once", "--marker", str(tmp / "failed"))
    return run_job(tmp / "logs", *args, "--fail-how", "sigkill", max_restarts=MAX_RESTARTS)


@pytest.fixture(scope="session")
def restarted_on_s3(tmp_path_factory, s3_server) -> Job:
    """The restarted job (rank 2 raises a ValueError at step 3, then the group restarts), its
    logdir in a bucket of a real S3 server."""
    tmp = tmp_path_factory.mktemp("restarted-s3")
    with pytest.MonkeyPatch.context() as env:
        for name, value in s3_server.env.items():
            env.setenv(name, value)
        logdir = f"s3://{s3_server.make_bucket()}/jobs/exp7"
        args = ("--fail-rank", str(FAIL_RANK), "--fail", "once", "--marker", str(tmp / "failed"))
        args += ("--fail-exc", "ValueError", "--fail-step", "3")
        return run_job(logdir, *args, max_restarts=MAX_RESTARTS)


def stop_agents(agents: list[subprocess.Popen]) -> None:
    """Kill each agent still running with every process under it. torchrun starts each worker
    in a session of its own, so killing the agent's process group alone leaves the workers of a
    hung job running after the test (blocked in a collective for gloo's 30 minutes)."""
    for agent in agents:
        if agent.poll() is None:
            for pid in [*descendants(agent.pid), agent.pid]:  # found before any is reparented
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
