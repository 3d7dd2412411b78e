"""tb_monitor.analysis.grid.RankGrid: one window rule, scores, stalls and the heatmap's columns."""

from __future__ import annotations

import numpy as np
import pytest
from rank_jobs import HUNG_RANK, SLOW_RANK, write_recorded_job

from tb_monitor.analysis.grid import BEAT_TAGS, WINDOW_TAGS, RankGrid, infer_window_s, slot_of
from tb_monitor.testing import DEFAULT_START, generate_rank_windows, rank_window_scalars

COUNT, TOTAL, WAIT, GRAD_WAIT, P50, P95, CPU_WAIT, CPU_RUN, CPU_THROTTLED = WINDOW_TAGS


def _series(walls, compute=0.1, wait=0.01, steps=50):
    """One run's window columns: every window ``steps`` steps of ``compute`` + ``wait`` s."""
    walls = np.asarray(walls, dtype=np.float64)
    one = rank_window_scalars(compute, wait, steps)
    return {tag: (walls, np.full(len(walls), one[tag])) for tag in WINDOW_TAGS if tag in one}


def _cells(walls, window_s=None):
    grid = RankGrid.from_series({"job/rank-0": _series(walls)}, window_s=window_s)
    return grid, grid.steps[0]


def test_a_window_logged_after_its_boundary_is_that_boundarys():
    """Windows logged a few ms (up to half a window) late land on consecutive columns."""
    start = DEFAULT_START
    grid, steps = _cells([start + 10.004, start + 20.3, start + 30.001], window_s=10.0)
    assert grid.shape == (1, 3) and steps.tolist() == [50, 50, 50]
    assert grid.window_ends().tolist() == [start + 10, start + 20, start + 30]


def test_a_short_last_window_is_kept():
    """A process closing its Stats 7 s into a window logs a short window: it is its own column."""
    start = DEFAULT_START
    grid, steps = _cells([start + 10.004, start + 20.004, start + 27.0], window_s=10.0)
    assert steps.tolist() == [50, 50, 50] and grid.recorded == 3


def test_two_windows_in_one_slot_are_summed_not_dropped():
    """A short window closed 3 s past a boundary joins the window before it: both counted."""
    _, steps = _cells([DEFAULT_START + 10.004, DEFAULT_START + 13.0], window_s=10.0)
    assert steps.tolist() == [100]


def test_slot_of_is_the_nearest_boundary_at_or_after_half_a_window_back():
    """A point belongs to the window whose end is within half a window after it or just before."""
    assert slot_of([99.9, 100.0, 104.9, 105.1, 109.0], 10.0).tolist() == [10, 10, 10, 11, 11]


@pytest.mark.parametrize("window_s", [10.0, 5.0, 0.5])
def test_the_window_is_inferred_from_the_recorder(tmp_path, window_s):
    """Late logging, short windows at each attempt's end and restarts: the window is the
    recorder's (``TB_MONITOR_RANK_WINDOW_S``), not the shortest gap."""
    write_recorded_job(tmp_path, window_s)
    assert RankGrid.from_logdir(tmp_path).window_s == window_s


@pytest.mark.parametrize("window_s", [10.0, 0.5, 2.5])
def test_a_sample_of_the_windows_tells_the_window(window_s):
    """TensorBoard keeps 1,000 of a day's 8,640 windows: gaps of any number of windows (and
    the timer's ms of latency) still give the window."""
    rng = np.random.default_rng(0)
    ends = DEFAULT_START + window_s * np.arange(1, 8641) + rng.uniform(0.004, 0.02, 8640)
    kept = [np.sort(rng.choice(ends, 1000, replace=False)) for _ in range(4)]
    assert infer_window_s(kept) == window_s


def test_with_one_window_a_rank_the_environment_names_the_window(monkeypatch):
    """No gap to infer from: ``$TB_MONITOR_RANK_WINDOW_S`` (else 10 s)."""
    assert infer_window_s([np.array([DEFAULT_START + 10])]) is None
    monkeypatch.setenv("TB_MONITOR_RANK_WINDOW_S", "5")
    grid, _ = _cells([DEFAULT_START + 5.01])
    assert grid.window_s == 5.0


@pytest.mark.parametrize("window_s", [10.0, 5.0])
def test_every_step_written_is_on_the_grid(tmp_path, window_s):
    """All windows of a recorded job, the short last ones included, hold every step taken."""
    job = write_recorded_job(tmp_path, window_s)
    grid = RankGrid.from_logdir(tmp_path)
    assert grid.steps.sum(axis=1).tolist() == [job.steps] * len(job.runs)


