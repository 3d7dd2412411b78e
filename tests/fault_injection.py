"""Faults from outside a running job, as a machine or a scheduler makes them, with their truth.

Each ``Fault`` hits a ``UserJob`` (``tests/users_jobs.py``) at one rank and says what happened:
the ``Truth`` a report is scored against (``tests/fault_campaign.py``). The faults use only what a
machine offers: signals by pid, control groups (a CPU quota, a memory limit, the freezer, which
holds a process in uninterruptible sleep as a stuck disk or filesystem would), and one hook, a
worker made to raise or to leak memory by a signal (``campaign_hooks/sitecustomize.py``), a save
made slow enough to be hit inside, and noise (``campaign_hooks/campaign_noise.py``): the scripts
stay unmodified.

A network partition (``partition``) needs a job whose two hosts talk over a link of their own
(``tests/netns.py``, ``Fault.netns``): it cuts the link for good, as a dead switch would.

Control groups (``tests/cgroups.py``) need root; v1 hierarchies (``/sys/fs/cgroup/<controller>``)
and the unified v2 one are both handled. Every group made here is removed again, whatever
happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cgroups import Cgroup, cgroups_usable, in_cgroup, limit_cpu
from users_jobs import UserJob

__all__ = [
    "FAILURES",
    "FAULTS",
    "HOOKS",
    "NOISE",
    "PARTITIONS",
    "STALLS",
    "Cgroup",
    "Fault",
    "Truth",
    "cgroups_usable",
]

HOOKS = Path(__file__).parent / "campaign_hooks"
LEAK_SIGNAL = signal.SIGRTMIN + 5  # campaign_hooks/sitecustomize.py starts a leak on it
#: Workers whose SIGTERM handler hangs past the agent's grace, which then SIGKILLs them.
HANGING_HANDLER = {"TB_MONITOR_CAMPAIGN_TERM_HANG_S": "60"}
#: Rank 0's second snapshot written 20 s long, as on a slow disk (campaign_hooks/sitecustomize.py).
SLOW_SAVE = {"TB_MONITOR_CAMPAIGN_SLOW_SAVE_S": "20"}
#: Every rank evaluates for 15 s at epoch 10, fetching batches without an optimizer step.
LONG_EVAL = {"EVAL_EVERY": "10", "EVAL_SECONDS": "15"}
#: Every host's saving rank (local rank 0) writes its second snapshot 20 s long, marked while it
#: writes, so that a fault lands inside the save (campaign_hooks/sitecustomize.py).
SAVES_TO_HIT = {**SLOW_SAVE, "TB_MONITOR_CAMPAIGN_SLOW_SAVE_RANKS": "all"}
#: Garbage collections of about a second, every few seconds, on every rank or on one
#: (campaign_hooks/campaign_noise.py).
GC_PAUSES = {"TB_MONITOR_CAMPAIGN_GC_PAUSE_S": "1.5"}
GC_PAUSES_ONE_RANK = {**GC_PAUSES, "TB_MONITOR_CAMPAIGN_GC_RANKS": "one"}
#: Now and then a batch that reads from disk (O_DIRECT, in state D) for up to 3 s first.
SLOW_LOADS = {"TB_MONITOR_CAMPAIGN_SLOW_LOAD_S": "3"}
SAVE_WAIT_S = 90.0  # how long a fault aimed inside a save waits for the save to begin
#: A host whose wall clock runs 4 s ahead (campaign_hooks/sitecustomize.py), its agent and workers.
SKEW = {"TB_MONITOR_CAMPAIGN_CLOCK_SKEW_S": "4"}


@dataclass(frozen=True)
class Truth:
    """What a fault did, as the report should tell it."""

    status: str  # the job's status in the end: "failed", "terminated" or "succeeded"
    cause_ranks: frozenset[int] = frozenset()  # the root cause is one of these (all, for a node)
    cause_kind: str | None = None  # "exception", "SIGKILL", "SIGSEGV", "node lost", "cut off"
    stragglers: frozenset[int] = frozenset()
    straggler_cause: str | None = None  # why they straggle, as the report says ("cpu")
    waited_for: frozenset[int] = frozenset()  # a stall: the rank the others wait for
    agent_sees: str | None = None  # what the stalled rank's agent sees of its process
    ends_alone: bool = True  # False: the job may run on until the campaign ends it
    collateral: frozenset[int] = frozenset()  # ranks that only wait: never to be called stalled


@dataclass(frozen=True)
class Fault:
    """One kind of fault: ``hit(job, rank)`` injects it and returns an undo (or None)."""

    name: str
    truth: Callable[[UserJob, int], Truth]
    hit: Callable[[UserJob, int], Callable[[], None] | None]
    nodes: int = 1  # the least nodes a job needs for it
    during_rendezvous: bool = False  # hits as soon as the workers exist, before training
    needs_cgroups: bool = False
    busy: bool = False  # the job runs beside busy-loop neighbours, one per core
    node_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # per host
    needs: str | None = None  # what the script must do for it ("save", "eval": Script.can)
    netns: bool = False  # its hosts talk over a link of their own (tests/netns.py), as root


def _failed(kind: str) -> Callable[[UserJob, int], Truth]:
    return lambda job, rank: Truth("failed", frozenset({rank}), kind)


def _signal(signum: int) -> Callable[[UserJob, int], None]:
    def hit(job: UserJob, rank: int) -> None:
        job.signal_rank(rank, signum)

    return hit


def _raise(job: UserJob, rank: int) -> None:
    job.signal_rank(rank, signal.SIGUSR2)


def _two_kills(job: UserJob, rank: int) -> None:
    """SIGKILL of ``rank``, then of the next rank a third of a second later."""
    other = job.worker_pid((rank + 1) % job.ranks)
    job.signal_rank(rank, signal.SIGKILL)
    time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        os.kill(other, signal.SIGKILL)


def _killed_in_rendezvous(job: UserJob, rank: int) -> Truth:
    """A worker killed before training: its agent fails, but an agent on another host that holds
    the rendezvous store learns nothing of it (torchelastic's monitor loop asks the store only for
    nodes waiting), and its workers wait in ``init_process_group`` for the dead rank until gloo's
    timeout. Plain torchrun does the same (seen side by side, benchmarks/RESULTS.md); which host
    holds the store is a race. So the job may not end by itself: the report must name the killed
    rank while it runs."""
    return Truth("failed", frozenset({rank}), "SIGKILL", ends_alone=False)


def _node_ranks(job: UserJob, rank: int) -> frozenset[int]:
    node = job.node_of(rank)
    return frozenset(r for r in range(job.ranks) if job.node_of(r) == node)


def _kill_node(job: UserJob, rank: int) -> None:
    job.kill_node(job.node_of(rank))


def _preempt(job: UserJob, rank: int) -> None:
    """SIGTERM to every agent, as a scheduler preempting the job."""
    for node in range(len(job.agents)):
        job.signal_agent(node)


def _stop(job: UserJob, rank: int) -> Callable[[], None]:
    pid = job.worker_pid(rank)
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


#: A rank stopped from outside this long of every period: slow, but alive and stepping.
STOPPED_S, STOP_PERIOD_S = 0.06, 0.1


def _stop_start(job: UserJob, rank: int) -> Callable[[], None]:
    """The rank stopped (SIGSTOP) for ``STOPPED_S`` of every ``STOP_PERIOD_S`` and continued
    (SIGCONT), as a debugger or a noisy hypervisor would: it keeps stepping, slowly."""
    pid, done = job.worker_pid(rank), threading.Event()

    def alternate() -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            while not done.is_set():
                os.kill(pid, signal.SIGSTOP)
                done.wait(STOPPED_S)
                os.kill(pid, signal.SIGCONT)
                done.wait(STOP_PERIOD_S - STOPPED_S)

    thread = threading.Thread(target=alternate, name="stop-start", daemon=True)
    thread.start()

    def undo() -> None:
        done.set()
        thread.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    return undo


def _freeze(job: UserJob, rank: int) -> Callable[[], None]:
    """The rank held in uninterruptible sleep (the freezer shows it in state D)."""
    with in_cgroup("freezer", job.worker_pid(rank)) as group:
        group.set("freezer.state", "FROZEN", "cgroup.freeze", "1")
    return group.remove


def _throttle(job: UserJob, rank: int) -> Callable[[], None]:
    """The rank held to a fiftieth of a core by a CPU quota: enough to slow the job, whose
    steps are mostly a sleep standing for compute (a tenth hardly bites on them)."""
    with in_cgroup("cpu", job.worker_pid(rank)) as group:
        limit_cpu(group, quota_us=2_000, period_us=100_000)
    return group.remove


def _oom(job: UserJob, rank: int) -> Callable[[], None]:
    """The rank's new memory capped at 64 MiB, then a leak in it: the kernel's OOM killer ends
    it (SIGKILL)."""
    with in_cgroup("memory", job.worker_pid(rank)) as group:
        group.set("memory.limit_in_bytes", str(64 << 20), "memory.max", str(64 << 20))
        job.signal_rank(rank, LEAK_SIGNAL)
    return group.remove


def _saver(job: UserJob, rank: int) -> int:
    """The rank that saves the snapshot on ``rank``'s host (local rank 0, as the DDP script)."""
    node = job.node_of(rank)
    return next(r for r in range(job.ranks) if job.node_of(r) == node and job.local_rank(r) == 0)


