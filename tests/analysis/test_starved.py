"""A rank starved of CPU is named, even when its compute reads normal (issue 46, item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.jobs import JobSpan, job_grid
from tb_monitor.analysis.rank_report import rank_health
from tb_monitor.analysis.report_text import ranks_lines
from tb_monitor.analysis.scoring import FLAG_WINDOWS, starved_windows
from tb_monitor.testing import DEFAULT_START, rank_window_scalars

WINDOWS = 2 * FLAG_WINDOWS + 2
_CPU_WAIT = contract.stat_tag(contract.RANK_CPU_WAIT, "sum")
_THROTTLED = contract.stat_tag(contract.RANK_CPU_THROTTLED, "sum")


def _series(
    shares: dict[int, list[float]],
    compute: dict[int, float] | None = None,
    runnable: dict[int, float] | None = None,
) -> dict:
    """Ranks with equal compute (0.1 s a step, 50 steps a window) unless ``compute`` says,
    whose threads spent ``shares[rank][window]`` of their runnable time waiting for a CPU
    (each window 1 s of it, waiting plus running, unless ``runnable`` says), as
    ``RankGrid.from_series`` takes them."""
    walls = DEFAULT_START + 10.0 * np.arange(1, len(next(iter(shares.values()))) + 1) + 0.004
    series = {}
    for rank, per_window in shares.items():
        tags: dict[str, tuple[list[float], list[float]]] = {}
        for wall, share in zip(walls, per_window, strict=True):
            busy = (runnable or {}).get(rank, 1.0)
            cpu = (share * busy, (1 - share) * busy)
            one = rank_window_scalars((compute or {}).get(rank, 0.1), 0.01, 50, cpu)
            for tag, value in one.items():
                tags.setdefault(tag, ([], []))
                tags[tag][0].append(wall)
                tags[tag][1].append(value)
        series[f"job/rank-{rank}"] = {t: (np.array(w), np.array(v)) for t, (w, v) in tags.items()}
    return series


def _grid(shares: dict[int, list[float]], compute: dict[int, float] | None = None) -> RankGrid:
    return RankGrid.from_series(_series(shares, compute), window_s=10.0)


def _busy(rng: np.random.Generator, ranks: int = 4) -> dict[int, list[float]]:
    """Every rank of a healthy job on a busy machine: 60-80% of its time waiting for a CPU."""
    return {rank: list(rng.uniform(0.6, 0.8, WINDOWS)) for rank in range(ranks)}


def test_a_starved_rank_is_flagged_though_its_compute_is_normal():
    """Rank 1 waits for a CPU 90% of its runnable time, the others 70%: it alone is flagged,
    for CPU, though its compute is the median rank's."""
    shares = _busy(np.random.default_rng(0))
    shares[1] = [0.9] * WINDOWS
    (flagged,) = _grid(shares).stragglers()
    assert (flagged.rank, flagged.cause, flagged.starved_over) == (1, "cpu", WINDOWS)
    assert flagged.relative == pytest.approx(1.0, abs=0.01)


def test_a_rank_busier_than_the_others_is_not_starved():
    """Of two ranks on a crowded machine, rank 0 ran twice as long (a long garbage collection)
    and so waited longer per second than rank 1, which slept in the collective: busy, not
    starved; nothing is flagged."""
    shares = {0: [0.75] * WINDOWS, 1: [0.5] * WINDOWS}
    grid = RankGrid.from_series(_series(shares, runnable={0: 4.0, 1: 1.0}), window_s=10.0)
    assert grid.stragglers() == []


def test_of_two_ranks_the_starved_one_is_flagged():
    """In a two-rank job the starved rank is compared with the other rank, not with a median
    that counts itself: rank 1 at 90% beside rank 0 at 70% is flagged, rank 0 is not."""
    shares = {0: [0.7] * WINDOWS, 1: [0.9] * WINDOWS}
    (flagged,) = _grid(shares).stragglers()
    assert (flagged.rank, flagged.cause) == (1, "cpu")


def test_two_equally_busy_ranks_flag_nothing():
    """Two ranks waiting about as long for a CPU (a busy machine) flag neither."""
    rng = np.random.default_rng(3)
    shares = {rank: list(rng.uniform(0.6, 0.8, WINDOWS)) for rank in range(2)}
    assert _grid(shares).stragglers() == []


def test_the_other_rank_waiting_less_for_a_while_starves_nobody():
    """Of two ranks that usually wait about as long (a busy machine), the one whose share
    holds while the other's dips for a few windows is not starved: it waits as the job's ranks
    usually do (found by the fault campaign: rank 0 of a healthy Hugging Face job flagged)."""
    shares = {0: [0.8] * WINDOWS, 1: [0.8] * WINDOWS}
    shares[1][2 : 2 + FLAG_WINDOWS] = [0.55, 0.3, 0.5]
    assert _grid(shares).stragglers() == []


