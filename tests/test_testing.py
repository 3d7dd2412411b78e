"""tb_monitor.testing: capture what the APIs record, and drive Stat windows with a manual clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

import tb_monitor
from tb_monitor import Aggregation, Stat, contract
from tb_monitor.elastic import events
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.testing import capture, manual_clock


def test_capture_reads_back_metrics_as_scalars():
    """A metric put inside capture() is seen as the scalar TensorBoard would show."""
    with capture() as captured:
        put_metric("loss", 3, "train")
        assert [(p.tag, p.value) for p in captured.scalars()] == [("train/loss", 3.0)]
    assert [p.step for p in captured.scalars("train/loss")] == [0]


def test_capture_reads_back_stat_windows_ended_by_the_clock():
    """Stat windows ended inside capture() are scalars <stat>.<agg>, one step per window."""
    with manual_clock() as clock, capture() as captured:
        stat = Stat("lat", [Aggregation.MEAN, Aggregation.COUNT], timedelta(seconds=10))
        stat.add(1.0)
        stat.add(3.0)
        clock.advance(10)
        stat.add(5.0)
        clock.advance(10)
        stat.close()
    points = {(p.tag, p.step): p.value for p in captured.scalars()}
    assert points == {
        ("lat.mean", 0): 2.0,
        ("lat.count", 0): 2.0,
        ("lat.mean", 1): 5.0,
        ("lat.count", 1): 1.0,
    }


def test_capture_reads_back_elastic_events_as_timeline_rows():
    """A torchelastic event recorded to the tensorboard destination is a timeline row."""
    with capture() as captured:
        events.record(events.Event("job.started", events.EventSource.AGENT), "tensorboard")
    [row] = captured.events(contract.AGENT)
    assert row["name"] == "job.started"
    assert captured.texts()[0][1] == "events/agent"


def test_capture_restores_what_was_configured_before():
    """After capture(), no tb_monitor monitor stays active."""
    with capture():
        pass
    assert tb_monitor.monitor._active is None


def test_manual_clock_ends_a_window_only_when_advanced_past_it():
    """A window ends at its wall-clock boundary of the manual clock, not before."""
    seen = []
    handle = tb_monitor.register_event_handler(
        lambda e: seen.append(e.data) if "tick.sum" in e.data else None
    )
    try:
        with manual_clock() as clock:
            stat = Stat("tick", [Aggregation.SUM], timedelta(seconds=60))
            stat.add(2)
            clock.advance(59.9)
            assert seen == []
            assert clock.advance(0.1) >= 1  # other live Stats may end a window too
            assert seen == [{"tick.sum": 2.0}]
            stat.close()
    finally:
        tb_monitor.unregister_event_handler(handle)
    assert seen == [{"tick.sum": 2.0}]


def test_manual_clock_refuses_to_go_back():
    """Advancing by a negative time is a ValueError naming the value."""
    with manual_clock() as clock, pytest.raises(ValueError, match="-1"):
        clock.advance(-1)


def test_generate_rank_windows_writes_deterministic_rank_health(tmp_path):
    """generate_rank_windows: one run per rank, the same bytes for a seed, the slow rank slower."""
    from tb_monitor.logdir import readers
    from tb_monitor.testing import generate_rank_windows

    runs = generate_rank_windows(tmp_path / "a", 3, 0.05, slow_ranks=[2], seed=4)
    generate_rank_windows(tmp_path / "b", 3, 0.05, slow_ranks=[2], seed=4)
    assert runs == ["job/rank-0", "job/rank-1", "job/rank-2"]

    def points(logdir):
        return sorted((p.run, p.tag, p.wall_time, p.value) for p in readers.iter_scalars(logdir))

    first = points(tmp_path / "a")
    assert first == points(tmp_path / "b")
    step_sum = contract.stat_tag(contract.RANK_STEP, "sum")
    wait_sum = contract.stat_tag(contract.RANK_COLLECTIVE, "sum")
    sums = {run: v for run, tag, _, v in first if tag == step_sum}
    waits = {run: v for run, tag, _, v in first if tag == wait_sum}
    compute = {run: sums[run] - waits[run] for run in runs}
    assert compute["job/rank-2"] > 1.4 * compute["job/rank-0"]
    step_count = contract.stat_tag(contract.RANK_STEP, "count")
    assert len([p for p in first if p[0] == "job/rank-0" and p[1] == step_count]) == 18
