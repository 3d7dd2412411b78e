"""Helpers for tests: capture what the APIs record, drive Stat windows by hand, synthetic jobs.

- ``capture()``: everything the tb_monitor APIs record inside a ``with`` block, read back as
  TensorBoard would see it (scalars, timeline events, texts), in the spirit of structlog's
  ``capture_logs`` and OpenTelemetry's ``InMemoryMetricReader``.
- ``manual_clock()``: a wall clock that moves only when told, so Stat windows end on
  ``clock.advance(...)`` deterministically, with no sleeping.
- ``generate_job(...)``: realistic synthetic logdirs of a torchelastic job, for the plugin's
  tests, benchmarks and demos.
- ``generate_rank_windows(...)``: the per-rank step and collective windows and heartbeats that
  ``init(torch=True)`` records (``tb_monitor.integrations.rank_health``), for any number of
  ranks and hours, with chosen slow ranks: the Ranks view's tests and benchmark.

    >>> with capture() as captured:
    ...     put_metric("loss", 1, "train")
    >>> captured.scalars()[0].tag
    'train/loss'

A synthetic job is simulated node by node, attempt by attempt, producing the records a real
``torchrun`` job leaves in a logdir: the agents' rendezvous events (torch's ``RdzvEvent`` JSON with
the messages ``dynamic_rendezvous`` writes), the agents' ``torchelastic.worker.status.*`` events
(torch's ``Event`` JSON with its nested metadata string) and the workers' ``torch.monitor``-style
events. Restarts, a failing worker with its traceback and a straggler node are part of the story;
keep-alive heartbeats fill the job up to the number of events asked for.

    >>> job = generate_job("runs/demo", nodes=8, workers_per_node=2, events=5_000)
    >>> job.total_events
    5000
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tb_monitor import _stat, contract
from tb_monitor.elastic.events.api import Event, EventMetadataValue, RdzvEvent
from tb_monitor.logdir import fs, readers
from tb_monitor.sinks.writer import AsyncWriter

__all__ = [
    "Captured",
    "ManualClock",
    "SyntheticJob",
    "capture",
    "generate_job",
    "generate_rank_windows",
    "rank_heartbeat_scalars",
    "rank_window_scalars",
    "manual_clock",
    "stat_implementations",
]


# ---------------------------------------------------------------------------------------------
# Capturing what the APIs record
# ---------------------------------------------------------------------------------------------


class Captured:
    """What the APIs recorded inside ``capture()``: live during the block, frozen after it."""

    def __init__(self, monitor: Any) -> None:
        self._monitor = monitor
        self._frozen: tuple[list[readers.Scalar], list[dict[str, Any]], list[tuple]] | None = None

    def _read(self) -> tuple[list[readers.Scalar], list[dict[str, Any]], list[tuple]]:
        if self._frozen is not None:
            return self._frozen
        self._monitor.flush()
        logdir = self._monitor.logdir
        texts = [
            (run, value.tag, event.step, value.tensor.string_val[0].decode())
            for run, event in readers.iter_events(logdir)
            for value in event.summary.value
            if value.metadata.plugin_data.plugin_name == "text"
        ]
        events = list(readers.decode_timeline(readers.iter_timeline(logdir)))
        return list(readers.iter_scalars(logdir)), events, texts

    def scalars(self, tag: str | None = None) -> list[readers.Scalar]:
        """Every scalar point (of ``tag`` only, if given), in the order written."""
        points = self._read()[0]
        return [p for p in points if tag is None or p.tag == tag]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every timeline event (of ``kind`` only, if given) as ``read_events`` rows."""
        rows = self._read()[1]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def texts(self) -> list[tuple[str, str, int, str]]:
        """Every text-dashboard entry as ``(run, tag, step, markdown)``."""
        return self._read()[2]

    def _freeze(self) -> None:
        self._frozen = self._read()