def test_a_rank_starved_beyond_the_jobs_usual_wait_is_still_flagged():
    """Starved against the window's others and against what they usually wait: flagged."""
    shares = {0: [0.7] * WINDOWS, 1: [0.7] * WINDOWS}
    shares[1][2 : 2 + FLAG_WINDOWS] = [0.9] * FLAG_WINDOWS
    (flagged,) = _grid(shares).stragglers()
    assert (flagged.rank, flagged.cause, flagged.starved_over) == (1, "cpu", FLAG_WINDOWS)


def test_the_reason_says_how_starved_it_was():
    """The reason names the rank's share of time waiting for a CPU and the median rank's."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.9] * WINDOWS
    (flagged,) = _grid(shares).stragglers()
    assert (
        flagged.reason == "starved of CPU: 90% of its time waiting for a CPU (the median rank 20%)"
    )


def test_a_busy_machine_where_every_rank_waits_flags_nothing():
    """Healthy ranks that all wait for a CPU most of the time are compared with the median
    rank, not with zero: nothing is flagged."""
    for seed in range(20):
        assert _grid(_busy(np.random.default_rng(seed))).stragglers() == [], seed


def test_a_small_share_is_not_starved_however_it_compares():
    """A rank waiting 40% of its time while the others never wait stands out, but is not
    starved: less than half its time."""
    shares = {rank: [0.001] * WINDOWS for rank in range(4)}
    shares[2] = [0.4] * WINDOWS
    assert _grid(shares).stragglers() == []


def test_starved_windows_must_follow_each_other():
    """Starved in every other window only: never FLAG_WINDOWS in a row, not flagged."""
    shares = {rank: [0.3] * WINDOWS for rank in range(4)}
    shares[3] = [0.9, 0.3] * (WINDOWS // 2)
    (score,) = [s for s in _grid(shares).scores() if s.rank == 3]
    assert (score.flagged, score.starved_over) == (False, 1)


def test_a_window_without_a_cpu_reading_is_no_starved_window():
    """A cell with no CPU reading is NaN, not a verdict."""
    marked = starved_windows(np.array([[0.9, np.nan], [0.1, 0.1], [0.1, 0.1]]))
    assert marked[0, 0] == 1.0 and np.isnan(marked[0, 1]) and (marked[1:] == 0).all()


def test_ranks_that_recorded_no_cpu_wait_are_scored_by_compute_alone():
    """A logdir written before (no CPU tags): no share, and compute flags as it did."""
    grid = RankGrid.from_series(
        {
            f"job/rank-{rank}": {
                tag: (DEFAULT_START + 10.0 * np.arange(1, 5), np.full(4, value))
                for tag, value in rank_window_scalars(0.2 if rank == 1 else 0.1, 0.01, 50).items()
            }
            for rank in range(4)
        },
        window_s=10.0,
    )
    (flagged,) = grid.stragglers()
    assert (flagged.rank, flagged.cause, flagged.starved) == (1, "compute", None)


def test_a_rank_both_slow_and_starved_is_flagged_for_cpu():
    """Starved of CPU and computing slower: the CPU is the reason given."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.95] * WINDOWS
    (flagged,) = _grid(shares, compute={1: 0.3}).stragglers()
    assert (flagged.cause, flagged.windows_over) == ("cpu", WINDOWS)


def test_a_throttled_cgroup_counts_where_run_delay_does_not():
    """A kernel that leaves throttling out of run delay: the cgroup's throttled seconds are
    the rank's wait where they are longer."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.0] * WINDOWS
    series = _series(shares)
    walls = series["job/rank-1"][_CPU_WAIT][0]
    series["job/rank-1"][_THROTTLED] = (walls, np.full(len(walls), 9.0))
    (flagged,) = RankGrid.from_series(series, window_s=10.0).stragglers()
    assert flagged.rank == 1 and flagged.starved == pytest.approx(0.9)


def test_the_report_text_gives_the_reason():
    """``tb-monitor report`` names the starved rank with its reason."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.9] * WINDOWS
    health = rank_health(_grid(shares))
    assert health is not None
    (line,) = [line for line in ranks_lines(health, False) if "straggler " in line]
    assert line.startswith("  straggler       rank 1 x1.00 the median rank, starved of CPU: 90%")


def test_the_report_json_gives_cause_and_reason():
    """``report --json``'s stragglers carry the cause and the reason."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.9] * WINDOWS
    health = rank_health(_grid(shares))
    assert health is not None
    (flagged,) = health.to_json()["stragglers"]
    assert (flagged["cause"], flagged["reason"][:15]) == ("cpu", "starved of CPU:")


def test_one_jobs_grid_keeps_the_starved_shares():
    """A job's part of the grid (the report's per-job ranks) keeps its CPU shares."""
    shares = {rank: [0.2] * WINDOWS for rank in range(4)}
    shares[1] = [0.9] * WINDOWS
    grid = _grid(shares)
    span = JobSpan("job", -np.inf, np.inf, frozenset({"job"}), shared=False)
    assert [s.rank for s in job_grid(grid, span).stragglers()] == [1]
