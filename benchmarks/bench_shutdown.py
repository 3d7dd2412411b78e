"""How long a job takes to shut down under ``tb-monitor run``, against plain torchrun, per fault.

Each scenario runs the same two-agent job (``--nnodes 2 --nproc-per-node 2``, c10d on 127.0.0.1,
gloo on CPU) of tests/integration/scripts/users/ddp_multinode.py, a DDP script written as
pytorch/examples' multinode.py is, once under plain torchrun and once under ``tb-monitor run``,
side by side in one run. Once every rank is training, the fault is injected from outside, and
the shutdown time is the time from the fault until every process of the job (both agents and
their workers) is gone:

- ``agent-sigterm``: SIGTERM to both agents (a scheduler preempting the job);
- ``worker-crash``: SIGSEGV to one worker (rank 3), whose failure cascades to the others;
- ``node-kill9``: ``kill -9`` of node B's agent and its workers at once;
- ``blocked-rank``: rank 3 (node B) is stopped (SIGSTOP), so node A's ranks wait in DDP's
  all_reduce; then node A is preempted (SIGTERM to its agent). Node A's time is the one that
  tells: its workers are blocked in C++ when the SIGTERM comes.

    python benchmarks/bench_shutdown.py [--scenario NAME ...] [--rounds 3] [--max-restarts 0]
    python benchmarks/bench_shutdown.py --process

Prints, per scenario, node A's and the whole job's shutdown time under each launcher (the
median of ``--rounds``, the launchers taking turns to go first) and their ratio (tb-monitor run /
plain torchrun). torchrun gives a worker 30 s between its SIGTERM and the SIGKILL: a worker
that does not die on SIGTERM shows as ~30 s more. In ``blocked-rank`` only node A is timed: node
B's stopped rank needs that SIGKILL under both launchers, and its other rank, when it waits on
the stopped one alone, never learns that node A went away: the job then hangs under either.

``--process``: one process, no torchrun: how long after a SIGTERM it ends, with its main thread
running Python or blocked in C, and how many of its records are on disk, per way of handling
SIGTERM (none; Python's handler alone, as before issue 26; not catching it; the watcher thread).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "users" / "ddp_multinode.py"
sys.path.insert(0, str(ROOT / "tests"))
from torchrun_jobs import descendants, two_agent_args  # noqa: E402  (the tests' job helpers)

SCENARIOS = ("agent-sigterm", "worker-crash", "node-kill9", "blocked-rank")
LAUNCHERS = ("torchrun", "tb-monitor")
#: How long a scenario may take to shut down before its processes are killed (seconds).
GIVE_UP_S = 120.0


class JobDidNotStart(RuntimeError):
    """The job ended, or never trained, before any fault was injected."""


@dataclass
class Shutdown:
    """When each part of a job was gone, in seconds after the fault (None: killed by us)."""

    launcher: str
    scenario: str
    node_a: float | None  # node A's agent and workers
    job: float | None  # every process of the job
    returncodes: list[int | None]
    logdir: str | None
    output: str


def launcher_command(launcher: str, logdir: str | None) -> list[str]:
    """The agent command before torchrun's options: plain torchrun or ``tb-monitor run``."""
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run"]
    return [sys.executable, "-m", "tb_monitor.cli", "run", "--logdir", str(logdir)]


def job_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("TB_MONITOR_LOGDIR", None)
    env.setdefault("STEP_SLEEP_S", "0.02")
    env.setdefault("TB_MONITOR_RANK_WINDOW_S", "1")
    env.setdefault("TB_MONITOR_HEARTBEAT_S", "1")
    return {**env, **extra}


class Agent:
    """One agent process (a node), its output read on a thread."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def workers(self) -> dict[int, int]:
        """Global rank -> pid of this agent's live workers."""
        found = {}
        for pid in descendants(self.proc.pid):
            rank = _env_of(pid).get("RANK")
            if rank is not None and rank.isdigit():
                found[int(rank)] = pid
        return found

    def output(self) -> str:
        self._reader.join(timeout=5)
        return "".join(self.lines)


