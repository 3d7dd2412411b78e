"""Two jobs written to one logdir under torchrun's default run id "none", as the plugin meets
them: the first ran and succeeded with rank 1 a straggler; the second, in the same run
directories, runs now with rank 3 stalled (the others wait for it in a collective)."""

from __future__ import annotations

from dataclasses import dataclass

from tb_monitor.sinks import AsyncWriter
from tb_monitor.testing import DEFAULT_START, generate_job, generate_rank_windows
from tb_monitor.testing import rank_heartbeat_scalars as beat_of

HUNG_RANK = 3
SLOW_RANK = 1
RANKS = 4


@dataclass(frozen=True)
class TwoJobs:
    logdir: str
    starts: tuple[float, float]  # when each job was started (its agents join a moment later)


def write_two_jobs(logdir) -> TwoJobs:
    """Write both jobs (2 nodes x 2 workers each, 0.05 h of 10-s rank windows) into ``logdir``;
    the plugin names them ``none@HH:MM:SS`` by their agents' first record."""
    logdir = str(logdir)
    options = {"nodes": 2, "workers_per_node": 2, "restarts": 0, "run_id": "none"}
    first = generate_job(logdir, start=DEFAULT_START, **options)
    generate_rank_windows(logdir, RANKS, 0.05, run_id="none", start=first.start, slow_ranks=[1])
    second_start = first.start + 3600.0
    generate_job(logdir, start=second_start, **options)
    generate_rank_windows(logdir, RANKS, 0.05, run_id="none", start=second_start)
    when = second_start + 0.05 * 3600 + 60  # a minute after its last window
    for rank in range(RANKS):
        behind = rank == HUNG_RANK
        beat = beat_of(60, 60 if behind else 61, 60, 0.0 if behind else 45.0, 46.0)
        with AsyncWriter(f"{logdir}/none/rank-{rank}") as writer:
            writer.add_scalars(beat, wall_time=when)
    return TwoJobs(logdir, (first.start, second_start))
