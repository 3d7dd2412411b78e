"""Users' training scripts run as real two-node jobs, with faults injected from outside.

The acceptance harness of issue 26: the scripts under ``integration/scripts/users/`` know
nothing of tb_monitor; a ``UserJob`` starts one under ``tb-monitor run`` or plain ``torchrun``
(two agents on 127.0.0.1, 2 workers each, as ``torchrun_jobs`` starts them), finds a rank's
worker process, and does to it what a machine or a scheduler would: ``kill -9`` of a whole node
(agent and workers), SIGTERM to an agent, SIGSTOP of one rank. It times how long the job takes
to end after the fault, and reads ``tb-monitor report --json``. Each agent runs in a directory of
its own, as on two machines (the DDP script saves its snapshot to the working directory).

Used by ``tests/integration/test_users_jobs.py`` and ``benchmarks/bench_users.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from netns import Hosts
from torchrun_jobs import (
    MACHINE_FAULTS,
    agent_env,
    descendants,
    stop_agents,
    tb_monitor_command,
    two_agent_args,
)

__all__ = [
    "ACCELERATE",
    "DDP",
    "HF",
    "LIGHTNING",
    "ReportFeed",
    "SHARDED",
    "SHORT_STALL_FLOOR",
    "SHORT_WINDOWS",
    "UserJob",
    "flagged_stragglers",
    "machine_fault",
    "run_hung_job",
    "script_lines",
    "stalled_ranks",
    "start_job",
    "user_job",
    "waited_for",
]

SCRIPTS = Path(__file__).parent / "integration" / "scripts" / "users"
DDP = SCRIPTS / "ddp_multinode.py"
LIGHTNING = SCRIPTS / "lightning_trainer.py"
HF = SCRIPTS / "hf_trainer.py"
ACCELERATE = SCRIPTS / "accelerate_loop.py"
#: FSDP (``fsdp1``) or FSDP2 (``fsdp2``): ``train_sharded.py VERSION STEPS``.
SHARDED = SCRIPTS.parent / "train_sharded.py"
#: Short rank windows and heartbeats, so a straggler or a stall shows within seconds.
SHORT_WINDOWS = {"TB_MONITOR_RANK_WINDOW_S": "1", "TB_MONITOR_HEARTBEAT_S": "1"}
#: The reading side's stall floor for these jobs, whose steps take milliseconds: a rank is
#: stalled only once past the floor, and the default (30 s) is as long as the tests wait.
SHORT_STALL_FLOOR = {"TB_MONITOR_STALL_FLOOR_S": "5"}
JOB_TIMEOUT = 180.0  # seconds; a healthy job takes 10-25 s here, a fault may take gloo's timeouts
_POLL_S = 0.1


#: What the scripts print themselves, each whole: two workers writing to one stdout can put two
#: of these on one line, so they are found, not split on newlines.
_SCRIPT_LINE = re.compile(
    r"\[RANK\d+\] Epoch \d+ \| Batchsize: \d+ \| Steps: \d+"
    r"|\[RANK\d+\] finished after \d+ steps"
    r"|Epoch \d+ \| Training snapshot saved at [\w./-]+?\.pt"
    r"|Resuming training from snapshot at Epoch \d+"
)


def stalled_ranks(report: dict) -> list[int]:
    """The ranks a ``report --json`` document lists stalled."""
    return sorted(stall["rank"] for stall in (report.get("ranks") or {}).get("stalls") or [])


def waited_for(report: dict) -> frozenset[int]:
    """The ranks a ``report --json`` document names as waited for."""
    return frozenset((report.get("ranks") or {}).get("waited_for") or [])


def flagged_stragglers(report: dict) -> frozenset[int]:
    """The ranks a ``report --json`` document flags as stragglers."""
    ranks = report.get("ranks") or {}
    return frozenset(s["rank"] for s in ranks.get("stragglers") or [] if s.get("flagged"))


def script_lines(output: str) -> list[str]:
    """The lines the scripts print themselves, sorted: the order of lines from four processes
    is the scheduler's, not the script's."""
    return sorted(_SCRIPT_LINE.findall(output))


def machine_fault(returncodes: list[int | None], output: str) -> str | None:
    """The machine's fault (a port taken meanwhile) a failed job names in its output, or None."""
    if all(code == 0 for code in returncodes):
        return None
    return next((fault for fault in MACHINE_FAULTS if fault in output.lower()), None)


