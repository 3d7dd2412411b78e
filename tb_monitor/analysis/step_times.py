"""Each rank's step time in seconds, window by window: the median and p95 of its steps, and
several windows merged into one column the way the heatmap merges them.

The heatmap says which rank is slow relative to the others; step times say how long a step
takes, so a job that slows down as a whole (every rank at once, which relative scores cannot
show) or a rank with a long tail (a p95 far above its median) reads in seconds. Read from the
same :class:`tb_monitor.analysis.grid.RankGrid` as the heatmap and the report's ``step_times``,
by the plugin's Ranks view (``tb_plugin.ranks``) and ``tb_monitor.notebook.step_times``.
"""

from __future__ import annotations

import numpy as np

from tb_monitor.analysis.grid import RankGrid

__all__ = ["bucketed", "typical"]


def bucketed(
    grid: RankGrid, per: int, start: int = 0, stop: int | None = None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per rank, the median and p95 step time (seconds) of columns ``start:stop``, ``per``
    whole windows to a bucket (the heatmap's buckets, :meth:`RankGrid.merged`): the median is
    the step-weighted mean of the windows' medians, the p95 the largest of their p95s, so a slow
    tail is never averaged away when zoomed out; NaN where the rank recorded no window in the
    bucket. Last: whether quantiles were recorded there. A window without its median (a logdir
    written before the quantiles were, or one TensorBoard's sample of that series left out)
    counts with its mean step time, and has no p95."""
    if per < 1:
        raise ValueError(f"per must be a positive number of windows, got {per!r}")
    p50, p95 = grid.step_p50[:, start:stop], grid.step_p95[:, start:stop]
    steps, mean = grid.steps[:, start:stop], grid.step_s[:, start:stop]
    if not p50.shape[1]:
        return np.zeros((p50.shape[0], 0)), np.zeros((p50.shape[0], 0)), False
    missing = np.isnan(p50)
    recorded = not missing.all()
    value = np.where(missing, mean, p50) if recorded else mean
    weighted = np.nan_to_num(value * steps, copy=False)  # NaN only where no steps: 0
    edges = np.arange(0, p50.shape[1], per)
    # float32 sums: a bucket adds a few windows to a few thousand, never enough to lose digits
    sums, counted = (np.add.reduceat(a, edges, axis=1) for a in (weighted, steps))
    with np.errstate(invalid="ignore", divide="ignore"):
        median = np.where(counted > 0, sums / counted, np.float32(np.nan))
    if recorded:
        tail = np.fmax.reduceat(p95, edges, axis=1)
    else:
        tail = np.full(median.shape, np.nan, np.float32)
    return median, tail, recorded


def typical(per_rank: np.ndarray) -> np.ndarray:
    """Per column, the median rank's value (NaN where no rank has one): the line a straggler
    or a slow tail is read against. One sort of the columns (``np.nanmedian`` goes column by
    column, which is slow for many ranks)."""
    ordered = np.sort(per_rank, axis=0)  # NaN last
    n = np.count_nonzero(~np.isnan(ordered), axis=0)
    if not ordered.shape[0]:
        return np.full(ordered.shape[1], np.nan)
    low, high = (np.maximum(i, 0)[None] for i in ((n - 1) // 2, n // 2))
    both = np.take_along_axis(ordered, low, 0) + np.take_along_axis(ordered, high, 0)
    return np.where(n > 0, both[0] / 2, np.nan)