def _in_save(signum: int) -> Callable[[UserJob, int], None]:
    """``signum`` to the saving rank of ``rank``'s host a second into its slow save; raises if
    the save had not begun, or had ended, by then (the hit must land inside it)."""

    def hit(job: UserJob, rank: int) -> None:
        saver = _saver(job, rank)
        inside = job.node_dir(job.node_of(saver)) / f"campaign-saving-rank{saver}"
        deadline = time.monotonic() + SAVE_WAIT_S
        while not inside.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"rank {saver} never began its slow save")
            time.sleep(0.05)
        time.sleep(1.0)
        if not inside.exists():
            raise AssertionError(f"rank {saver}'s save ended before the fault")
        job.signal_rank(saver, signum)

    return hit


def _failed_in_save(kind: str) -> Callable[[UserJob, int], Truth]:
    """The saving rank failed with ``kind``; the ranks waiting for its save are collateral."""

    def truth(job: UserJob, rank: int) -> Truth:
        saver = _saver(job, rank)
        others = frozenset(range(job.ranks)) - {saver}
        return Truth("failed", frozenset({saver}), kind, collateral=others)

    return truth


def _inside_save(name: str, signum: int, kind: str) -> Fault:
    """A fault that lands inside a save of the DDP script's (which saves on every host)."""
    return Fault(
        name,
        _failed_in_save(kind),
        _in_save(signum),
        node_env={node: SAVES_TO_HIT for node in (0, 1)},
        needs="save",
    )


