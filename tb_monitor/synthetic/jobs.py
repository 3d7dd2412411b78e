"""``generate_job``: a synthetic torchelastic job's logdir, written as a real job leaves it."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace

from tb_monitor.logdir import fs
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.synthetic._parallel import map_in_processes
from tb_monitor.synthetic._plan import DEFAULT_START, SLOWDOWN, Attempt, Job, Schedule, plan
from tb_monitor.synthetic._records import Records, node_records, worker_records
from tb_monitor.synthetic.ranks import rank_window_scalars

__all__ = ["SyntheticJob", "generate_job", "job_records"]

_WINDOW_S, _STEP_S = 10.0, 0.1  # a synthetic rank's step windows and its step's compute


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
    distinct_beats: bool = False,
    keep_alive_rounds: bool = False,
) -> SyntheticJob:
    """Write a synthetic elastic job into ``logdir`` and describe what was written.

    ``events`` is the total number of timeline records wanted (heartbeats make up the difference;
    0 lets the job be small and natural); or ``hours`` gives the job's length instead, each node
    sending a keep-alive every ``heartbeat_s`` throughout (a big job's day: ``nodes=1024,
    workers_per_node=4, hours=24, restarts=3``). ``restarts`` failed attempts precede
    the final, successful one; the last node is a straggler in every rendezvous and in training.
    ``scalars`` also writes rank 0's ``train/loss`` and ``train/samples_per_s`` per epoch (what a
    real job logs besides its events, and what TensorBoard's Scalars tab draws);
    ``rank_stats`` every rank's 10-s step windows as ``tb_monitor.rank.health`` writes them.
    ``fail_last`` makes the final attempt fail as well: the job ends FAILED. Deterministic from
    ``seed``; ``processes`` > 1 writes the nodes in that many processes, with the project's own
    writer (each event file then holds what one node wrote). ``distinct_beats``: every
    keep-alive's message counts the node's heartbeats, so no two events are alike (what
    rendezvous events are, but for the keep-alives). ``keep_alive_rounds``: each keep-alive is
    the round of records torch's c10d rendezvous makes (``synthetic.rendezvous``), all counted.
    """
    beats = {"distinct_beats": distinct_beats, "keep_alive_rounds": keep_alive_rounds}
    job = Job(run_id, nodes, workers_per_node, epochs=epochs, seed=seed, **beats)
    schedule = Schedule(
        start, heartbeat_s, restarts=restarts, fail_last=fail_last, events=events, hours=hours
    )
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes!r}")
    root = os.fspath(logdir)
    share = _Share(root, job, plan(job, schedule), scalars, rank_stats)
    written = map_in_processes(_write_share, share.split(processes), processes)
    result = SyntheticJob(logdir=root, run_id=run_id, start=start, end=start)
    for part in written:
        result.counts.update(part.counts)  # every run is written by one process
        result.end = max(result.end, part.end)
        result.rank_windows += part.rank_windows
    return result


def job_records(
    *,
    nodes: int = 8,
    workers_per_node: int = 2,
    events: int = 0,
    hours: float | None = None,
    restarts: int = 1,
    seed: int = 0,
    distinct_beats: bool = False,
    keep_alive_rounds: bool = False,
    fail_last: bool = False,
) -> dict[str, list[tuple[str, str, float]]]:
    """The timeline records ``generate_job`` writes with the same options, run by run, each
    run's in time order as ``(kind, payload, wall time)``: for writing one job with other
    writers (``benchmarks/bench_scale.py`` compares two versions of ours), or for handing a
    job's records to a sink."""
    beats = {"distinct_beats": distinct_beats, "keep_alive_rounds": keep_alive_rounds}
    job = Job("job", nodes, workers_per_node, epochs=3, seed=seed, **beats)
    schedule = Schedule(
        DEFAULT_START, 5.0, restarts=restarts, fail_last=fail_last, events=events, hours=hours
    )
    plans = plan(job, schedule)
    out: dict[str, list[tuple[str, str, float]]] = {}
    parts = [node_records(job, node, plans) for node in job.node_list()]
    parts += [worker_records(job, rank, plans) for rank in range(job.world_size)]
    for records in parts:
        for run, found in records.by_run.items():
            found.sort(key=lambda r: r.wall_time)
            out[run] = [(r.kind, r.payload, r.wall_time) for r in found]
    return out


@dataclass(frozen=True)
class _Share:
    """The runs one process writes: some nodes' agents and some ranks' workers."""

    logdir: str
    job: Job
    plans: list[Attempt]
    scalars: bool
    rank_stats: bool
    nodes: range = range(0)
    ranks: range = range(0)

    def split(self, processes: int) -> list[_Share]:
        """The whole job dealt out, node by node and rank by rank, into ``processes`` shares."""
        nodes, ranks = self.job.nodes, self.job.world_size
        return [
            replace(self, nodes=range(i, nodes, processes), ranks=range(i, ranks, processes))
            for i in range(min(processes, nodes))
        ]


def _write_share(share: _Share) -> SyntheticJob:
    """Write a share's runs (each run has one writer); what it wrote, as a part of the job."""
    written = SyntheticJob(share.logdir, share.job.run_id)
    nodes = share.job.node_list()
    for index in share.nodes:
        _write_records(share, node_records(share.job, nodes[index], share.plans), written)
    for rank in share.ranks:
        _write_records(share, worker_records(share.job, rank, share.plans), written, rank)
    return written


def _write_records(
    share: _Share, records: Records, written: SyntheticJob, rank: int | None = None
) -> None:
    """Each run's records in time order, then its scalars, then (a rank's) its step windows."""
    for run, recs in records.by_run.items():
        recs.sort(key=lambda r: r.wall_time)
        if recs:
            written.end = max(written.end, recs[-1].wall_time)
        with AsyncWriter(fs.join(share.logdir, run)) as writer:
            for rec in recs:
                writer.add_timeline(rec.kind, rec.payload, rec.wall_time)
                written.counts[(run, rec.kind)] = written.counts.get((run, rec.kind), 0) + 1
            if share.scalars:
                for tag, value, wall_time, step in records.scalars.get(run, ()):
                    writer.add_scalar(tag, value, wall_time=wall_time, step=step)
            if share.rank_stats and rank is not None:
                written.rank_windows += _write_windows(writer, share.job, share.plans, rank)


def _write_windows(writer: AsyncWriter, job: Job, plans: list[Attempt], rank: int) -> int:
    """A rank's 10-s step windows (``rank_window_scalars``) through every attempt it trained;
    ranks on the straggler node compute longer, and every rank waits for them."""
    rng = random.Random(job.seed * 7_000_003 + rank)
    period = _STEP_S * SLOWDOWN * 1.05 + 0.002
    steps = max(1, round(_WINDOW_S / period))
    windows = 0
    for attempt in plans:
        compute_base = _STEP_S * (SLOWDOWN if job.on_straggler(attempt, rank) else 1.0)
        t = attempt.train0 + _WINDOW_S
        while t <= attempt.stop:
            compute = compute_base * (1 + rng.uniform(-0.05, 0.05))
            writer.add_scalars(rank_window_scalars(compute, period - compute, steps), wall_time=t)
            t += _WINDOW_S
            windows += 1
    return windows