def test_five_second_windows_keep_their_columns(tmp_path):
    """generate_rank_windows with 5-s windows: one column per window, no window merged."""
    generate_rank_windows(tmp_path, 4, 0.1, slow_ranks=[2], window_s=5.0)
    grid = RankGrid.from_logdir(tmp_path)
    assert grid.window_s == 5.0 and grid.shape == (4, 72) and grid.recorded == 4 * 72


def test_the_slow_rank_is_scored_and_flagged(tmp_path):
    """Rank 1 computing 1.5x longer: relative about 1.5, flagged, first; no other rank flagged."""
    generate_rank_windows(tmp_path, 4, 0.1, slow_ranks=[1])
    scores = RankGrid.from_logdir(tmp_path).scores()
    assert scores[0].rank == 1 and scores[0].relative == pytest.approx(1.5, rel=0.1)
    assert [s.rank for s in scores if s.flagged] == [1]
    assert scores[0].windows_over == 36 and scores[0].run == "job/rank-1"


def test_three_windows_in_a_row_flag_and_two_do_not():
    """The flag needs 3 consecutive windows over 1.2x the median rank."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 9)
    series = {f"job/rank-{r}": _series(walls) for r in range(4)}
    for rank, slow in ((1, [2, 3, 4]), (2, [6, 7])):
        steps = np.full(8, 50.0)
        compute = np.where(np.isin(np.arange(8), slow), 0.15, 0.1)
        series[f"job/rank-{rank}"] = {
            COUNT: (walls, steps),
            TOTAL: (walls, steps * (compute + 0.01)),
            WAIT: (walls, steps * 0.01),
        }
    scores = {s.rank: s for s in RankGrid.from_series(series).scores()}
    assert scores[1].flagged and scores[1].windows_over == 3
    assert not scores[2].flagged and scores[2].windows_over == 2


def test_the_hung_rank_is_the_one_waited_for(tmp_path):
    """The recorded job's rank 3 never entered the collective the others wait in."""
    write_recorded_job(tmp_path, 10.0)
    grid = RankGrid.from_logdir(tmp_path)
    stalls = grid.stalls()
    assert [s.rank for s in stalls if s.waited_for] == [HUNG_RANK]
    assert {s.rank for s in stalls} == {0, 1, 2, 3} and stalls[0].run == f"job/rank-{HUNG_RANK}"
    assert [s.rank for s in grid.stragglers()] == [SLOW_RANK]


def test_the_flight_recorder_names_the_rank_behind():
    """No collective from Python (DDP): the rank behind in the Flight Recorder is waited for."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 4)
    beats = {
        f"job/rank-{r}": {
            "wall_time": DEFAULT_START + 80,
            "since_step_s": 46.0,
            "entered": 0,
            "left": 0,
            "in_collective_s": 0.0,
            "fr_seq": 300 if r == 3 else 301,
        }
        for r in range(4)
    }
    grid = RankGrid.from_series({run: _series(walls) for run in beats}, beats)
    stalls = grid.stalls()
    assert [s.rank for s in stalls if s.waited_for] == [3]
    assert sorted((s.rank, s.fr_seq) for s in stalls) == [(0, 301), (1, 301), (2, 301), (3, 300)]


def test_merged_columns_hold_whole_windows():
    """k windows a column, each the mean of the windows its rank recorded; the last holds the
    rest; a column is empty only where every one of its windows is."""
    walls = DEFAULT_START + 10.0 * np.array([1, 2, 3, 4, 5, 6, 10])
    grid = RankGrid.from_series({f"job/rank-{r}": _series(walls) for r in range(3)})
    assert grid.shape == (3, 10)
    merged = grid.merged(3)
    assert merged.shape == (3, 4)
    assert np.isnan(merged[:, 2]).all() and not np.isnan(merged[:, [0, 1, 3]]).any()
    np.testing.assert_allclose(merged[:, 1], np.nanmean(grid.relative[:, 3:6], axis=1))
    with pytest.raises(ValueError, match="per"):
        grid.merged(0)


def test_a_rescore_keeps_the_unchanged_windows_scores():
    """Built from a previous grid, the new windows are scored and the result equals a fresh grid."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 6)
    old = RankGrid.from_series(
        {f"job/rank-{r}": _series(walls[:3], 0.1 + r / 100) for r in range(3)}
    )
    series = {f"job/rank-{r}": _series(walls, 0.1 + r / 100) for r in range(3)}
    new = RankGrid.from_series(series, previous=old)
    np.testing.assert_array_equal(new.relative, RankGrid.from_series(series).relative)


