"""What each node and each rank of a planned job records, in torch's own JSON shapes.

The agents' rendezvous events (torch's ``RdzvEvent`` JSON with the messages
``dynamic_rendezvous`` writes), the agents' ``torchelastic.worker.status.*`` events (torch's
``Event`` JSON with its nested metadata string) and the workers' ``torch.monitor``-style events.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event, EventMetadataValue, RdzvEvent
from tb_monitor.synthetic._plan import SLOWDOWN, Attempt, Job, Node
from tb_monitor.synthetic.rendezvous import join_round, keep_alive_round

_RDZV_FILE = "dynamic_rendezvous.py"
_HANDLER = "DynamicRendezvousHandler"
_ENTRY_POINT = "train.py"


@dataclass(frozen=True)
class Record:
    """One timeline record: its kind, torch's JSON, and the wall time it happened."""

    kind: str
    payload: str
    wall_time: float


class Records:
    """Some runs' records, and the scalars rank 0 logs with its epoch events."""

    def __init__(self) -> None:
        self.by_run: dict[str, list[Record]] = defaultdict(list)
        # run -> (tag, value, wall time, step)
        self.scalars: dict[str, list[tuple[str, float, float, int]]] = defaultdict(list)

    def add(self, run: str, kind: str, payload: str, wall_time: float) -> None:
        self.by_run[run].append(Record(kind, payload, wall_time))


# ---------------------------------------------------------------------------------------------
# torch's JSON shapes
# ---------------------------------------------------------------------------------------------


def _rdzv(method: str, run_id: str, message: str, node: Node, state: str, rank=None) -> str:
    # RdzvEvent's fields in torch's order (which is also its JSON's order).
    name = f"{_RDZV_FILE}:{method}"
    event = RdzvEvent(name, run_id, message, node.host, node.pid, state, rank=rank, local_id=0)
    return event.serialize()


def _agent_event(
    state: str,
    source: str,
    job: Job,
    node: Node,
    attempt: int,
    worker: tuple[int, int] | None = None,
    *,
    raw_error: str | None = None,
    duration_ms: float | None = None,
    exit_code: int | None = None,
    worker_pid: int | None = None,
) -> str:
    # The shape of SimpleElasticAgent._construct_event, nested metadata string included.
    md: dict[str, object] = {"group_world_size": job.nodes, "entry_point": _ENTRY_POINT}
    global_rank = worker_id = None
    if worker is not None:
        local_rank, global_rank = worker
        md["local_rank"] = (local_rank,)
        md["role_rank"] = (global_rank,)
        md["role_world_size"] = (job.world_size,)
        md["exit_code"] = (exit_code,)
        md["worker_pid"] = (worker_pid,)
        worker_id = str(node.worker_pid(local_rank, attempt))
    metadata: dict[str, EventMetadataValue] = {
        "run_id": job.run_id,
        "global_rank": global_rank,
        "group_rank": node.group_rank,
        "worker_id": worker_id,
        "role": "default",
        "hostname": node.host,
        "state": state,
        "total_run_time": 0,
        "rdzv_backend": "c10d",
        "raw_error": raw_error,
        "metadata": json.dumps(md),
        "agent_restarts": attempt,
        "duration_ms": duration_ms,
    }
    return Event(f"torchelastic.worker.status.{state}", source, metadata=metadata).serialize()


def _monitor_event(name: str, timestamp: float, data: dict[str, object]) -> str:
    return json.dumps({"name": name, "timestamp": timestamp, "data": data})


def _error_file_data(rank: int, when: float) -> str:
    # What torchelastic's error handler writes for an uncaught exception in a worker.
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "/workspace/{_ENTRY_POINT}", line 212, in <module>\n'
        "    main()\n"
        f'  File "/workspace/{_ENTRY_POINT}", line 187, in main\n'
        "    loss = step(model, batch)\n"
        f'  File "/workspace/{_ENTRY_POINT}", line 96, in step\n'
        "    loss.backward()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
        f"(GPU 0; 79.15 GiB total capacity) on rank {rank}"
    )
    return json.dumps(
        {
            "message": {
                "message": f"OutOfMemoryError: CUDA out of memory (rank {rank})",
                "extraInfo": {"py_callstack": trace, "timestamp": str(int(when))},
            }
        }
    )