def _env_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, _, value in pairs}


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_training(agents: list[Agent], ranks: int, timeout: float = 90.0) -> None:
    """Until every rank printed its first epoch line and both agents have their workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = "".join(line for agent in agents for line in agent.lines)
        started = {r for r in range(ranks) if f"[RANK{r}] Epoch" in text}
        if len(started) == ranks and all(len(a.workers()) == ranks // 2 for a in agents):
            return
        if any(a.proc.poll() is not None for a in agents):
            break
        time.sleep(0.2)
    out = "".join("".join(agent.lines)[-3000:] for agent in agents)
    raise JobDidNotStart(f"the job did not start training:\n{out}")


def inject(scenario: str, agents: list[Agent]) -> None:
    """The fault, from outside the job."""
    node_a, node_b = agents
    workers_b = node_b.workers()
    if scenario == "agent-sigterm":
        kill_all([node_a.proc.pid, node_b.proc.pid], signal.SIGTERM)
    elif scenario == "worker-crash":
        kill_all([workers_b[max(workers_b)]], signal.SIGSEGV)
    elif scenario == "node-kill9":
        kill_all([node_b.proc.pid, *workers_b.values()])
    elif scenario == "blocked-rank":
        kill_all([workers_b[max(workers_b)]], signal.SIGSTOP)
        time.sleep(2.0)  # node A's ranks are now waiting for it in DDP's all_reduce
        kill_all([node_a.proc.pid], signal.SIGTERM)
    else:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {SCENARIOS}")


def run_scenario(
    launcher: str, scenario: str, workdir: str, max_restarts: int = 0, node_a_only: bool = False
) -> Shutdown:
    """Run the job under ``launcher``, inject ``scenario``'s fault, time the shutdown (with
    ``node_a_only``, until node A is gone: the rest is then killed); once more if the job
    could not start (a port taken meanwhile on a busy machine)."""
    try:
        return _run_scenario(launcher, scenario, workdir, max_restarts, node_a_only)
    except JobDidNotStart:
        return _run_scenario(launcher, scenario, workdir, max_restarts, node_a_only)


def _run_scenario(
    launcher: str, scenario: str, workdir: str, max_restarts: int, node_a_only: bool
) -> Shutdown:
    run_dir = Path(workdir) / f"{launcher}-{scenario}-{uuid.uuid4().hex[:6]}"
    run_dir.mkdir(parents=True)
    logdir = str(run_dir / "logs") if launcher == "tb-monitor" else None
    command = [
        *launcher_command(launcher, logdir),
        *two_agent_args(
            SCRIPT,
            uuid.uuid4().hex[:8],
            "1000",  # epochs: it trains until the fault
            "5",
            "--snapshot_path",
            str(run_dir / "snapshot.pt"),
            max_restarts=max_restarts,
        ),
    ]
    env = job_env()
    agents = [Agent(command, env, str(run_dir))]
    time.sleep(0.5)  # node A starts first, so it hosts the rendezvous store
    agents.append(Agent(command, env, str(run_dir)))
    try:
        _wait_training(agents, ranks=4)
        time.sleep(1.0)
        node_a, node_b = agents
        tracked_a = [node_a.proc.pid, *node_a.workers().values()]
        tracked = [*tracked_a, node_b.proc.pid, *node_b.workers().values()]
        fault = time.monotonic()
        inject(scenario, agents)
        gone_a = gone = None
        while time.monotonic() - fault < GIVE_UP_S:
            for agent in agents:
                agent.proc.poll()  # reap, so an ended agent is not a zombie
            if gone_a is None and not any(alive(pid) for pid in tracked_a):
                gone_a = time.monotonic() - fault
            if node_a_only and gone_a is not None:
                break
            if not any(alive(pid) for pid in tracked):
                gone = time.monotonic() - fault
                break
            time.sleep(0.05)
    finally:
        for agent in agents:
            kill_all([*descendants(agent.proc.pid), agent.proc.pid])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.proc.pid, signal.SIGKILL)
            agent.proc.wait()
    return Shutdown(
        launcher,
        scenario,
        gone_a,
        gone,
        [agent.proc.returncode for agent in agents],
        logdir,
        "\n".join(agent.output() for agent in agents),
    )


STRATEGIES = ("no tb_monitor", "handler only", "not caught", "watcher")
_CHILD = """
import ctypes, signal, sys
from datetime import timedelta
import tb_monitor
from tb_monitor import Aggregation, Stat, _shutdown
from tb_monitor.elastic import metrics
strategy, state, logdir = sys.argv[1:4]
if strategy == "handler only":  # as before: Python's handler on the main thread, no watcher
    _shutdown._start_watcher = lambda: None
