"""An idle deadline: waiting goes on while the work moves, and ends once it stops moving."""

from __future__ import annotations

from tb_monitor._patience import POLL_S, wait_while_progressing


class Work:
    """Work on an injected clock: each look at it advances the clock by one poll."""

    def __init__(self, moves_until: float, done_at: float) -> None:
        self.now = 0.0
        self.moves_until, self.done_at = moves_until, done_at

    def clock(self) -> float:
        return self.now

    def done(self, timeout: float) -> bool:
        self.now += timeout
        return self.now >= self.done_at

    def progress(self) -> float:
        return min(self.now, self.moves_until)


def test_work_that_keeps_moving_is_waited_for_past_the_idle_deadline():
    """Work moving all along is waited for however long it takes."""
    work = Work(moves_until=60.0, done_at=60.0)
    assert wait_while_progressing(work.done, work.progress, idle_s=1.0, clock=work.clock)
    assert work.now >= 60.0


def test_work_that_stops_moving_is_given_up_on_after_the_idle_deadline():
    """Work that stops moving at 5 s is given up on about idle_s later, not at its end."""
    work = Work(moves_until=5.0, done_at=100.0)
    assert not wait_while_progressing(work.done, work.progress, idle_s=1.0, clock=work.clock)
    assert 6.0 <= work.now <= 6.0 + 2 * POLL_S