# ---------------------------------------------------------------------------------------------
# A node's agent
# ---------------------------------------------------------------------------------------------


class _Agent:
    """One node's agent writing its run during one attempt."""

    def __init__(self, job: Job, node: Node, plan: Attempt, out: Records) -> None:
        self.job, self.node, self.plan, self.out = job, node, plan, out
        self.run = contract.agent_run_name(job.run_id, node.host, node.pid)

    def rdzv(self, method: str, message: str, when: float, state="RUNNING", rank=None) -> None:
        """A rendezvous event of ``dynamic_rendezvous``'s ``method``."""
        payload = _rdzv(method, self.job.run_id, message, self.node, state, rank)
        self.out.add(self.run, contract.RENDEZVOUS, payload, when)

    def event(self, kind: str, state: str, when: float, worker=None, **fields) -> None:
        """A ``torchelastic.worker.status`` event: the agent's own (``contract.AGENT``) or one
        of its worker's (``contract.WORKER``, sourced WORKER as torch does)."""
        source = "AGENT" if kind == contract.AGENT else "WORKER"
        payload = _agent_event(
            state, source, self.job, self.node, self.plan.index, worker, **fields
        )
        self.out.add(self.run, kind, payload, when)

    def workers(self) -> list[tuple[int, int]]:
        """``(local rank, global rank)`` of this node's workers in this attempt."""
        first = self.node.group_rank * self.job.workers_per_node
        return [(local, first + local) for local in range(self.job.workers_per_node)]


def node_records(job: Job, node: Node, plans: list[Attempt]) -> Records:
    """Everything one node's agent records over the job: deterministic from the seed and plans."""
    rng = random.Random(job.seed * 1_000_003 + node.index + 1)
    out = Records()
    for plan in plans:
        node.group_rank = plan.group_ranks[node.index]
        agent = _Agent(job, node, plan, out)
        joined = _join(agent, rng)
        _start_workers(agent, joined)
        _keep_alives(agent, rng)
        _end_workers(agent)
        if plan.last:
            _close(agent)
    return out


def _join(agent: _Agent, rng: random.Random) -> float:
    """One node's side of a rendezvous round; returns when it joined."""
    plan, node, job = agent.plan, agent.node, agent.job
    tj, completes = plan.joins[node.index], node.index == plan.closer
    payloads = join_round(
        job.run_id, node.host, node.pid, plan.index, node.group_rank, job.nodes, completes=completes
    )
    joined = plan.complete + rng.uniform(0.0, 0.05)
    times = [tj, tj + 0.05, tj + 0.06, *([plan.complete - 0.1] if completes else []), joined]
    for payload, when in zip(payloads, times, strict=True):
        agent.out.add(agent.run, contract.RENDEZVOUS, payload, when)
    return joined


def _start_workers(agent: _Agent, joined: float) -> None:
    """The agent's rendezvous and rank-assignment events, then its workers' START."""
    rdzv_ms = (joined - agent.plan.joins[agent.node.index]) * 1000.0
    agent.event(contract.AGENT, "RENDEZVOUS", joined + 0.001, duration_ms=rdzv_ms)
    agent.event(contract.AGENT, "ASSIGN_WORKER_RANKS", joined + 0.005, duration_ms=3.2)
    for local, grank in agent.workers():
        agent.event(contract.WORKER, "START", joined + 0.4 + 0.01 * local, (local, grank))