class ReportFeed:
    """The documents of a ``tb-monitor report --json --follow`` process, one per line, read on
    a thread as they come; ``next()`` hands out each newer one."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc
        self._changed = threading.Condition()
        self._newest: dict | None = None
        self._count = self._taken = 0
        self._ended = False
        self.thread = threading.Thread(target=self._read, name="report-feed", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(json.JSONDecodeError), self._changed:
                self._newest = json.loads(line)
                self._count += 1
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    @property
    def ended(self) -> bool:
        """The follow has ended: the report found every job finished."""
        return self._ended

    def next(self, timeout: float = 60.0) -> dict:
        """The newest document, once there is one newer than the last handed out (the last one
        again once the follow ended: the job finished)."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._count > self._taken or self._ended, timeout
            ):
                raise AssertionError(f"report --follow gave no new document in {timeout:.0f} s")
            if self._newest is None:
                raise AssertionError("report --follow ended without a document")
            self._taken = self._count
            return self._newest


@dataclass
class UserJob:
    """A running (or finished) two-agent job of one user script."""

    run_id: str
    workdir: Path
    logdir: Path
    monitored: bool  # under ``tb-monitor run``; else plain torchrun
    agents: list[subprocess.Popen]
    hosts: Hosts | None = None  # hosts joined by a link of their own (else both on 127.0.0.1)
    _seen: dict[int, int] = field(default_factory=dict)  # every process seen: its node

    # -- what it printed and how it ended --------------------------------------------------
    def output(self, node: int | None = None) -> str:
        """Everything the agents (and their workers) printed so far; one node's with ``node``."""
        nodes = range(len(self.agents)) if node is None else [node]
        return "\n".join(self._log(n).read_text(errors="replace") for n in nodes)

    @property
    def ranks(self) -> int:
        """How many ranks the job has (2 workers per agent)."""
        return 2 * len(self.agents)

    @property
    def returncodes(self) -> list[int | None]:
        return [agent.poll() for agent in self.agents]

    def report(self, env: Mapping[str, str] | None = None) -> dict:
        """``tb-monitor report --json`` of the job's logdir, as it stands now (``env``: settings
        of the reading side, such as ``SHORT_STALL_FLOOR``)."""
        done = subprocess.run(
            tb_monitor_command("report", "--json", str(self.logdir)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **(env or {})},
        )
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"report --json said: {done.stdout}\n{done.stderr}") from exc

    @contextlib.contextmanager
    def followed(
        self, env: Mapping[str, str] | None = None, interval_s: float = 1.0
    ) -> Iterator[ReportFeed]:
        """``tb-monitor report --json --follow`` of the job's logdir while the block runs: one
        process refreshing every ``interval_s``, as a user watches a live job (a report per
        read would start an interpreter and import the analysis each time)."""
        proc = subprocess.Popen(
            tb_monitor_command(
                "report", "--json", "--follow", "--interval", str(interval_s), str(self.logdir)
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
        feed = ReportFeed(proc)
        try:
            yield feed
        finally:
            proc.kill()
            proc.wait()
            feed.thread.join(timeout=5)

    # -- finding processes -------------------------------------------------------------------
    def processes(self) -> list[int]:
        """The agents and every process under them now (remembered with their node, so that a
        worker whose agent died is still waited for)."""
        found = []
        for node, agent in enumerate(self.agents):
            for pid in [agent.pid, *descendants(agent.pid)]:
                self._seen.setdefault(pid, node)
                found.append(pid)
        return found

    def worker_pid(self, rank: int) -> int:
        """The worker process of global rank ``rank`` (the agent's child whose RANK it is)."""
        for agent in self.agents:
            for pid in descendants(agent.pid):
                if _parent(pid) == agent.pid and _environ(pid).get("RANK") == str(rank):
                    return pid
        raise LookupError(f"no worker of rank {rank} under agents {self._agent_pids()}")

    def node_of(self, rank: int) -> int:
        """The index of the agent whose worker rank ``rank`` is."""
        pid = self.worker_pid(rank)
        return next(n for n, agent in enumerate(self.agents) if _parent(pid) == agent.pid)

    def store_node(self) -> int:
        """The index of the agent that holds the c10d rendezvous store: the one listening on
        the endpoint's port (whichever agent bound it first)."""
        endpoint = next(a for a in self.agents[0].args if a.startswith("--rdzv-endpoint="))
        listening = _listening_sockets(int(endpoint.rsplit(":", 1)[1]))
        for node, agent in enumerate(self.agents):
            if _sockets_of(agent.pid) & listening:
                return node
        raise LookupError(f"no agent of {self._agent_pids()} listens on {endpoint}")

    def local_rank(self, rank: int) -> int:
        """The local rank (on its host) of global rank ``rank``'s worker."""
        return int(_environ(self.worker_pid(rank))["LOCAL_RANK"])

    def node_dir(self, node: int) -> Path:
        """The working directory of the agent ``node`` and its workers (as on a host of its own)."""
        return self.workdir / f"node{node}"

    def wait_for_output(self, text: str, timeout: float = JOB_TIMEOUT) -> None:
        """Wait until some process printed ``text`` (training has reached that far)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline or all(code is not None for code in self.returncodes):
                raise AssertionError(f"{text!r} never printed; the output:\n{self.output()}")
            time.sleep(_POLL_S)

    def wait_for_workers(self, count: int = 4, timeout: float = JOB_TIMEOUT) -> None:
        """Wait until ``count`` ranks have a worker process."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(LookupError):
                for rank in range(count):
                    self.worker_pid(rank)
                return
            time.sleep(_POLL_S)
        raise AssertionError(f"{count} workers never started; the output:\n{self.output()}")

    # -- faults from outside ---------------------------------------------------------------
    def kill_node(self, node: int) -> None:
        """``kill -9`` of a whole node: its agent and every process under it, at once."""
        agent = self.agents[node]
        self.processes()
        for pid in [agent.pid, *descendants(agent.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def signal_agent(self, node: int, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to one agent (a scheduler stopping the node)."""
        self.processes()
        self.agents[node].send_signal(signum)

    def signal_rank(self, rank: int, signum: int) -> None:
        """Send ``signum`` (SIGSTOP, SIGCONT, ...) to the worker of ``rank``."""
        os.kill(self.worker_pid(rank), signum)

    # -- the end ---------------------------------------------------------------------------
    def running(self, nodes: tuple[int, ...] = (0, 1)) -> list[int]:
        """The processes of ``nodes`` (agents and every worker seen under them) still alive."""
        self.processes()
        return [pid for pid, node in self._seen.items() if node in nodes and _alive(pid)]

    def wait(self, timeout: float = JOB_TIMEOUT, nodes: tuple[int, ...] = (0, 1)) -> float:
        """Wait until the agents of ``nodes`` and every worker seen under them have exited; the
        seconds it took. Raises TimeoutError naming what still runs after ``timeout``."""
        start = time.monotonic()
        while True:
            alive = self.running(nodes)
            if not alive:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"still running after {timeout:.0f} s: {_describe(alive)}")
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """Kill whatever still runs (the agents with everything under them, and every worker
        seen, even one whose agent is gone)."""
        self.processes()
        stop_agents(self.agents)
        for pid in self._seen:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _log(self, node: int) -> Path:
        return self.workdir / f"node{node}" / "output.txt"

    def _agent_pids(self) -> list[int]:
        return [agent.pid for agent in self.agents]


def start_job(
    workdir: Path,
    script: Path,
    *args: str,
    monitored: bool = True,
    env: dict[str, str] | None = None,
    max_restarts: int = 0,
    nodes: int = 2,
    node_env: Mapping[int, Mapping[str, str]] | None = None,
    run_options: tuple[str, ...] = (),
    hosts: Hosts | None = None,
) -> UserJob:
    """Start the agents (``nodes``, 2 workers each) of one job of ``script ARGS`` in
    ``workdir`` (its logdir is ``workdir/logs``): under ``tb-monitor run`` (``monitored``) or
    plain torchrun. ``node_env``: more environment for one node's agent (a host of its own);
    ``run_options``: more options of ``tb-monitor run`` (``--restart-hung-after``); ``hosts``:
    two hosts joined by a link of their own (``tests/netns.py``), one agent on each."""
    run_id = f"user-{uuid.uuid4().hex[:8]}"
    launcher = ["run", "--logdir", str(workdir / "logs"), *run_options] if monitored else []
    endpoint = hosts.addresses[0] if hosts else "127.0.0.1"
    torchrun_args = two_agent_args(
        script, run_id, *args, max_restarts=max_restarts, nnodes=nodes, endpoint=endpoint
    )
    command = (
        tb_monitor_command(*launcher)
        if monitored
        else [sys.executable, "-m", "torch.distributed.run"]
    )
    agents = []
    for node in range(nodes):
        cwd = workdir / f"node{node}"
        cwd.mkdir(parents=True, exist_ok=True)
        own = (hosts.env(node) if hosts else {}) | dict((node_env or {}).get(node, {}))
        with open(cwd / "output.txt", "w") as log:
            agents.append(
                subprocess.Popen(
                    _on_host(hosts, node, command, torchrun_args),
                    cwd=cwd,
                    env=agent_env(**{**(env or {}), **own}),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a scheduler's signal goes to the agent alone
                )
            )
    return UserJob(run_id, workdir, workdir / "logs", monitored, agents, hosts)


def _on_host(
    hosts: Hosts | None, node: int, launcher: list[str], torchrun_args: list[str]
) -> list[str]:
    """An agent's command on host ``node``, run in that host's network namespace: torchrun
    told the host's own address (where the workers' store and gloo's peers are found) and
    whether it hosts the rendezvous store (host 0 does; its address is no hostname's)."""
    if hosts is None:
        return [*launcher, *torchrun_args]
    local = [f"--local-addr={hosts.addresses[node]}", f"--rdzv-conf=is_host={int(node == 0)}"]
    return hosts.command(node, [*launcher, *local, *torchrun_args])


@contextlib.contextmanager
def user_job(workdir: Path, script: Path, *args: str, **options) -> Iterator[UserJob]:
    """``start_job``, and everything it started killed at the end, whatever happened."""
    job = start_job(workdir, script, *args, **options)
    try:
        yield job
    finally:
        job.stop()


#: A DDP loop whose rank ``HANG_RANK`` hangs in a sleep (``integration/scripts/ddp_hang.py``).
HANG = SCRIPTS.parent / "ddp_hang.py"


def run_hung_job(
    workdir: Path, env: Mapping[str, str], max_restarts: int, after: str = "10s"
) -> tuple[list[int | None], dict]:
    """Run ``HANG`` (rank 1 hangs as ``env`` says) under ``--restart-hung-after after`` until it
    ends: the agents' exit codes and ``report --json`` read with ``SHORT_STALL_FLOOR``."""
    env = {**SHORT_WINDOWS, **SHORT_STALL_FLOOR, "HANG_RANK": "1", **env}
    options = ("--restart-hung-after", after)
    with user_job(workdir, HANG, env=env, max_restarts=max_restarts, run_options=options) as job:
        job.wait_for_output("hangs at step")
        job.wait(timeout=150)
        return job.returncodes, job.report(SHORT_STALL_FLOOR)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _listening_sockets(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on ``port`` (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(fields[9])  # 0A: LISTEN
    return found


def _sockets_of(pid: int) -> set[str]:
    """The inodes of the sockets ``pid`` holds open."""
    found = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    found.add(link[len("socket:[") : -1])
    return found


def _alive(pid: int) -> bool:
    """Some thread of ``pid`` still runs, sleeps or is stopped. Not the process's own state:
    its main thread shows as a zombie while another thread still holds the process up."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):  # gone meanwhile
            continue
        if state not in ("Z", "X"):
            return True
    return False


def _describe(pids: list[int]) -> str:
    def one(pid: int) -> str:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        return f"{pid} (RANK={_environ(pid).get('RANK', '-')}) {cmd[:120]}"

    return "; ".join(one(pid) for pid in sorted(pids))
