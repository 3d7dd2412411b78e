"""The story of a synthetic job, decided up front: its nodes and every attempt's times.

Each node's records follow from the plan and the seed alone, so separate processes can write
separate nodes and still tell one consistent story.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tb_monitor.synthetic.rendezvous import KEEP_ALIVE_NAMES

#: 2025-03-03 09:00:00 UTC: a fixed start keeps generated logdirs identical from run to run.
DEFAULT_START = 1741000000.0

#: Records each node writes per attempt besides its keep-alives (4 rendezvous, 2 agent) and per
#: worker (START, its end); with ``epochs`` monitor events per worker.
_NODE_RECORDS, _WORKER_RECORDS = 4 + 2, 2
_STRAGGLER_JOIN_S = 18.0  # how late the straggler node joins every rendezvous
SLOWDOWN = 1.35  # the straggler node's ranks take this much longer to train
_FAILED_SHARE = 0.8  # a failing attempt stops at this share of its length


@dataclass(frozen=True)
class Job:
    """The job's shape, and what every record's randomness derives from."""

    run_id: str
    nodes: int
    workers_per_node: int
    epochs: int
    seed: int
    distinct_beats: bool = False  # each keep-alive's message carries its own count
    keep_alive_rounds: bool = False  # each keep-alive as torch records it: its round's records

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes!r}")
        if self.workers_per_node < 1:
            raise ValueError(f"workers_per_node must be at least 1, got {self.workers_per_node!r}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node

    def straggler(self, node: int) -> bool:
        """Whether node ``node`` is the straggler: the last one, of two or more."""
        return node == self.nodes - 1 and node > 0

    def on_straggler(self, plan: Attempt, rank: int) -> bool:
        """Whether global rank ``rank`` runs on the straggler node in attempt ``plan``."""
        return self.straggler(plan.order[rank // self.workers_per_node])

    def node_list(self) -> list[Node]:
        """Every node: its host, its agent's pid, whether it straggles."""
        return [
            Node(i, f"node-{i:03d}", 4000 + 97 * i, straggler=self.straggler(i))
            for i in range(self.nodes)
        ]


@dataclass(frozen=True)
class Schedule:
    """How long the job runs and how its attempts end."""

    start: float
    heartbeat_s: float
    restarts: int
    fail_last: bool
    events: int  # timeline records wanted in all (0: a small, natural job)
    hours: float | None  # or the job's length; each node beats every ``heartbeat_s`` throughout

    def __post_init__(self) -> None:
        if self.restarts < 0:
            raise ValueError(f"restarts must be non-negative, got {self.restarts!r}")
        if self.events < 0:
            raise ValueError(f"events must be non-negative, got {self.events!r}")
        if self.hours is not None and not self.hours > 0:
            raise ValueError(f"hours must be positive, got {self.hours!r}")

    @property
    def attempts(self) -> int:
        return self.restarts + 1

    @property
    def failed(self) -> int:
        """How many attempts fail: the restarts, and the last one too with ``fail_last``."""
        return self.attempts if self.fail_last else self.restarts


@dataclass
class Node:
    index: int
    host: str
    pid: int
    straggler: bool
    group_rank: int = 0

    @property
    def desc(self) -> str:
        # dynamic_rendezvous's _NodeDesc repr: "<addr>_<pid>_<local_id>".
        return f"{self.host}_{self.pid}_0"

    def worker_pid(self, local_rank: int, attempt: int) -> int:
        return self.pid + 1 + attempt * 64 + local_rank


@dataclass(frozen=True)
class Attempt:
    """What one attempt decides for every node: the rendezvous order and the times."""

    index: int
    last: bool
    joins: list[float]  # per node
    group_ranks: list[int]  # per node
    order: list[int]  # per group rank: its node
    closer: int  # the node that marks the round complete (the last to join)
    complete: float
    train0: float
    end: float
    failing: int | None  # the node whose worker 0 fails, if the attempt fails
    stop: float  # when training stops: the failure, or the end
    beats: list[int]  # per node: keep-alives during training


def plan(job: Job, schedule: Schedule) -> list[Attempt]:
    """Every attempt's rendezvous and times, one after the other."""
    rng = random.Random(job.seed)
    beats = _beats(job, schedule)
    plans: list[Attempt] = []
    t0 = schedule.start
    for index in range(schedule.attempts):
        plans.append(_attempt(job, schedule, index, t0, beats[index], rng))
        t0 = plans[-1].stop + 2.0
    return plans


def _beats(job: Job, schedule: Schedule) -> list[list[int]]:
    """Keep-alives per attempt and node: enough to fill ``hours``, or to make up ``events``."""
    attempts, nodes = schedule.attempts, job.nodes
    if schedule.hours is not None:
        failed = schedule.failed
        duration = schedule.hours * 3600 / (_FAILED_SHARE * failed + attempts - failed)
        return [
            [int(duration * (_FAILED_SHARE if a < failed else 1.0) / schedule.heartbeat_s)] * nodes
            for a in range(attempts)
        ]
    per_beat = len(KEEP_ALIVE_NAMES) if job.keep_alive_rounds else 1
    per_worker = _WORKER_RECORDS + job.epochs
    # Per node and attempt, plus one "complete" per round and per node the rendezvous close
    # and the agent's verdict at the end.
    fixed = nodes * attempts * (_NODE_RECORDS + job.workers_per_node * per_worker) + attempts
    fixed += nodes * 2
    total = max(0, schedule.events - fixed) // per_beat if schedule.events else nodes * attempts * 4
    return [
        [_share(_share(total, attempts, a), nodes, n) for n in range(nodes)]
        for a in range(attempts)
    ]


def _attempt(
    job: Job, schedule: Schedule, index: int, t0: float, beats: list[int], rng: random.Random
) -> Attempt:
    """One attempt starting at ``t0``: who joins when, in which order, and how it ends."""
    last = index == schedule.attempts - 1
    joins = [
        t0 + rng.uniform(0.0, 1.5) + (_STRAGGLER_JOIN_S if job.straggler(n) else 0.0)
        for n in range(job.nodes)
    ]
    order = sorted(range(job.nodes), key=joins.__getitem__)
    group_ranks = [0] * job.nodes
    for rank, node in enumerate(order):
        group_ranks[node] = rank
    complete = joins[order[-1]] + 0.2
    failing = None if last and not schedule.fail_last else (index * 7 + 3) % job.nodes
    trained = max(beats) * schedule.heartbeat_s
    stretched = failing is not None and schedule.hours  # its beats cover only the share it ran
    duration = max(60.0, trained / _FAILED_SHARE if stretched else trained)
    train0 = complete + 1.0
    end = train0 + duration
    return Attempt(
        index=index,
        last=last,
        joins=joins,
        group_ranks=group_ranks,
        order=order,
        closer=order[-1],
        complete=complete,
        train0=train0,
        end=end,
        failing=failing,
        stop=train0 + duration * _FAILED_SHARE if failing is not None else end,
        beats=beats,
    )


def _share(total: int, parts: int, index: int) -> int:
    """The index-th of ``parts`` near-equal integer shares of ``total``."""
    return total // parts + (1 if index < total % parts else 0)