def test_two_jobs_with_the_same_ranks_stay_apart():
    """Rows are runs: rank 0 of two jobs is two rows, each with its own run."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 4)
    grid = RankGrid.from_series({"a/rank-0": _series(walls), "b/rank-0": _series(walls)})
    assert grid.runs == ["a/rank-0", "b/rank-0"] and grid.ranks == [0, 0]


def test_from_scalars_and_from_logdir_agree(tmp_path):
    """The DataFrame and the logdir give the same grid."""
    from tb_monitor import read_scalars

    write_recorded_job(tmp_path, 5.0)
    a, b = RankGrid.from_logdir(tmp_path), RankGrid.from_scalars(read_scalars(tmp_path))
    assert a.scores() == b.scores() and a.stalls() == b.stalls()
    np.testing.assert_array_equal(a.steps, b.steps)


def test_bad_input_is_refused_naming_it():
    """Anything but a logdir or a DataFrame is a TypeError; a window of 0 a ValueError."""
    with pytest.raises(TypeError, match="42"):
        RankGrid.load(42)
    with pytest.raises(ValueError, match="window_s"):
        RankGrid.from_series({}, window_s=0.0)


def test_heartbeat_tags_are_the_contracts():
    """Each heartbeat Stat of the contract is read under its VALUE tag."""
    from tb_monitor import contract

    assert sorted(BEAT_TAGS.values()) == sorted(contract.RANK_BEATS)
    assert all(tag.startswith(contract.RANK_PREFIX) for tag in [*BEAT_TAGS, *WINDOW_TAGS])


def _ddp_job(walls, grad_waits):
    """Four ranks whose steps all take 0.1 s (DDP equalises them); each waits ``grad_waits[r]``
    a step for DDP's gradient all-reduces, and nothing in Python collectives."""
    series = {}
    for rank, grad_wait in enumerate(grad_waits):
        run = _series(walls, compute=0.1, wait=0.0)
        run[GRAD_WAIT] = (walls, np.full(len(walls), 50 * grad_wait))
        series[f"job/rank-{rank}"] = run
    return RankGrid.from_series(series, window_s=10.0)


def test_ddp_gradient_wait_counts_as_wait_so_the_rank_that_waits_least_is_flagged():
    """Equal step times, rank 1 waiting 0.005 s a step for the all-reduces and the others
    0.05 s: rank 1 computes about twice as long, and only it is flagged."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 6) + 0.01
    grid = _ddp_job(walls, [0.05, 0.005, 0.05, 0.05])
    assert [s.rank for s in grid.stragglers()] == [1]
    assert grid.collective_s[:, 0].tolist() == pytest.approx([0.05, 0.005, 0.05, 0.05])


def test_a_healthy_ddp_job_flags_nothing():
    """Every rank waiting alike in DDP's all-reduces: no straggler."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 6) + 0.01
    assert _ddp_job(walls, [0.05, 0.048, 0.051, 0.05]).stragglers() == []


def test_step_time_quantiles_land_in_their_windows_column():
    """``rank/step_s.p50`` and ``.p95`` of each window are in ``step_p50`` / ``step_p95``,
    NaN where a window has none (a logdir written before they were)."""
    walls = DEFAULT_START + 10.0 * np.arange(1, 4) + 0.01
    run = _series(walls)
    run[P50] = (walls[:2], np.array([0.1, 0.2]))
    run[P95] = (walls[:2], np.array([0.3, 0.4]))
    grid = RankGrid.from_series({"job/rank-0": run}, window_s=10.0)
    np.testing.assert_allclose(grid.step_p50[0], [0.1, 0.2, np.nan])
    np.testing.assert_allclose(grid.step_p95[0], [0.3, 0.4, np.nan])


def test_the_report_gives_each_ranks_step_time_median_and_p95_in_seconds():
    """``step_times`` holds, per rank, the median over its windows of their median and p95."""
    from tb_monitor.analysis.rank_report import rank_health

    walls = DEFAULT_START + 10.0 * np.arange(1, 4) + 0.01
    run = _series(walls)
    run[P50] = (walls, np.array([0.1, 0.2, 0.3]))
    run[P95] = (walls, np.array([0.5, 0.4, 0.6]))
    health = rank_health(RankGrid.from_series({"job/rank-0": run}, window_s=10.0))
    (times,) = health.to_json()["step_times"]
    assert (times["median_s"], times["p95_s"]) == pytest.approx((0.2, 0.5))
