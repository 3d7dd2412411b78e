"""Rank windows with their step times' median and p95, as ``rank_health`` records them, for the
tests of the step-time curves (the plugin's payload, the browser, the notebook).

``tb_monitor.testing.generate_rank_windows`` writes the windows a synchronous job's ranks share
(equal step times, no quantiles); here every rank has its own median, slowly rising over the
job, and rank ``TAIL_RANK`` a long tail (a p95 far above its median), so each curve is told
apart from the others.
"""

from __future__ import annotations

import math

from tb_monitor import contract
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import rank_window_scalars

TAIL_RANK = 2
STEPS = 60  # a window's steps
P50_TAG, P95_TAG = (contract.stat_tag(contract.RANK_STEP, q) for q in ("p50", "p95"))


def median_of(rank: int, window: int) -> float:
    """Rank ``rank``'s median step time in window ``window``."""
    return 0.1 * (1 + 0.15 * rank) * (1 + 0.002 * window) + 0.005 * math.sin(window + rank)


def p95_of(rank: int, window: int) -> float:
    return median_of(rank, window) * (3.0 if rank == TAIL_RANK else 1.3)


def write_step_quantiles(
    logdir, ranks: int, windows: int, *, start: float, run_id: str = "job", window_s: float = 10.0
) -> list[str]:
    """``windows`` windows of ``ranks`` ranks from ``start`` under ``<logdir>/<run_id>``; the
    runs written."""
    runs = []
    for rank in range(ranks):
        run = f"{run_id}/rank-{rank}"
        with AsyncWriter(f"{logdir}/{run}") as writer:
            for i in range(windows):
                p50 = median_of(rank, i)
                scalars = rank_window_scalars(p50 * 1.05, 0.002, STEPS)  # the mean over the median
                scalars.update({P50_TAG: p50, P95_TAG: p95_of(rank, i)})
                writer.add_scalars(scalars, wall_time=start + window_s * (i + 1) + rank * 0.003)
        runs.append(run)
    return runs