@contextmanager
def capture(*, torch: bool = False) -> Iterator[Captured]:
    """Wire every API to a private logdir for the block, and read back what landed there.

    The real writer, sinks and readers run: what ``capture`` shows is what TensorBoard would.
    ``torch=True`` captures the real torch APIs too (as ``init(..., torch=True)``).
    """
    from tb_monitor.monitor import init

    with tempfile.TemporaryDirectory(prefix="tb_monitor-capture-") as logdir:
        monitor = init(logdir, torch=torch)
        captured = Captured(monitor)
        try:
            yield captured
        finally:
            monitor.close()
            captured._freeze()


# ---------------------------------------------------------------------------------------------
# A clock for Stat windows
# ---------------------------------------------------------------------------------------------

_CLOCK_START = 1740999600.0  # 2025-03-03 11:00:00 UTC: a multiple of every window up to an hour


class ManualClock:
    """A wall clock that moves only on ``advance``; Stat windows due by then end at once."""

    def __init__(self, start: float) -> None:
        self._ns = round(start * 1e9)

    def time_ns(self) -> int:
        """The clock's time in nanoseconds since the epoch."""
        return self._ns

    def time(self) -> float:
        """The clock's time in seconds since the epoch."""
        return self._ns / 1e9

    def advance(self, seconds: float) -> int:
        """Move forward and end every Stat window now due, on this thread; how many ended."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, got {seconds!r} seconds")
        self._ns += round(seconds * 1e9)
        return _stat.run_due()


@contextmanager
def manual_clock(start: float | None = None) -> Iterator[ManualClock]:
    """Stat windows follow a ``ManualClock`` inside the block (default start: a window-aligned
    whole hour), and the real clock again after it."""
    clock = ManualClock(_CLOCK_START if start is None else start)
    previous = _stat.use_clock(clock, manual=True)
    try:
        yield clock
    finally:
        _stat.use_clock(previous, manual=False)


def stat_implementations() -> dict[str, type[_stat.Stat] | None]:
    """``Stat`` on each accumulator, ``{"python": ..., "c": ...}`` (``"c"`` None where the C
    one is not built), for testing and benchmarking both."""
    return {
        "python": _stat.stat_class(_stat.PyAccumulator),
        "c": None if _stat.C_ACCUMULATOR is None else _stat.stat_class(_stat.C_ACCUMULATOR),
    }


# ---------------------------------------------------------------------------------------------
# Synthetic jobs
# ---------------------------------------------------------------------------------------------

#: 2025-03-03 09:00:00 UTC: a fixed start keeps generated logdirs identical from run to run.
DEFAULT_START = 1741000000.0

_RDZV_FILE = "dynamic_rendezvous.py"
_HANDLER = "DynamicRendezvousHandler"
_EXECUTOR = "_DistributedRendezvousOpExecutor"
_ENTRY_POINT = "train.py"


@dataclass(frozen=True)
class _Record:
    """One timeline record: its kind, torch's JSON, and the wall time it happened."""

    kind: str
    payload: str
    wall_time: float


@dataclass
class SyntheticJob:
    """What :func:`generate_job` wrote: runs, counts per run and tag, and the time span."""

    logdir: str
    run_id: str
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    rank_windows: int = 0  # step windows written, all ranks together (``rank_stats``)

    @property
    def total_events(self) -> int:
        """Number of timeline records written over all runs and kinds."""
        return sum(self.counts.values())

    @property
    def runs(self) -> list[str]:
        """Runs (directories relative to the logdir) holding timeline records."""
        return sorted({run for run, _ in self.counts})


# ---------------------------------------------------------------------------------------------
# torch's JSON shapes
# ---------------------------------------------------------------------------------------------


def _rdzv(name: str, run_id: str, message: str, node: _Node, state: str, rank=None) -> str:
    return RdzvEvent(
        name=f"{_RDZV_FILE}:{name}",
        run_id=run_id,
        message=message,
        hostname=node.host,
        pid=node.pid,
        node_state=state,
        rank=rank,
        local_id=0,
    ).serialize()