def _nothing(job: UserJob, rank: int) -> None:
    return None


def _healthy(job: UserJob, rank: int) -> Truth:
    return Truth("succeeded")


def _slowed(job: UserJob, rank: int) -> Truth:
    """A rank slowed but stepping: the one straggler, never stalled; the job succeeds."""
    return Truth("succeeded", stragglers=frozenset({rank}))


def _starved(job: UserJob, rank: int) -> Truth:
    """A rank held to a CPU quota: the one straggler, starved of CPU (not slow in its compute)."""
    return Truth("succeeded", stragglers=frozenset({rank}), straggler_cause="cpu")


def _stalled(seen: str) -> Callable[[UserJob, int], Truth]:
    return lambda job, rank: Truth("succeeded", waited_for=frozenset({rank}), agent_sees=seen)


FAILURES = {
    fault.name: fault
    for fault in (
        Fault("raise", _failed("exception"), _raise),
        Fault("sigkill", _failed("SIGKILL"), _signal(signal.SIGKILL)),
        Fault("sigsegv", _failed("SIGSEGV"), _signal(signal.SIGSEGV)),
        Fault("oom-kill", _failed("SIGKILL"), _oom, needs_cgroups=True),
        Fault(
            "rendezvous-kill",
            _killed_in_rendezvous,
            _signal(signal.SIGKILL),
            during_rendezvous=True,
        ),
        Fault("two-kills", _failed("SIGKILL"), _two_kills),
        Fault(
            "node-kill9",
            lambda job, rank: Truth("failed", _node_ranks(job, rank), "node lost"),
            _kill_node,
            nodes=2,
        ),
        _inside_save("save-kill", signal.SIGKILL, "SIGKILL"),
        _inside_save("save-raise", signal.SIGUSR2, "exception"),  # the hook raises on SIGUSR2
        Fault("preempt", lambda job, rank: Truth("terminated"), _preempt),
        Fault(
            "preempt-hung-handler",
            lambda job, rank: Truth("terminated"),
            _preempt,
            node_env={node: HANGING_HANDLER for node in (0, 1)},
        ),
    )
}
#: Faults the job survives once undone: a rank the others wait for meanwhile, or a slow one.
STALLS = {
    fault.name: fault
    for fault in (
        Fault("sigstop", _stalled("stopped"), _stop),
        Fault("d-state", _stalled("uninterruptible sleep"), _freeze, needs_cgroups=True),
        Fault("cpu-throttle", _starved, _throttle, needs_cgroups=True),
        Fault("stop-start", _slowed, _stop_start),
    )
}
#: No fault: what a healthy job meets (busy neighbours; one host's clock ahead of the other's; a
#: slow checkpoint save on rank 0 while the others wait; a long evaluation without steps; long
#: garbage collections; batches that take seconds to read from disk).
NOISE = {
    fault.name: fault
    for fault in (
        Fault("healthy", _healthy, _nothing),
        Fault("busy-neighbour", _healthy, _nothing, busy=True),
        Fault("clock-skew", _healthy, _nothing, nodes=2, node_env={1: SKEW}),
        Fault("slow-checkpoint", _healthy, _nothing, node_env={0: SLOW_SAVE}, needs="save"),
        Fault("long-eval", _healthy, _nothing, node_env={0: LONG_EVAL, 1: LONG_EVAL}, needs="eval"),
        Fault("gc-pauses", _healthy, _nothing, node_env={0: GC_PAUSES, 1: GC_PAUSES}),
        Fault(
            "gc-one-rank",
            _healthy,
            _nothing,
            node_env={0: GC_PAUSES_ONE_RANK, 1: GC_PAUSES_ONE_RANK},
        ),
        Fault("slow-loading", _healthy, _nothing, node_env={0: SLOW_LOADS, 1: SLOW_LOADS}),
    )
}


def _cut(job: UserJob, rank: int) -> Callable[[], None]:
    """The link between the two hosts cut (packets dropped silently, either way) until the
    campaign lets it heal, as a switch that comes back."""
    assert job.hosts is not None, "a partition needs a job on two hosts (Fault.netns)"
    job.hosts.cut()
    return job.hosts.heal


def _cut_off(job: UserJob, rank: int) -> Truth:
    """Host 1, away from the rendezvous store host 0 serves, is cut off: while the job hangs,
    the store's side waits for every rank of it, whichever rank the case drew (a partition hits
    hosts, not a rank); healed, the job goes on to the end (no connection timed out)."""
    cut_off = frozenset(r for r in range(job.ranks) if job.node_of(r) == 1)
    return Truth("succeeded", waited_for=cut_off)


#: A network partition between the two hosts, healed once named: while it holds, the report must
#: name the ranks of the host that lost the rendezvous store as the ones waited for, not a rank
#: of the store's side, nor no rank at all.
PARTITIONS = {"partition": Fault("partition", _cut_off, _cut, nodes=2, netns=True)}
FAULTS = {**FAILURES, **STALLS, **NOISE, **PARTITIONS}
