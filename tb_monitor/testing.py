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


class _Records:
    """Records per run, in the order they happen, each tag written with increasing steps."""

    def __init__(self) -> None:
        self.by_run: dict[str, list[_Record]] = defaultdict(list)
        # run -> (tag, value, wall time, step): what rank 0 logs with its epoch events.
        self.scalars: dict[str, list[tuple[str, float, float, int]]] = defaultdict(list)

    def add(self, run: str, kind: str, payload: str, wall_time: float) -> None:
        self.by_run[run].append(_Record(kind, payload, wall_time))


def _simulate(
    job: _Job,
    *,
    events: int,
    restarts: int,
    start: float,
    heartbeat_s: float,
    epochs: int,
    seed: int,
    fail_last: bool = False,
) -> _Records:
    rng = random.Random(seed)
    nodes = [
        _Node(i, f"node-{i:03d}", 4000 + 97 * i, straggler=(i == job.nodes - 1 and job.nodes > 1))
        for i in range(job.nodes)
    ]
    attempts = restarts + 1
    # Fixed records per node and attempt: 4 rendezvous, 2 agent, START and an end per worker,
    # `epochs` monitor events per worker; one "complete" per round; per node at the end the
    # rendezvous close and the agent's verdict.
    fixed = job.nodes * attempts * (4 + 2 + job.workers_per_node * (2 + epochs)) + attempts
    fixed += job.nodes * 2
    beats = max(0, events - fixed) if events else job.nodes * attempts * 4
    out = _Records()
    t = start
    for attempt in range(attempts):
        t = _attempt(
            job, nodes, attempt, attempts, t, out, rng, beats, heartbeat_s, epochs, fail_last
        )
    return out


def _share(total: int, parts: int, index: int) -> int:
    """The index-th of `parts` near-equal integer shares of `total`."""
    return total // parts + (1 if index < total % parts else 0)


def _attempt(
    job: _Job,
    nodes: list[_Node],
    attempt: int,
    attempts: int,
    t0: float,
    out: _Records,
    rng: random.Random,
    beats: int,
    heartbeat_s: float,
    epochs: int,
    fail_last: bool = False,
) -> float:
    """Simulate one rendezvous round and the training attempt after it; return its end time."""
    rid = job.run_id
    last = attempt == attempts - 1
    joins = {n.index: t0 + rng.uniform(0.0, 1.5) + (18.0 if n.straggler else 0.0) for n in nodes}
    order = sorted(nodes, key=lambda n: joins[n.index])
    complete = joins[order[-1].index] + 0.2
    for rank, node in enumerate(order):
        node.group_rank = rank
    for node in nodes:
        run = contract.agent_run_name(rid, node.host, node.pid)
        tj = joins[node.index]
        d = node.desc

        def rdzv(method, message, when, state="RUNNING", rank=None, run=run, node=node):
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
        if node is order[-1]:
            rdzv(
                f"{_EXECUTOR}._mark_rendezvous_complete",
                f"The node '{d}' marked round {attempt} of the rendezvous '{rid}' as "
                "complete. Pending sync.",
                complete - 0.1,
                "SUCCEEDED",
            )
        joined = complete + rng.uniform(0.0, 0.05)
        rdzv(
            f"{_HANDLER}.next_rendezvous",
            f"The node '{d}' has joined round {attempt} of the rendezvous '{rid}' as rank "
            f"{node.group_rank} in a world of size {job.nodes}.",
            joined,
            rank=node.group_rank,
        )
        rec = out.add
        rdzv_ms = (joined - tj) * 1000.0
        rec(
            run,
            contract.AGENT,
            _agent_event("RENDEZVOUS", "AGENT", job, node, attempt, duration_ms=rdzv_ms),
            joined + 0.001,
        )
        rec(
            run,
            contract.AGENT,
            _agent_event("ASSIGN_WORKER_RANKS", "AGENT", job, node, attempt, duration_ms=3.2),
            joined + 0.005,
        )
        for local in range(job.workers_per_node):
            grank = node.group_rank * job.workers_per_node + local
            rec(
                run,
                contract.WORKER,
                _agent_event("START", "WORKER", job, node, attempt, (local, grank)),
                joined + 0.4 + 0.01 * local,
            )

    # Training: heartbeats every `heartbeat_s` per node, epochs per worker; the straggler is slow.
    node_beats = [_share(_share(beats, attempts, attempt), len(nodes), n.index) for n in nodes]
    duration = max(60.0, max(node_beats) * heartbeat_s)
    train0 = complete + 1.0
    end = train0 + duration
    failing = None if last and not fail_last else nodes[(attempt * 7 + 3) % len(nodes)]
    fail_at = train0 + duration * 0.8 if failing else None
    stop = fail_at if failing else end
    for node in nodes:
        run = contract.agent_run_name(rid, node.host, node.pid)
        n_beats = node_beats[node.index]
        step = (stop - train0) / max(1, n_beats)
        # Every heartbeat of a node is the same event, only its time differs.
        beat = _rdzv(
            f"{_HANDLER}._keep_alive",
            rid,
            f"The node '{node.desc}' has sent a keep-alive heartbeat to the rendezvous '{rid}'.",
            node,
            "RUNNING",
        )
        for i in range(n_beats):
            when = train0 + i * step + rng.uniform(0.0, step * 0.1)
            out.add(run, contract.RENDEZVOUS, beat, when)
        slow = 1.35 if node.straggler else 1.0
        for local in range(job.workers_per_node):
            grank = node.group_rank * job.workers_per_node + local
            worker_run = contract.run_name_from_env(
                {"TORCHELASTIC_RUN_ID": rid, "RANK": str(grank)}
            )
            for epoch in range(epochs):
                when = train0 + (epoch + 1) * (stop - train0) / (epochs + 1) * slow
                when = min(when, stop - 0.5)
                loss = round(2.5 / (1 + epoch + attempt) + rng.random() * 0.05, 4)
                speed = round(rng.gauss(1800 / slow, 40), 1)
                out.add(
                    worker_run,
                    contract.MONITOR,
                    _monitor_event(
                        "train.epoch_end",
                        when,
                        {
                            "epoch": epoch,
                            "rank": grank,
                            "attempt": attempt,
                            "loss": loss,
                            "samples_per_s": speed,
                        },
                    ),
                    when,
                )
                if grank == 0:  # training scripts log their metrics from rank 0
                    step = attempt * epochs + epoch
                    out.scalars[worker_run].append(("train/loss", loss, when, step))
                    out.scalars[worker_run].append(("train/samples_per_s", speed, when, step))
            wpid = node.worker_pid(local, attempt)
            if failing is None:
                state, when, raw, code = (
                    "SUCCEEDED",
                    end + (8.0 if node.straggler else 0.0),
                    None,
                    0,
                )
            elif node is failing and local == 0:
                state, when, code = "FAILED", stop, 1
                raw = _error_file_data(grank, stop)
            else:
                state, when, raw, code = "TERMINATED", stop + 0.8, None, None
            out.add(
                run,
                contract.WORKER,
                _agent_event(
                    state,
                    "WORKER",
                    job,
                    node,
                    attempt,
                    (local, grank),
                    raw_error=raw,
                    exit_code=code,
                    worker_pid=wpid if code is not None else None,
                ),
                when + 0.01 * local,
            )
        if last:
            finish = (stop + 1.5) if failing else end + (8.5 if node.straggler else 0.5)
            out.add(
                run,
                contract.RENDEZVOUS,
                _rdzv(
                    f"{_HANDLER}._close",
                    rid,
                    f"The node '{node.desc}' has closed the rendezvous '{rid}'.",
                    node,
                    "SUCCEEDED",
                ),
                finish,
            )
            verdict = "FAILED" if failing else "SUCCEEDED"
            out.add(
                run,
                contract.AGENT,
                _agent_event(verdict, "AGENT", job, node, attempt),
                finish + 0.01,
            )
    return (stop if failing else end) + 2.0


