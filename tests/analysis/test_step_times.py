"""tb_monitor.analysis.step_times: each rank's step time median and p95, merged into buckets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.step_times import bucketed, typical

NAN = np.nan


def _grid(steps, step_s, p50, p95) -> RankGrid:
    arrays = [np.array(a, dtype=np.float32) for a in (steps, step_s, p50, p95)]
    runs = [f"job/rank-{r}" for r in range(len(arrays[0]))]
    wait = np.zeros_like(arrays[0])
    return RankGrid(runs, 10.0, 100, arrays[0], arrays[1], wait, step_quantiles=tuple(arrays[2:]))


def test_a_bucket_weighs_each_windows_median_by_its_steps_and_keeps_the_largest_p95():
    """Two windows a bucket: median (10*0.1 + 30*0.2) / 40, p95 the larger; a window the rank
    did not record counts for nothing."""
    grid = _grid(
        steps=[[10, 30, 0, 20]],
        step_s=[[0.1, 0.2, NAN, 0.3]],
        p50=[[0.1, 0.2, NAN, 0.3]],
        p95=[[0.5, 0.25, NAN, 0.4]],
    )
    median, tail, recorded = bucketed(grid, 2)
    assert recorded is True
    np.testing.assert_allclose(median, [[(1.0 + 6.0) / 40, 0.3]], rtol=1e-6)
    np.testing.assert_allclose(tail, [[0.5, 0.4]], rtol=1e-6)


def test_a_window_without_its_median_counts_with_its_mean_step():
    """Where TensorBoard kept a window's count but not its median, its mean step stands in."""
    grid = _grid(steps=[[10, 10]], step_s=[[0.1, 0.3]], p50=[[0.1, NAN]], p95=[[0.2, NAN]])
    median, tail, _ = bucketed(grid, 2)
    np.testing.assert_allclose(median, [[0.2]], rtol=1e-6)
    np.testing.assert_allclose(tail, [[0.2]], rtol=1e-6)


def test_without_any_quantile_the_medians_are_the_mean_steps_and_there_is_no_p95():
    """A logdir written before the quantiles: the window means, no p95, and it says so."""
    grid = _grid(steps=[[10, 10]], step_s=[[0.1, 0.3]], p50=[[NAN, NAN]], p95=[[NAN, NAN]])
    median, tail, recorded = bucketed(grid, 1)
    assert recorded is False
    np.testing.assert_allclose(median, [[0.1, 0.3]], rtol=1e-6)
    assert np.isnan(tail).all()


def test_bucketing_rejects_a_non_positive_width():
    """``per`` below one window is a ValueError naming it."""
    grid = _grid(steps=[[1]], step_s=[[0.1]], p50=[[0.1]], p95=[[0.1]])
    with pytest.raises(ValueError, match="got 0"):
        bucketed(grid, 0)


@pytest.mark.parametrize("shape", [(1, 5), (2, 7), (5, 9), (64, 100), (0, 3)])
def test_the_typical_rank_is_numpys_nanmedian(shape):
    """Per column the median rank's value, NaN where no rank has one, as np.nanmedian says."""
    rng = np.random.default_rng(sum(shape))
    values = rng.random(shape).astype(np.float32)
    values[rng.random(shape) < 0.3] = NAN
    if shape[1] > 2:
        values[:, 2] = NAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.nanmedian(values, axis=0) if shape[0] else np.full(shape[1], NAN)
    np.testing.assert_allclose(typical(values), expected, rtol=1e-6, equal_nan=True)
