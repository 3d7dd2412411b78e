"""The agent's roll-call trigger, on an injected clock: once per stall of all its workers."""

from __future__ import annotations

from tb_monitor.launcher.roll_call import StallTrigger
from tb_monitor.rank.stacks import Progress

T = 1_700_000_000.0


def _progress(steps: int, last: float, typical: float = 0.1) -> Progress:
    return Progress(steps, last, typical)


def test_no_capture_while_a_worker_steps():
    """One worker stepping recently (a slow but stepping rank) holds the roll-call back."""
    trigger = StallTrigger(floor_s=5.0)
    progress = {1: _progress(10, T), 2: _progress(80, T + 58)}
    assert not trigger.due(progress, now=T + 60)


def test_capture_once_all_passed_the_floor():
    """Every worker past the floor without a step: the roll-call is due."""
    trigger = StallTrigger(floor_s=5.0)
    assert trigger.due({1: _progress(10, T), 2: _progress(10, T + 0.1)}, now=T + 6)


def test_the_stall_rule_counts_typical_steps():
    """A 1-s typical step waits for 10 of them, more than the 5-s floor."""
    trigger = StallTrigger(floor_s=5.0, factor=10.0)
    assert not trigger.due({1: _progress(10, T, typical=1.0)}, now=T + 8)


def test_once_per_stall():
    """The same stall, looked at again, is not captured again."""
    trigger = StallTrigger(floor_s=5.0)
    progress = {1: _progress(10, T), 2: _progress(10, T)}
    assert [trigger.due(progress, now=T + s) for s in (6, 7, 60)] == [True, False, False]


def test_again_after_a_new_stall():
    """Steps resumed, then stopped again: a new stall, captured again."""
    trigger = StallTrigger(floor_s=5.0)
    assert trigger.due({1: _progress(10, T)}, now=T + 6)
    assert not trigger.due({1: _progress(12, T + 7)}, now=T + 8)
    assert trigger.due({1: _progress(12, T + 7)}, now=T + 13)


def test_no_progress_known_no_capture():
    """Workers whose pulse carries no progress (no rank health) are never captured."""
    assert not StallTrigger(floor_s=5.0).due({1: None}, now=T + 1000)


def test_a_stopped_workers_frozen_progress_counts_as_stalled():
    """A stopped worker's last pulse stays as it was: with the others stalled, due."""
    trigger = StallTrigger(floor_s=5.0)
    assert trigger.due({1: _progress(10, T - 30), 2: _progress(11, T)}, now=T + 6)


def test_workers_yet_to_step_are_no_stall():
    """Before the first step (a slow start) no roll-call is taken."""
    assert not StallTrigger(floor_s=5.0).due({1: _progress(0, T)}, now=T + 60)