def _agent_event(
    state: str,
    source: str,
    job: _Job,
    node: _Node,
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
# The simulation
# ---------------------------------------------------------------------------------------------


@dataclass
class _Node:
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


@dataclass
class _Job:
    run_id: str
    nodes: int
    workers_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_node


@dataclass(frozen=True)
class _Attempt:
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


def _plan(
    job: _Job,
    *,
    events: int,
    hours: float | None,
    restarts: int,
    start: float,
    heartbeat_s: float,
    epochs: int,
    seed: int,
    fail_last: bool,
) -> list[_Attempt]:
    """Every attempt's rendezvous and times. Each node's records follow from these and the
    seed alone, so nodes can be written by separate processes."""
    rng = random.Random(seed)
    nodes = _nodes(job)
    attempts = restarts + 1
    if hours is not None:
        # A failed attempt stops at 0.8 of its length (below): the attempts fill ``hours``.
        failed = attempts if fail_last else restarts
        duration = hours * 3600 / (0.8 * failed + attempts - failed)
        beats = [
            [int(duration * (0.8 if a < failed else 1.0) / heartbeat_s)] * len(nodes)
            for a in range(attempts)
        ]
    else:
        # Fixed records per node and attempt: 4 rendezvous, 2 agent, START and an end per
        # worker, `epochs` monitor events per worker; one "complete" per round; per node at
        # the end the rendezvous close and the agent's verdict.
        fixed = job.nodes * attempts * (4 + 2 + job.workers_per_node * (2 + epochs)) + attempts
        fixed += job.nodes * 2
        total = max(0, events - fixed) if events else job.nodes * attempts * 4
        beats = [
            [_share(_share(total, attempts, a), len(nodes), n.index) for n in nodes]
            for a in range(attempts)
        ]
    plans = []
    t0 = start
    for index in range(attempts):
        last = index == attempts - 1
        joins = [t0 + rng.uniform(0.0, 1.5) + (18.0 if n.straggler else 0.0) for n in nodes]
        order = sorted(range(len(nodes)), key=joins.__getitem__)
        group_ranks = [0] * len(nodes)
        for rank, node in enumerate(order):
            group_ranks[node] = rank
        complete = joins[order[-1]] + 0.2
        failing = None if last and not fail_last else (index * 7 + 3) % len(nodes)
        trained = max(beats[index]) * heartbeat_s
        duration = max(60.0, trained / 0.8 if failing is not None and hours else trained)
        train0 = complete + 1.0
        end = train0 + duration
        stop = train0 + duration * 0.8 if failing is not None else end
        plans.append(
            _Attempt(
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
                stop=stop,
                beats=beats[index],
            )
        )
        t0 = stop + 2.0
    return plans


def _share(total: int, parts: int, index: int) -> int:
    """The index-th of `parts` near-equal integer shares of `total`."""
    return total // parts + (1 if index < total % parts else 0)


def _nodes(job: _Job) -> list[_Node]:
    return [
        _Node(i, f"node-{i:03d}", 4000 + 97 * i, straggler=(i == job.nodes - 1 and job.nodes > 1))
        for i in range(job.nodes)
    ]


class _NodeRecords:
    """One node's records (its agent's run and its workers' runs)."""

    def __init__(self) -> None:
        self.by_run: dict[str, list[_Record]] = defaultdict(list)
        # run -> (tag, value, wall time, step): what rank 0 logs with its epoch events.
        self.scalars: dict[str, list[tuple[str, float, float, int]]] = defaultdict(list)

    def add(self, run: str, kind: str, payload: str, wall_time: float) -> None:
        self.by_run[run].append(_Record(kind, payload, wall_time))


def _node_records(
    job: _Job, node: _Node, plans: list[_Attempt], epochs: int, seed: int
) -> _NodeRecords:
    """Everything one node records over the job: deterministic from ``seed`` and the plans."""
    rng = random.Random(seed * 1_000_003 + node.index + 1)
    out = _NodeRecords()
    for plan in plans:
        node.group_rank = plan.group_ranks[node.index]
        _rendezvous_round(job, node, plan, out, rng)
        _training(job, node, plan, out, rng, epochs)
    return out


def _rendezvous_round(
    job: _Job, node: _Node, plan: _Attempt, out: _NodeRecords, rng: random.Random
) -> None:
    """One node's records of one rendezvous round, up to its workers' START."""
    rid, attempt, d = job.run_id, plan.index, node.desc
    run = contract.agent_run_name(rid, node.host, node.pid)
    tj = plan.joins[node.index]

    def rdzv(method, message, when, state="RUNNING", rank=None):
        out.add(run, contract.RENDEZVOUS, _rdzv(method, rid, message, node, state, rank), when)

    rdzv(
        f"{_HANDLER}.next_rendezvous",
        f"The node '{d}' attempts to join the next round of the rendezvous '{rid}'.",
        tj,
    )
    rdzv(
        f"{_EXECUTOR}._add_to_participants",
        f"The node '{d}' added itself to the participants of round {attempt} of the "
        f"rendezvous '{rid}'. Pending sync.",
        tj + 0.05,
    )
    rdzv(
        f"{_EXECUTOR}.run",
        f"The node '{d}' has successfully synced its local changes with other nodes in "
        f"the rendezvous '{rid}'.",
        tj + 0.06,
    )
    if node.index == plan.closer:
        rdzv(
            f"{_EXECUTOR}._mark_rendezvous_complete",
            f"The node '{d}' marked round {attempt} of the rendezvous '{rid}' as "
            "complete. Pending sync.",
            plan.complete - 0.1,
            "SUCCEEDED",
        )
    joined = plan.complete + rng.uniform(0.0, 0.05)
    rdzv(
        f"{_HANDLER}.next_rendezvous",
        f"The node '{d}' has joined round {attempt} of the rendezvous '{rid}' as rank "
        f"{node.group_rank} in a world of size {job.nodes}.",
        joined,
        rank=node.group_rank,
    )
    rdzv_ms = (joined - tj) * 1000.0
    out.add(
        run,
        contract.AGENT,
        _agent_event("RENDEZVOUS", "AGENT", job, node, attempt, duration_ms=rdzv_ms),
        joined + 0.001,
    )
    out.add(
        run,
        contract.AGENT,
        _agent_event("ASSIGN_WORKER_RANKS", "AGENT", job, node, attempt, duration_ms=3.2),
        joined + 0.005,
    )
    for local in range(job.workers_per_node):
        grank = node.group_rank * job.workers_per_node + local
        out.add(
            run,
            contract.WORKER,
            _agent_event("START", "WORKER", job, node, attempt, (local, grank)),
            joined + 0.4 + 0.01 * local,
        )


def _training(
    job: _Job, node: _Node, plan: _Attempt, out: _NodeRecords, rng: random.Random, epochs: int
) -> None:
    """One node's records of one attempt's training: keep-alives, epochs per worker (the
    straggler is slow), its workers' ends; after the last attempt, its verdict."""
    rid, attempt = job.run_id, plan.index
    train0, stop, end, failing = plan.train0, plan.stop, plan.end, plan.failing
    run = contract.agent_run_name(rid, node.host, node.pid)
    n_beats = plan.beats[node.index]
    period = (stop - train0) / max(1, n_beats)
    # Every heartbeat of a node is the same event, only its time differs.
    beat = _rdzv(
        f"{_HANDLER}._keep_alive",
        rid,
        f"The node '{node.desc}' has sent a keep-alive heartbeat to the rendezvous '{rid}'.",
        node,
        "RUNNING",
    )
    jitter, uniform = period * 0.1, rng.random
    out.by_run[run].extend(
        _Record(contract.RENDEZVOUS, beat, train0 + i * period + uniform() * jitter)
        for i in range(n_beats)
    )
    for local in range(job.workers_per_node):
        grank = node.group_rank * job.workers_per_node + local
        wpid = node.worker_pid(local, attempt)
        if failing is None:
            state, when, raw, code = "SUCCEEDED", end + (8.0 if node.straggler else 0.0), None, 0
        elif node.index == failing and local == 0:
            state, when, code = "FAILED", stop, 1
            raw = _error_file_data(grank, stop)
        else:
            state, when, raw, code = "TERMINATED", stop + 0.8, None, None
        ended = _agent_event(
            state,
            "WORKER",
            job,
            node,
            attempt,
            (local, grank),
            raw_error=raw,
            exit_code=code,
            worker_pid=wpid if code is not None else None,
        )
        out.add(run, contract.WORKER, ended, when + 0.01 * local)
    if plan.last:
        finish = (stop + 1.5) if failing is not None else end + (8.5 if node.straggler else 0.5)
        closed = f"The node '{node.desc}' has closed the rendezvous '{rid}'."
        out.add(
            run,
            contract.RENDEZVOUS,
            _rdzv(f"{_HANDLER}._close", rid, closed, node, "SUCCEEDED"),
            finish,
        )
        verdict = "FAILED" if failing is not None else "SUCCEEDED"
        out.add(
            run, contract.AGENT, _agent_event(verdict, "AGENT", job, node, attempt), finish + 0.01
        )


def _worker_records(
    job: _Job, rank: int, plans: list[_Attempt], epochs: int, seed: int
) -> _NodeRecords:
    """What one global rank's own run holds: its epochs in every attempt, on whichever node
    the rendezvous put it (the straggler node's ranks are slow)."""
    rng = random.Random(seed * 3_000_017 + rank + 1)
    nodes = _nodes(job)
    out = _NodeRecords()
    worker_run = contract.run_name_from_env({"TORCHELASTIC_RUN_ID": job.run_id, "RANK": str(rank)})
    out.by_run[worker_run] = []  # the run exists (its rank windows) even without epochs
    for plan in plans:
        node = nodes[plan.order[rank // job.workers_per_node]]
        slow = 1.35 if node.straggler else 1.0
        train0, stop, attempt = plan.train0, plan.stop, plan.index
        for epoch in range(epochs):
            when = min(train0 + (epoch + 1) * (stop - train0) / (epochs + 1) * slow, stop - 0.5)
            loss = round(2.5 / (1 + epoch + attempt) + rng.random() * 0.05, 4)
            speed = round(rng.gauss(1800 / slow, 40), 1)
            data = {"epoch": epoch, "rank": rank, "attempt": attempt}
            data.update(loss=loss, samples_per_s=speed)
            out.add(
                worker_run, contract.MONITOR, _monitor_event("train.epoch_end", when, data), when
            )
            if rank == 0:  # training scripts log their metrics from rank 0
                metric_step = attempt * epochs + epoch
                out.scalars[worker_run].append(("train/loss", loss, when, metric_step))
                out.scalars[worker_run].append(("train/samples_per_s", speed, when, metric_step))
    return out


_WINDOW_S, _STEP_S = 10.0, 0.1  # a synthetic rank's step windows and its step's compute


def _write_windows(
    writer: AsyncWriter, job: _Job, plans: list[_Attempt], rank: int, seed: int
) -> int:
    """A rank's 10-s step windows (``rank_window_scalars``) through every attempt it trained;
    ranks on the straggler node compute 1.35x longer, and every rank waits for them."""
    rng = random.Random(seed * 7_000_003 + rank)
    period = _STEP_S * 1.35 * 1.05 + 0.002
    steps = max(1, round(_WINDOW_S / period))
    nodes = _nodes(job)
    add, windows = writer.add_scalars, 0
    for plan in plans:
        straggler = nodes[plan.order[rank // job.workers_per_node]].straggler
        compute_base = _STEP_S * (1.35 if straggler else 1.0)
        t = plan.train0 + _WINDOW_S
        while t <= plan.stop:
            compute = compute_base * (1 + rng.uniform(-0.05, 0.05))
            add(rank_window_scalars(compute, period - compute, steps), wall_time=t)
            t += _WINDOW_S
            windows += 1
    return windows


def _write_runs(args: tuple) -> tuple[dict[tuple[str, str], int], float, int]:
    """Write some nodes' agent runs and some ranks' runs (each run has one writer); return
    their events per (run, kind), the last event's time and the rank windows written."""
    logdir, job, indexes, ranks, plans, epochs, seed, scalars, rank_stats = args
    counts: dict[tuple[str, str], int] = {}
    last, windows = 0.0, 0

    def write(records: _NodeRecords, rank: int | None = None) -> None:
        nonlocal last, windows
        for run, recs in records.by_run.items():
            recs.sort(key=lambda r: r.wall_time)
            if recs:
                last = max(last, recs[-1].wall_time)
            with AsyncWriter(fs.join(logdir, run)) as writer:
                for rec in recs:
                    writer.add_timeline(rec.kind, rec.payload, rec.wall_time)
                    counts[(run, rec.kind)] = counts.get((run, rec.kind), 0) + 1
                if scalars:
                    for tag, value, wall_time, step in records.scalars.get(run, ()):
                        writer.add_scalar(tag, value, wall_time=wall_time, step=step)
                if rank_stats and rank is not None:
                    windows += _write_windows(writer, job, plans, rank, seed)

    nodes = _nodes(job)
    for index in indexes:
        write(_node_records(job, nodes[index], plans, epochs, seed))
    for rank in ranks:
        write(_worker_records(job, rank, plans, epochs, seed), rank)
    return counts, last, windows


def generate_job(
    logdir: str | os.PathLike[str],
    *,
    nodes: int = 8,
    workers_per_node: int = 2,
    events: int = 0,
    hours: float | None = None,
    restarts: int = 1,
    run_id: str = "job",
    start: float = DEFAULT_START,
    heartbeat_s: float = 5.0,
    epochs: int = 3,
    seed: int = 0,
    scalars: bool = False,
    rank_stats: bool = False,
    fail_last: bool = False,
    processes: int = 1,
) -> SyntheticJob:
    """Write a synthetic elastic job into ``logdir`` and describe what was written.

    ``events`` is the total number of timeline records wanted (heartbeats make up the difference;
    0 lets the job be small and natural); or ``hours`` gives the job's length instead, each node
    sending a keep-alive every ``heartbeat_s`` throughout (a 1,024-node day: ``nodes=1024,
    workers_per_node=4, hours=24, restarts=3``, ~18M events). ``restarts`` failed attempts precede
    the final, successful one; the last node is a straggler in every rendezvous and in training.
    ``scalars`` also writes rank 0's ``train/loss`` and ``train/samples_per_s`` per epoch (what a
    real job logs besides its events, and what TensorBoard's Scalars tab draws);
    ``rank_stats`` every rank's 10-s step windows as ``rank_health`` writes them.
    ``fail_last`` makes the final attempt fail as well: the job ends FAILED. Deterministic from
    ``seed``; ``processes`` > 1 writes the nodes in that many processes, with the project's own
    writer (each event file then holds what one node wrote).
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes!r}")
    if workers_per_node < 1:
        raise ValueError(f"workers_per_node must be at least 1, got {workers_per_node!r}")
    if restarts < 0:
        raise ValueError(f"restarts must be non-negative, got {restarts!r}")
    if events < 0:
        raise ValueError(f"events must be non-negative, got {events!r}")
    if hours is not None and not hours > 0:
        raise ValueError(f"hours must be positive, got {hours!r}")
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes!r}")
    job = _Job(run_id, nodes, workers_per_node)
    plans = _plan(
        job,
        events=events,
        hours=hours,
        restarts=restarts,
        start=start,
        heartbeat_s=heartbeat_s,
        epochs=epochs,
        seed=seed,
        fail_last=fail_last,
    )
    root = os.fspath(logdir)
    work = [
        (root, job, range(i, nodes, processes), range(i, job.world_size, processes), plans)
        + (epochs, seed, scalars, rank_stats)
        for i in range(min(processes, nodes))
    ]
    if len(work) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(len(work), mp_context=context) as pool:
            results = list(pool.map(_write_runs, work))
    else:
        results = [_write_runs(w) for w in work]
    result = SyntheticJob(logdir=root, run_id=run_id, start=start, end=start)
    for counts, last, windows in results:
        result.counts.update(counts)  # every run is written by one process
        result.end = max(result.end, last)
        result.rank_windows += windows
    return result


# ---------------------------------------------------------------------------------------------
# Synthetic rank health (tb_monitor.integrations.rank_health's scalars)
# ---------------------------------------------------------------------------------------------


def rank_window_scalars(compute_s: float, collective_s: float, steps: int) -> dict[str, float]:
    """One window of one rank as ``rank_health`` writes it: ``steps`` steps, each computing
    ``compute_s`` and waiting ``collective_s`` in collectives."""
    step = compute_s + collective_s
    return {
        "rank/step_s.count": steps,
        "rank/step_s.sum": steps * step,
        "rank/step_s.min": step,
        "rank/step_s.max": step,
        "rank/collective_s.count": steps,
        "rank/collective_s.sum": steps * collective_s,
        "rank/collective_s.max": collective_s,
    }


def rank_heartbeat_scalars(
    steps: int,
    entered: int,
    left: int,
    in_collective_s: float,
    since_step_s: float,
    fr_seq: int | None = None,
) -> dict[str, float]:
    """One heartbeat of one rank as ``rank_health`` writes it: steps taken, collectives entered
    and left, time inside the current collective, time since the last step boundary, and, for a
    rank that read torch's Flight Recorder while stalled, its newest collective there."""
    beat = {
        "rank/steps.value": steps,
        "rank/entered.value": entered,
        "rank/left.value": left,
        "rank/in_collective_s.value": in_collective_s,
        "rank/since_step_s.value": since_step_s,
    }
    if fr_seq is not None:
        beat["rank/fr_seq.value"] = fr_seq
    return beat


def _write_rank_windows(args: tuple) -> int:
    (logdir, run_id, rank, windows, seed, slow, window_s, start, step_s, jitter, factor) = args
    rng = random.Random(seed * 1_000_003 + rank)
    period = step_s * factor * (1 + jitter) + 0.002  # the slowest rank's step: all wait for it
    steps = max(1, round(window_s / period))
    compute_base = step_s * (factor if slow else 1.0)
    end = start
    with AsyncWriter(fs.join(os.fspath(logdir), f"{run_id}/rank-{rank}")) as writer:
        add = writer.add_scalars
        for i in range(windows):
            compute = compute_base * (1 + rng.uniform(-jitter, jitter))
            end = start + window_s * (i + 1) + rank * 0.003  # ranks close a window ms apart
            add(rank_window_scalars(compute, period - compute, steps), wall_time=end)
        done = steps * windows
        beat = rank_heartbeat_scalars(done, done, done, 0.0, period / 2)
        writer.add_scalars(beat, wall_time=end + 0.5)
    return windows


def generate_rank_windows(
    logdir: str | os.PathLike[str],
    ranks: int,
    hours: float,
    *,
    seed: int = 0,
    slow_ranks: tuple[int, ...] | list[int] = (),
    slow_factor: float = 1.5,
    window_s: float = 10.0,
    step_s: float = 0.1,
    jitter: float = 0.05,
    run_id: str = "job",
    start: float = DEFAULT_START,
    processes: int = 1,
) -> list[str]:
    """Write ``hours`` of rank-health windows for ``ranks`` ranks of a synchronous job under
    ``<logdir>/<run_id>/rank-<r>``; return the runs.

    Every rank computes ``step_s`` per step (``slow_ranks``: ``slow_factor`` times longer) with
    ``jitter`` uniform noise, and waits in collectives for the slowest rank, so step times are
    equal and compute times tell ranks apart; each rank ends with one healthy heartbeat.
    Deterministic for a ``seed``; ``processes`` > 1 writes ranks in parallel processes.
    """
    if ranks < 1 or hours <= 0:
        raise ValueError(f"need ranks >= 1 and hours > 0, got {ranks!r}, {hours!r}")
    windows = max(1, int(round(hours * 3600 / window_s)))
    slow = set(slow_ranks)
    factor = slow_factor if slow else 1.0
    jobs = [
        (
            os.fspath(logdir),
            run_id,
            r,
            windows,
            seed,
            r in slow,
            window_s,
            start,
            step_s,
            jitter,
            factor,
        )
        for r in range(ranks)
    ]
    if processes > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            list(pool.map(_write_rank_windows, jobs, chunksize=max(1, ranks // (4 * processes))))
    else:
        for job in jobs:
            _write_rank_windows(job)
    return [f"{run_id}/rank-{r}" for r in range(ranks)]
