"""A job's rank health written the way the recorder writes it, for tests that compare readers.

``tb_monitor.testing.generate_rank_windows`` writes ideal windows, one per boundary. The real
recorder (``rank/health.py``'s Stats) also logs each window a few ms after its
boundary, a short window when a process closes its Stats (an attempt ending), nothing while
the job restarts, and heartbeats; a hung job's heartbeats go on without windows. This writes
all of that for a job of three attempts: the first ends 0.7 windows past a boundary, the
second 0.3 windows past one, the third is still running and hangs (rank 3 never enters the
collective the others wait in), so its stall is on record.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import DEFAULT_START, rank_heartbeat_scalars, rank_window_scalars

RANKS = 4
SLOW_RANK = 1
HUNG_RANK = 3
#: Where each attempt's last (short) window ends, in windows past its last boundary.
ATTEMPT_ENDS = (0.7, 0.3, None)  # None: still running, and hung
WINDOWS_PER_ATTEMPT = 8
#: The hung attempt's heartbeats go on this long after its last step.
HUNG_FOR_S = 45.0


@dataclass
class RecordedJob:
    logdir: str
    window_s: float
    runs: list[str] = field(default_factory=list)
    steps: int = 0  # steps each rank took, the short windows' included


def write_recorded_job(
    logdir,
    window_s: float,
    *,
    restart_windows: int = 3,
    windows_per_attempt: int = WINDOWS_PER_ATTEMPT,
    run_id: str = "job",
    start: float = DEFAULT_START,
    seed: int = 0,
) -> RecordedJob:
    """Write the job (rank 1 computing 1.5x longer, rank 3 hung at the end) under
    ``<logdir>/<run_id>/rank-<r>`` with ``window_s``-long windows from ``start`` (a restart
    records nothing for ``restart_windows`` windows, each attempt writes
    ``windows_per_attempt`` whole windows); return what it wrote."""
    rng = random.Random(seed)
    job = RecordedJob(str(logdir), window_s, [f"{run_id}/rank-{r}" for r in range(RANKS)])
    writers = [AsyncWriter(f"{logdir}/{run}") for run in job.runs]
    period = 0.15 * 1.05 + 0.002  # the slow rank's step: everyone waits for it
    steps = round(window_s / period)
    boundary = start - start % window_s  # the Stats' windows end at multiples of window_s
    for end in ATTEMPT_ENDS:
        for _ in range(windows_per_attempt):
            boundary += window_s
            job.steps += steps
            for r, writer in enumerate(writers):
                compute = 0.1 * (1.5 if r == SLOW_RANK else 1.0) * (1 + rng.uniform(-0.05, 0.05))
                late = 0.004 + 0.003 * r + rng.uniform(0.0, 0.02)  # the timer's wake-up
                wall = boundary + late
                writer.add_scalars(
                    rank_window_scalars(compute, period - compute, steps), wall_time=wall
                )
                done = job.steps
                writer.add_scalars(
                    rank_heartbeat_scalars(done, done, done, 0.0, 0.05), wall_time=wall
                )
        if end is None:
            _hang(writers, boundary, window_s, job.steps)
            break
        closed = boundary + end * window_s  # the processes close their Stats: a short window
        short = max(1, round(end * window_s / period))
        job.steps += short
        for r, writer in enumerate(writers):
            compute = 0.1 * (1.5 if r == SLOW_RANK else 1.0)
            scalars = rank_window_scalars(compute, period - compute, short)
            writer.add_scalars(scalars, wall_time=closed)
        boundary += restart_windows * window_s  # the restart: no windows for a while
    for writer in writers:
        writer.close()
    return job


def _hang(writers: list[AsyncWriter], last_step: float, window_s: float, done: int) -> None:
    """Heartbeats after the last step: ranks 0-2 inside the next collective, rank 3 outside."""
    beats = int(HUNG_FOR_S // (window_s / 2))
    for i in range(1, beats + 1):
        since = i * window_s / 2
        for r, writer in enumerate(writers):
            hung = r == HUNG_RANK
            entered = done if hung else done + 1
            beat = rank_heartbeat_scalars(done, entered, done, 0.0 if hung else since, since)
            writer.add_scalars(beat, wall_time=last_step + since)
