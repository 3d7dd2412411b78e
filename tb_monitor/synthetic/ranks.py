"""Synthetic rank health: the scalars ``tb_monitor.rank.health`` writes, for any
number of ranks and hours, with chosen slow ranks."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from functools import partial

from tb_monitor import contract
from tb_monitor.logdir import fs
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.synthetic._parallel import map_in_processes
from tb_monitor.synthetic._plan import DEFAULT_START

__all__ = ["generate_rank_windows", "rank_heartbeat_scalars", "rank_window_scalars"]


def rank_window_scalars(
    compute_s: float, collective_s: float, steps: int, cpu_s: tuple[float, float] | None = None
) -> dict[str, float]:
    """One window of one rank as ``tb_monitor.rank.health`` writes it: ``steps`` steps, each computing
    ``compute_s`` and waiting ``collective_s`` in collectives; ``cpu_s``: its threads' seconds
    (waiting for a CPU, on one) in the window."""
    step = compute_s + collective_s
    stat_tag, step_stat, wait_stat = contract.stat_tag, contract.RANK_STEP, contract.RANK_COLLECTIVE
    cpu = {}
    if cpu_s is not None:
        cpu = {
            stat_tag(contract.RANK_CPU_WAIT, "sum"): cpu_s[0],
            stat_tag(contract.RANK_CPU_RUN, "sum"): cpu_s[1],
        }
    return {
        **cpu,
        stat_tag(step_stat, "count"): steps,
        stat_tag(step_stat, "sum"): steps * step,
        stat_tag(step_stat, "min"): step,
        stat_tag(step_stat, "max"): step,
        stat_tag(wait_stat, "count"): steps,
        stat_tag(wait_stat, "sum"): steps * collective_s,
        stat_tag(wait_stat, "max"): collective_s,
    }


def rank_heartbeat_scalars(
    steps: int,
    entered: int,
    left: int,
    in_collective_s: float,
    since_step_s: float,
    fr_seq: int | None = None,
    since_progress_s: float | None = None,
    in_save_s: float | None = None,
) -> dict[str, float]:
    """One heartbeat of one rank as ``tb_monitor.rank.health`` writes it: steps taken, collectives entered
    and left, time inside the current collective, time since the last step boundary, and, for a
    rank that read torch's Flight Recorder while stalled, its newest collective there; time since
    its last progress and inside a save (None: as an older logdir, without them)."""
    values = (
        steps,
        entered,
        left,
        in_collective_s,
        since_step_s,
        fr_seq,
        since_progress_s,
        in_save_s,
    )
    return {
        contract.beat_tag(name): value
        for name, value in zip(contract.RANK_BEATS, values, strict=True)
        if value is not None
    }


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
    slow = frozenset(slow_ranks)
    # The slowest rank's step: every rank waits for it.
    period = step_s * (slow_factor if slow else 1.0) * (1 + jitter) + 0.002
    job = _RankJob(os.fspath(logdir), run_id, seed, start, window_s, windows, period, jitter)
    computes = [(r, step_s * (slow_factor if r in slow else 1.0)) for r in range(ranks)]
    chunksize = max(1, ranks // (4 * processes))
    map_in_processes(partial(_write_rank_windows, job), computes, processes, chunksize)
    return [job.run(r) for r in range(ranks)]


@dataclass(frozen=True)
class _RankJob:
    """What every rank's windows share: where, from when, how long, and the common step."""

    logdir: str
    run_id: str
    seed: int
    start: float
    window_s: float
    windows: int
    period: float  # every rank's step, compute and collective wait together
    jitter: float  # of each window's compute, uniform around the rank's own

    def run(self, rank: int) -> str:
        return f"{self.run_id}/rank-{rank}"


def _write_rank_windows(job: _RankJob, rank_compute: tuple[int, float]) -> int:
    """One rank's run: its windows, ranks closing each a few ms apart, then one heartbeat."""
    rank, compute_base = rank_compute
    rng = random.Random(job.seed * 1_000_003 + rank)
    steps = max(1, round(job.window_s / job.period))
    end = job.start
    with AsyncWriter(fs.join(job.logdir, job.run(rank))) as writer:
        for i in range(job.windows):
            compute = compute_base * (1 + rng.uniform(-job.jitter, job.jitter))
            end = job.start + job.window_s * (i + 1) + rank * 0.003
            scalars = rank_window_scalars(compute, job.period - compute, steps)
            writer.add_scalars(scalars, wall_time=end)
        done = steps * job.windows
        beat = rank_heartbeat_scalars(done, done, done, 0.0, job.period / 2)
        writer.add_scalars(beat, wall_time=end + 0.5)
    return job.windows
