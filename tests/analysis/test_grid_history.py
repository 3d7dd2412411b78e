"""Folding a long job's older windows (``grid_history``): the bound, and answers that hold."""

from __future__ import annotations

import numpy as np
import pytest

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.grid_history import (
    FOLD_EVERY,
    FoldedGrid,
    History,
    view_of,
    weighted_median,
)

START = 1_700_000_000.0
WINDOW_S = 10.0
KEEP = 60
COLUMNS = 32


def _job(windows: int, ranks: int = 8, *, burst: range = range(0), seed: int = 0) -> RankGrid:
    """A synchronous job's grid: every rank ~0.1 s of compute a step with 5% noise, rank 3 1.5x
    slower during the windows of ``burst``, and a rank's p50/p95 around its step time."""
    rng = np.random.default_rng(seed)
    walls = START + WINDOW_S * np.arange(1, windows + 1) + 0.01
    compute = 0.1 * rng.uniform(0.95, 1.05, (ranks, windows))
    compute[3, burst.start : burst.stop] *= 1.5
    step = compute.max(axis=0) + 0.01
    series = {}
    for r in range(ranks):
        count = np.full(windows, 100.0)
        wait = (step - compute[r]) * count
        series[f"job/rank-{r}"] = {
            "rank/step_s.count": (walls, count),
            "rank/step_s.sum": (walls, step * count),
            "rank/collective_s.sum": (walls, wait),
            "rank/step_s.p50": (walls, step * 0.99),
            "rank/step_s.p95": (walls, step * rng.uniform(1.0, 1.3, windows)),
        }
    return RankGrid.from_series(series, window_s=WINDOW_S)


def _cut(grid: RankGrid, c0: int, c1: int) -> RankGrid:
    """Columns ``c0:c1`` of ``grid`` as a grid of their own (what a store holds whole)."""
    arrays = [a[:, c0:c1] for a in (grid.steps, grid.step_s, grid.collective_s)]
    quantiles = (grid.step_p50[:, c0:c1], grid.step_p95[:, c0:c1])
    return RankGrid(grid.runs, grid.window_s, grid.slot0 + c0, *arrays, step_quantiles=quantiles)


def _folded_as_read(grid: RankGrid, keep: int = KEEP, columns: int = COLUMNS) -> FoldedGrid:
    """``grid`` read as a live store reads it: windows arrive a few at a time, and once more than
    ``keep + FOLD_EVERY`` are whole the oldest are folded."""
    history, pos = None, 0
    for end in range(1, grid.shape[1] + 1):
        if end - pos > keep + FOLD_EVERY:
            fine = _cut(grid, pos, end)
            history = History.fold(fine, fine.shape[1] - keep, history, columns=columns)
            pos = end - keep
    assert history is not None
    return FoldedGrid(_cut(grid, pos, grid.shape[1]), history)


@pytest.fixture(scope="module")
def long_job() -> RankGrid:
    """Eight ranks for a simulated day of 10-s windows; rank 3 slow for 6 windows in hour 2."""
    return _job(8640, burst=range(800, 806))


@pytest.fixture(scope="module")
def folded(long_job) -> FoldedGrid:
    """The long job as a bounded store holds it."""
    return _folded_as_read(long_job)


def test_what_a_rank_keeps_stays_under_the_budget(folded):
    """After a day of windows a rank holds at most keep + FOLD_EVERY whole windows and at most
    COLUMNS folded columns."""
    assert folded.fine.shape[1] <= KEEP + FOLD_EVERY
    assert folded.history.p95.shape[1] <= COLUMNS
    assert all(v.shape[1] <= COLUMNS for v in folded.history.sums.values())


def test_folded_windows_are_all_counted(long_job, folded):
    """Every window is in the whole part or counted in a folded column, none twice."""
    assert folded.recorded == long_job.recorded


def test_a_straggler_burst_long_folded_is_still_flagged(long_job, folded):
    """Rank 3's six slow windows, folded hours ago, flag it as they do unbounded, with the
    same longest run."""
    full = {s.rank: s for s in long_job.scores()}
    ours = {s.rank: s for s in folded.scores()}
    assert [r for r, s in full.items() if s.flagged] == [3]
    assert [r for r, s in ours.items() if s.flagged] == [3]
    assert ours[3].windows_over == full[3].windows_over == 6


def test_medians_agree_with_the_unbounded_grid_within_one_percent(long_job, folded):
    """Each rank's median relative score, compute and typical step time are within 1% of the
    unbounded grid's (folded columns count as their mean, weighted by their windows)."""
    full = {s.rank: s for s in long_job.scores()}
    for score in folded.scores():
        assert score.relative == pytest.approx(full[score.rank].relative, rel=0.01)
        assert score.compute_s == pytest.approx(full[score.rank].compute_s, rel=0.01)
    np.testing.assert_allclose(folded.typical_step_s(), long_job.typical_step_s(), rtol=0.01)


def test_the_newest_windows_are_exact(long_job, folded):
    """The windows kept whole are the unbounded grid's own, value for value."""
    width = folded.shape[1]
    assert folded.slot0 == long_job.slot0 + long_job.shape[1] - width
    for name in ("steps", "step_s", "collective_s", "relative", "step_p50", "step_p95"):
        np.testing.assert_array_equal(
            getattr(folded, name), getattr(long_job, name)[:, -width:], err_msg=name
        )


def test_the_coarse_view_spans_the_whole_job(long_job, folded):
    """A view reaching folded time reads one grid of whole history columns from the job's first
    window to its last; a view of the newest hour reads the whole windows."""
    coarse = view_of(folded, folded.extent[0])
    assert coarse.extent == pytest.approx(long_job.extent, abs=coarse.window_s)
    assert coarse.window_s == WINDOW_S * folded.history.factor
    assert int(coarse.steps.sum()) == int(long_job.steps.sum())
    assert view_of(folded, folded.full_since) is folded.fine


def test_unit_weights_give_numpys_median():
    """With every weight 1 the weighted median is ``np.nanmedian``'s, NaN skipped."""
    values = np.array([[3.0, 1.0, np.nan, 2.0, 10.0], [np.nan] * 5, [5.0, 4.0, 1.0, 2.0, 3.0]])
    ours = weighted_median(values, np.ones(values.shape))
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        np.testing.assert_array_equal(ours, np.nanmedian(values, axis=1))
