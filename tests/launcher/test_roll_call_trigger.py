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


def test_workers_making_progress_without_steps_are_no_stall():
    """Workers in an evaluation loop (batches, no optimizer step) or a checkpoint save: their
    pulses' last progress is recent, so no roll-call is due however long since a step."""
    trigger = StallTrigger(floor_s=5.0)
    progress = {pid: Progress(10, T, 0.1, last_progress=T + 59) for pid in (1, 2)}
    assert not trigger.due(progress, now=T + 60)


def test_workers_without_progress_for_the_floor_are_a_stall():
    """No step and no progress of any kind past the floor: the roll-call is due."""
    trigger = StallTrigger(floor_s=5.0)
    progress = {pid: Progress(10, T, 0.1, last_progress=T + 1) for pid in (1, 2)}
    assert trigger.due(progress, now=T + 7)


def test_the_pulse_carries_the_last_progress(tmp_path):
    """A pulse written with the last progress reads back with it; one without it reads None."""
    from tb_monitor.rank.stacks import read_pulse

    path = tmp_path / "1.pulse"
    path.write_bytes(Progress(3, T, 0.5, T + 2).to_bytes())
    assert read_pulse(str(path)) == Progress(3, T, 0.5, T + 2)
    path.write_bytes(b'{"steps": 3, "last_step": 1.0, "typical_s": 0.5}')
    assert read_pulse(str(path)).last_progress is None


def test_stalled_for_is_zero_while_a_worker_steps():
    """One worker stepping within the rule: the node is not stalled (0 s)."""
    trigger = StallTrigger(floor_s=5.0)
    assert trigger.stalled_for({1: _progress(10, T), 2: _progress(80, T + 58)}, now=T + 60) == 0.0


def test_stalled_for_counts_from_the_newest_step_once_all_are_stalled():
    """Every worker past the rule: stalled since the newest of their last steps."""
    trigger = StallTrigger(floor_s=5.0)
    assert trigger.stalled_for({1: _progress(10, T - 30), 2: _progress(11, T)}, now=T + 6) == 6.0
