"""Hosts whose wall clocks differ: each rank's windows are placed by its own clock, so a host
a few windows ahead is compared with the others' windows of another moment unless the grid
moves them back (found by the fault campaign's ``clock-skew`` noise, issue 46)."""

from __future__ import annotations

import numpy as np
import pytest

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.windows import clock_shifts
from tb_monitor.testing import DEFAULT_START, rank_window_scalars

STEPS = contract.stat_tag(contract.RANK_PREFIX + "steps", "value")
WINDOWS = 20
PER_WINDOW = 5  # steps a window, every rank (they step together)


def _rank(ahead_s: float, warmup: int = 5) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One rank of a job whose first ``warmup`` 1-s windows compute 0.2 s a step, then 0.1 s,
    by a clock ``ahead_s`` ahead: its windows and its heartbeats of steps so far."""
    real = DEFAULT_START + np.arange(1, WINDOWS + 1) + 0.004
    walls = real + ahead_s
    tags: dict[str, tuple[list[float], list[float]]] = {}
    for i, wall in enumerate(walls):
        one = rank_window_scalars(0.2 if i < warmup else 0.1, 0.01, PER_WINDOW)
        for tag, value in {**one, STEPS: PER_WINDOW * (i + 1.0)}.items():
            tags.setdefault(tag, ([], []))
            tags[tag][0].append(wall)
            tags[tag][1].append(value)
    return {tag: (np.array(w), np.array(v)) for tag, (w, v) in tags.items()}


def _job(ahead_s: float) -> RankGrid:
    """Two hosts of two ranks, the second host's clock ``ahead_s`` ahead."""
    series = {f"job/rank-{r}": _rank(ahead_s if r >= 2 else 0.0) for r in range(4)}
    return RankGrid.from_series(series, window_s=1.0)


def test_a_host_four_seconds_ahead_flags_no_straggler():
    """The second host's clock 4 s ahead: its slow warm-up windows are compared with the first
    host's warm-up, not with its steady steps, and no rank is flagged."""
    assert _job(4.0).stragglers() == []


def test_the_ahead_hosts_windows_land_in_the_columns_of_the_same_steps():
    """Moved back by the whole windows its clock is ahead, every rank's window of its n-th
    steps is in one column."""
    grid = _job(4.0)
    assert grid.shape == (4, WINDOWS)
    assert (grid.steps == PER_WINDOW).all()


def test_clock_shifts_are_whole_windows_of_the_offset():
    """4.3 s ahead with 1-s windows: 4 windows; 0.3 s: none."""
    series = {"a": _rank(0.0), "b": _rank(4.3), "c": _rank(0.3), "d": _rank(-2.0)}
    shifts = clock_shifts({run: tags[STEPS] for run, tags in series.items()}, 1.0)
    assert shifts == {"b": pytest.approx(4.0), "d": pytest.approx(-2.0)}


def test_ranks_that_do_not_step_together_are_left_where_they_are():
    """A run stepping at its own pace (not in the same job's lockstep) is not moved."""
    walls = DEFAULT_START + np.arange(1, WINDOWS + 1) + 0.004
    progress = {
        "a": (walls, PER_WINDOW * np.arange(1.0, WINDOWS + 1)),
        "b": (walls, 3.0 * np.arange(1.0, WINDOWS + 1) ** 1.5),
    }
    assert clock_shifts(progress, 1.0) == {}


def test_a_restarted_rank_is_aligned_by_its_newest_attempt():
    """Counts that start again from 0 (a restarted process): the newest attempt's tell."""
    walls = DEFAULT_START + np.arange(1, 2 * WINDOWS + 1) + 0.004
    steps = PER_WINDOW * np.concatenate([np.arange(1.0, WINDOWS + 1)] * 2)
    progress = {"j/a": (walls, steps), "j/b": (walls + 3.0, steps)}
    assert clock_shifts(progress, 1.0) == {"j/b": pytest.approx(3.0)}


def test_runs_of_two_jobs_are_never_aligned_with_each_other():
    """A second job an hour after the first, at the same pace: its ranks are not moved onto
    the first job's moments (only ranks of one job step together)."""
    walls = DEFAULT_START + np.arange(1, WINDOWS + 1) + 0.004
    steps = PER_WINDOW * np.arange(1.0, WINDOWS + 1)
    progress = {"a/rank-0": (walls, steps), "b/rank-1": (walls + 3600.0, steps)}
    assert clock_shifts(progress, 1.0) == {}


def test_an_offset_within_the_heartbeats_blur_moves_nothing():
    """Counts sampled 0.8 s earlier by one process's heartbeat phase (one host, 1-s beats):
    within a beat's blur, not a skewed clock, so no rank is moved."""
    series = {"a": _rank(0.0), "b": _rank(0.8)}
    assert clock_shifts({run: tags[STEPS] for run, tags in series.items()}, 1.0) == {}