if strategy != "no tb_monitor":
    tb_monitor.init(logdir)
if strategy in ("not caught", "no tb_monitor"):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
loss = Stat("loss", [Aggregation.SUM], timedelta(hours=1))
for i in range(1000):
    loss.add(1.0)
    metrics.put_metric("m", i, "g")
print("ready", flush=True)
if state == "blocked in C":  # as a DDP all_reduce waiting for a stopped peer
    mutex, libc = ctypes.create_string_buffer(64), ctypes.CDLL(None)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)
while True:
    sum(range(1000))
"""


def process_figures(workdir: str) -> None:
    """One process, SIGTERM: time to its end and records kept, per way of flushing."""
    print(f"\n{'strategy':<15}{'main thread':<15}{'ends after':>12}{'records kept':>14}")
    for strategy in STRATEGIES:
        for state in ("in Python", "blocked in C"):
            logdir = Path(workdir) / f"{strategy}-{state}".replace(" ", "_")
            child = subprocess.Popen(
                [sys.executable, "-c", _CHILD, strategy, state, str(logdir)],
                stdout=subprocess.PIPE,
                text=True,
            )
            child.stdout.readline()
            time.sleep(0.3)  # past the print, into the loop or the C call
            start = time.monotonic()
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=5)
                ended = f"{(time.monotonic() - start) * 1e3:.0f} ms"
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                ended = "never (5 s)"
            kept = _records(logdir) if strategy != "no tb_monitor" else "-"
            print(f"{strategy:<15}{state:<15}{ended:>12}{kept!s:>14}", flush=True)


def _records(logdir: Path) -> str:
    """How many of the 1,000 metrics and the Stat's one window are on disk."""
    from tb_monitor.logdir import readers

    tags = [point.tag for point in readers.iter_scalars(str(logdir))] if logdir.exists() else []
    return f"{tags.count('g/m')}+{tags.count('loss.sum')}"


def _seconds(value: float | None) -> str:
    return f">{GIVE_UP_S:.0f} s" if value is None else f"{value:.2f} s"


def _ratio(ours: float | None, plain: float | None) -> str:
    if ours is None or plain is None:
        return "-"
    return f"{ours / plain:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument(
        "--process", action="store_true", help="only the one-process figures per strategy"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-shutdown-") as workdir:
        if args.process:
            process_figures(workdir)
            return
        print(f"{'scenario':<15}{'part':<8}{'torchrun':>10}{'tb-monitor':>12}{'ratio':>8}")
        for scenario in args.scenario or SCENARIOS:
            runs: dict[str, list[Shutdown]] = {launcher: [] for launcher in LAUNCHERS}
            blocked = scenario == "blocked-rank"  # node B may hang for good: see the docstring
            for n in range(args.rounds):  # alternating which launcher runs first
                for launcher in LAUNCHERS[:: 1 if n % 2 == 0 else -1]:
                    runs[launcher].append(
                        run_scenario(
                            launcher, scenario, workdir, args.max_restarts, node_a_only=blocked
                        )
                    )
            for part in ("node_a",) if blocked else ("node_a", "job"):
                plain, ours = (_median([getattr(r, part) for r in runs[x]]) for x in LAUNCHERS)
                print(
                    f"{scenario:<15}{part:<8}{_seconds(plain):>10}{_seconds(ours):>12}"
                    f"{_ratio(ours, plain):>8}",
                    flush=True,
                )


def _median(values: list[float | None]) -> float | None:
    """The median, a run we gave up on counting as longest (None when most were)."""
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    return ordered[len(ordered) // 2] if ordered else None


if __name__ == "__main__":
    main()
