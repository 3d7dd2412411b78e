"""tb_monitor.analysis.stragglers: straggler scores and stalled ranks from per-rank windows."""

from __future__ import annotations

import random

import pytest
from conftest import need

from tb_monitor.analysis.stragglers import rank_windows, stalls, stragglers
from tb_monitor.sinks import AsyncWriter
from tb_monitor.testing import rank_heartbeat_scalars, rank_window_scalars

START = 1_741_000_000.0


def _write_rank(logdir, rank: int, windows: list[tuple[float, float, int]], beats=()) -> None:
    """Windows of (compute_s, collective_s, steps), 10 s each, and heartbeats
    (time, steps, entered, left, in_collective_s, since_step_s[, fr_seq]) as rank_health
    writes them."""
    with AsyncWriter(logdir / "job" / f"rank-{rank}") as writer:
        for i, (compute, wait, steps) in enumerate(windows):
            end = START + 10 * (i + 1) + rank * 0.003  # ranks close a window ms apart
            writer.add_scalars(rank_window_scalars(compute, wait, steps), wall_time=end)
        for when, *beat in beats:
            writer.add_scalars(rank_heartbeat_scalars(*beat), wall_time=when)


def _job(logdir, slow_rank: int | None, factor: float, jitter: float = 0.05, n: int = 12):
    """Four ranks in lockstep: the slow rank computes ``factor`` times longer, the others wait."""
    rng = random.Random(0)
    period = 0.1 * (factor if slow_rank is not None else 1.0)
    for rank in range(4):
        rows = []
        for _ in range(n):
            compute = (
                0.1 * (factor if rank == slow_rank else 1.0) * (1 + rng.uniform(-jitter, jitter))
            )
            rows.append((compute, max(period - compute, 0.0) + 0.002, 50))
        _write_rank(logdir, rank, rows)


@pytest.fixture(autouse=True)
def _pandas():
    need("pandas")


def test_rank_windows_separate_compute_from_collective_wait(tmp_path):
    """compute_s is step time minus the wait in collectives, per rank and window."""
    _write_rank(tmp_path, 0, [(0.1, 0.05, 10)])
    [row] = rank_windows(tmp_path).to_dict("records")
    assert row["rank"] == 0 and row["steps"] == 10
    assert row["compute_s"] == pytest.approx(0.1) and row["collective_s"] == pytest.approx(0.05)


def test_a_rank_computing_half_again_longer_is_the_only_straggler(tmp_path):
    """Rank 1 computing 1.5x longer (the others waiting for it) is flagged, and no other rank."""
    _job(tmp_path, slow_rank=1, factor=1.5)
    scores = stragglers(tmp_path)
    assert scores[scores.flagged]["rank"].tolist() == [1]
    assert scores.iloc[0]["relative"] == pytest.approx(1.5, rel=0.1)


def test_normal_jitter_flags_nobody(tmp_path):
    """A healthy job with 10% jitter raises no straggler."""
    _job(tmp_path, slow_rank=None, factor=1.0, jitter=0.1)
    assert not stragglers(tmp_path)["flagged"].any()


def test_a_brief_slowdown_is_not_a_straggler(tmp_path):
    """Two slow windows out of twelve stay below the three-window bar."""
    rows = [(0.1, 0.01, 50)] * 12
    for rank in range(4):
        windows = list(rows)
        if rank == 2:
            windows[5] = windows[6] = (0.2, 0.0, 50)
        _write_rank(tmp_path, rank, windows)
    scores = stragglers(tmp_path).set_index("rank")
    assert scores.loc[2, "windows_over"] == 2 and not scores["flagged"].any()


def test_the_rank_outside_the_collective_is_the_one_waited_for(tmp_path):
    """Ranks 0-2 inside collective #6 for 40 s, rank 3 never entered it: rank 3 is named."""
    for rank in range(4):
        hung = rank == 3
        beat = (START + 60, 5, 5 if hung else 6, 5, 0.0 if hung else 40.0, 41.0)
        _write_rank(tmp_path, rank, [(0.1, 0.01, 50)] * 2, beats=[beat])
    found = stalls(tmp_path)
    assert set(found["rank"]) == {0, 1, 2, 3}
    assert found[found.waited_for]["rank"].tolist() == [3]


def test_the_rank_behind_in_the_flight_recorder_is_the_one_waited_for(tmp_path):
    """A DDP job (no collective from Python: entered 0 everywhere) stalled for 40 s: ranks 0-2
    are at collective 12 in torch's Flight Recorder, rank 3 at 10: rank 3 is named."""
    for rank in range(4):
        beat = (START + 60, 5, 0, 0, 0.0, 41.0, 10 if rank == 3 else 12)
        _write_rank(tmp_path, rank, [(0.1, 0.01, 50)] * 2, beats=[beat])
    found = stalls(tmp_path)
    assert found[found.waited_for]["rank"].tolist() == [3]


def test_a_flight_recorder_value_of_minus_one_says_nothing(tmp_path):
    """-1 (steps resumed since the rank read it) is no value: it does not make a rank behind."""
    for rank in range(4):
        beat = (START + 60, 5, 0, 0, 0.0, 41.0, -1 if rank == 3 else 12)
        _write_rank(tmp_path, rank, [(0.1, 0.01, 50)] * 2, beats=[beat])
    found = stalls(tmp_path)
    assert len(found) == 4 and not found.waited_for.any()


def test_silent_heartbeats_count_as_a_stall(tmp_path):
    """A rank whose heartbeats stopped long before the others' is stalled."""
    _write_rank(tmp_path, 0, [(0.1, 0.0, 50)], beats=[(START + 100, 500, 9, 9, 0.0, 0.1)])
    _write_rank(tmp_path, 1, [(0.1, 0.0, 50)], beats=[(START + 10, 50, 1, 1, 0.0, 0.1)])
    assert stalls(tmp_path)["rank"].tolist() == [1]


def test_a_healthy_job_has_no_stall(tmp_path):
    """Heartbeats with fresh steps on every rank: nothing stalled."""
    for rank in range(4):
        _write_rank(tmp_path, rank, [(0.1, 0.0, 50)], beats=[(START + 20, 100, 100, 100, 0.0, 0.1)])
    assert stalls(tmp_path).empty


def test_a_wrong_argument_is_refused_at_the_door():
    """Anything but a logdir or a read_scalars DataFrame is a TypeError naming it."""
    with pytest.raises(TypeError, match="42"):
        stragglers(42)