def _keep_alives(agent: _Agent, rng: random.Random) -> None:
    """The node's keep-alives, evenly through training with a little jitter: each the handler's
    one record, or with ``keep_alive_rounds`` the whole round torch records."""
    plan, node, rid = agent.plan, agent.node, agent.job.run_id
    n_beats = plan.beats[node.index]
    period = (plan.stop - plan.train0) / max(1, n_beats)
    # Every heartbeat of a node is the same event, only its time differs; unless each is to be
    # distinct: then its message counts the node's heartbeats (digits: JSON as torch's).
    count = f" (attempt {plan.index}, heartbeat {_COUNT})" if agent.job.distinct_beats else ""
    if agent.job.keep_alive_rounds:
        beats = keep_alive_round(rid, node.host, node.pid, note=count)
    else:
        message = (
            f"The node '{node.desc}' has sent a keep-alive heartbeat to the rendezvous '{rid}'"
        )
        beats = (_rdzv(f"{_HANDLER}._keep_alive", rid, f"{message}{count}.", node, "RUNNING"),)
    jitter, uniform = period * 0.1, rng.random
    records = agent.out.by_run[agent.run]
    for i in range(n_beats):
        t = plan.train0 + i * period + uniform() * jitter
        for k, beat in enumerate(beats):
            payload = beat.replace(_COUNT, str(i)) if count else beat
            records.append(Record(contract.RENDEZVOUS, payload, t + _ROUND_STEP_S * k))


_COUNT = "#COUNT#"  # where a distinct heartbeat's count goes
_ROUND_STEP_S = 0.002  # between the records of one keep-alive round (a store round trip)


def _end_workers(agent: _Agent) -> None:
    """How each worker ended: all succeed, or one fails (with its traceback) and the rest are
    terminated; the straggler's workers finish late."""
    plan, node = agent.plan, agent.node
    for local, grank in agent.workers():
        wpid: int | None = node.worker_pid(local, plan.index)
        raw = None
        if plan.failing is None:
            state, when, code = "SUCCEEDED", plan.end + (8.0 if node.straggler else 0.0), 0
        elif node.index == plan.failing and local == 0:
            state, when, code = "FAILED", plan.stop, 1
            raw = _error_file_data(grank, plan.stop)
        else:
            state, when, code, wpid = "TERMINATED", plan.stop + 0.8, None, None
        fields = dict(raw_error=raw, exit_code=code, worker_pid=wpid)
        agent.event(contract.WORKER, state, when + 0.01 * local, (local, grank), **fields)


def _close(agent: _Agent) -> None:
    """After the last attempt: the node closes the rendezvous and its agent gives its verdict."""
    plan, node = agent.plan, agent.node
    failed = plan.failing is not None
    finish = (plan.stop + 1.5) if failed else plan.end + (8.5 if node.straggler else 0.5)
    closed = f"The node '{node.desc}' has closed the rendezvous '{agent.job.run_id}'."
    agent.rdzv(f"{_HANDLER}._close", closed, finish, "SUCCEEDED")
    agent.event(contract.AGENT, "FAILED" if failed else "SUCCEEDED", finish + 0.01)


# ---------------------------------------------------------------------------------------------
# A rank's worker
# ---------------------------------------------------------------------------------------------


def worker_records(job: Job, rank: int, plans: list[Attempt]) -> Records:
    """What one global rank's own run holds: its epochs in every attempt, on whichever node
    the rendezvous put it (the straggler node's ranks are slow)."""
    rng = random.Random(job.seed * 3_000_017 + rank + 1)
    out = Records()
    run = contract.run_name_from_env({"TORCHELASTIC_RUN_ID": job.run_id, "RANK": str(rank)})
    out.by_run[run] = []  # the run exists (its rank windows) even without epochs
    for plan in plans:
        slow = SLOWDOWN if job.on_straggler(plan, rank) else 1.0
        train0, stop, attempt, epochs = plan.train0, plan.stop, plan.index, job.epochs
        for epoch in range(epochs):
            when = min(train0 + (epoch + 1) * (stop - train0) / (epochs + 1) * slow, stop - 0.5)
            loss = round(2.5 / (1 + epoch + attempt) + rng.random() * 0.05, 4)
            speed = round(rng.gauss(1800 / slow, 40), 1)
            data = {"epoch": epoch, "rank": rank, "attempt": attempt}
            data.update(loss=loss, samples_per_s=speed)
            out.add(run, contract.MONITOR, _monitor_event("train.epoch_end", when, data), when)
            if rank == 0:  # training scripts log their metrics from rank 0
                metric_step = attempt * epochs + epoch
                out.scalars[run].append(("train/loss", loss, when, metric_step))
                out.scalars[run].append(("train/samples_per_s", speed, when, metric_step))
    return out
