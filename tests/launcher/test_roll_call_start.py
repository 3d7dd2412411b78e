"""The roll-call before the first step (``StallTrigger`` with no worker stepped yet): a rank hung
while the others wait in a collective is named; slow starts are not."""

from __future__ import annotations

from tb_monitor.launcher.roll_call import START_FLOORS, StallTrigger
from tb_monitor.rank.stacks import Progress, read_pulse

T = 1_700_000_000.0
FLOOR_S = 5.0
LIMIT_S = START_FLOORS * FLOOR_S


def _start(waiting_since: float | None = None, progress_at: float = T) -> Progress:
    """A worker yet to step, installed at ``T``, inside a collective since ``waiting_since``."""
    return Progress(0, T, 0.0, last_progress=progress_at, in_collective_since=waiting_since)


def test_a_rank_waiting_for_a_hung_one_is_named():
    """One worker in DDP's constructor broadcast past the start floors, the other silent: due."""
    progress = {1: _start(waiting_since=T + 2), 2: _start()}
    assert StallTrigger(FLOOR_S).due(progress, now=T + 3 + LIMIT_S)


def test_a_slow_import_is_not_named():
    """Workers importing for minutes, none inside a collective: no roll-call."""
    assert not StallTrigger(FLOOR_S).due({1: _start(), 2: _start()}, now=T + 600)


def test_a_slow_compile_is_not_named():
    """A rank that compiled first waits in a collective less than the start floors: no call."""
    progress = {1: _start(waiting_since=T + 590), 2: _start()}
    assert not StallTrigger(FLOOR_S).due(progress, now=T + 600)


def test_a_long_dataset_load_is_not_named():
    """A rank fetching its first batches while the other waits in a barrier: no roll-call."""
    progress = {1: _start(waiting_since=T + 1), 2: _start(progress_at=T + 598)}
    assert not StallTrigger(FLOOR_S).due(progress, now=T + 600)


def test_the_start_is_called_once_per_attempt():
    """Looked at again in the same attempt, the hang is not captured again."""
    trigger = StallTrigger(FLOOR_S)
    progress = {1: _start(waiting_since=T), 2: _start()}
    assert [trigger.due(progress, now=T + LIMIT_S + s) for s in (1, 2, 60)] == [True, False, False]


def test_a_hang_before_the_first_step_is_never_restarted():
    """After a roll-call of the start, ``held`` (what the restart reads) stays None."""
    trigger = StallTrigger(FLOOR_S)
    progress = {1: _start(waiting_since=T), 2: _start()}
    assert trigger.due(progress, now=T + LIMIT_S + 1)
    assert trigger.held(progress) is None


def test_the_pulse_carries_since_when_inside_a_collective(tmp_path):
    """A pulse written while inside a collective reads back with when it entered."""
    path = tmp_path / "1.pulse"
    path.write_bytes(_start(waiting_since=T + 4).to_bytes())
    assert read_pulse(str(path)).in_collective_since == T + 4