def generate_job(
    logdir: str | os.PathLike[str],
    *,
    nodes: int = 8,
    workers_per_node: int = 2,
    events: int = 0,
    restarts: int = 1,
    run_id: str = "job",
    start: float = DEFAULT_START,
    heartbeat_s: float = 5.0,
    epochs: int = 3,
    seed: int = 0,
    scalars: bool = False,
    fail_last: bool = False,
) -> SyntheticJob:
    """Write a synthetic elastic job into ``logdir`` and describe what was written.

    ``events`` is the total number of timeline records wanted (heartbeats make up the difference;
    0 lets the job be small and natural). ``restarts`` failed attempts precede the final,
    successful one; the last node is a straggler in every rendezvous and in training.
    ``scalars`` also writes rank 0's ``train/loss`` and ``train/samples_per_s`` per epoch (what a
    real job logs besides its events, and what TensorBoard's Scalars tab draws).
    ``fail_last`` makes the final attempt fail as well: the job ends FAILED.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes!r}")
    if workers_per_node < 1:
        raise ValueError(f"workers_per_node must be at least 1, got {workers_per_node!r}")
    if restarts < 0:
        raise ValueError(f"restarts must be non-negative, got {restarts!r}")
    if events < 0:
        raise ValueError(f"events must be non-negative, got {events!r}")
    job = _Job(run_id, nodes, workers_per_node)
    records = _simulate(
        job,
        events=events,
        restarts=restarts,
        start=start,
        heartbeat_s=heartbeat_s,
        epochs=epochs,
        seed=seed,
        fail_last=fail_last,
    )
    result = SyntheticJob(logdir=os.fspath(logdir), run_id=run_id, start=start, end=start)
    for run, recs in records.by_run.items():
        recs.sort(key=lambda r: r.wall_time)
        result.end = max(result.end, recs[-1].wall_time)
        with AsyncWriter(fs.join(os.fspath(logdir), run)) as writer:
            for rec in recs:
                writer.add_timeline(rec.kind, rec.payload, rec.wall_time)
                key = (run, rec.kind)
                result.counts[key] = result.counts.get(key, 0) + 1
            if scalars:
                for tag, value, wall_time, step in records.scalars.get(run, ()):
                    writer.add_scalar(tag, value, wall_time=wall_time, step=step)
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
        beat = {
            "rank/steps.value": steps * windows,
            "rank/entered.value": steps * windows,
            "rank/left.value": steps * windows,
            "rank/in_collective_s.value": 0.0,
            "rank/since_step_s.value": period / 2,
        }
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
