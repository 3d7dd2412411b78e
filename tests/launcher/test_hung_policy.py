"""When the agent ends a hung attempt (``launcher.hung``), on an injected clock."""

from __future__ import annotations

import pytest

from tb_monitor.launcher.hung import GIVE_UP, RESTART, HungPolicy, parse_duration

T = 1_700_000_000.0
STALL, OTHER = ((11, 30), (12, 30)), ((11, 80), (12, 80))
HERE, THERE = ("sleep at train.py:40",), ("all_reduce at train.py:42",)


def test_nothing_before_the_stall_held_long_enough():
    """A stall younger than the policy's time is left alone."""
    assert HungPolicy(60.0).decide(STALL, T, HERE, now=T + 59) is None


def test_a_stall_held_long_enough_is_restarted():
    """Past the policy's time the verdict is a restart, held for as long as it was."""
    verdict = HungPolicy(60.0).decide(STALL, T, HERE, now=T + 61)
    assert (verdict.action, verdict.held_s, verdict.where) == (RESTART, 61, HERE)


def test_no_verdict_while_steps_go_on():
    """No captured stall (a worker stepped: slow but stepping) is never ended."""
    assert HungPolicy(1.0).decide(None, None, HERE, now=T + 600) is None


def test_once_per_stall():
    """The same stall, judged again, is not ended twice."""
    policy = HungPolicy(10.0)
    assert [policy.decide(STALL, T, HERE, now=T + s) is not None for s in (11, 12)] == [True, False]


def test_progress_other_than_a_step_holds_it_back():
    """Wait counters that moved (a checkpoint save's writes) restart the stall's clock."""
    policy = HungPolicy(10.0)
    assert policy.decide(STALL, T, HERE, now=T + 8, busy=True) is None
    assert policy.decide(STALL, T, HERE, now=T + 15) is None
    assert policy.decide(STALL, T, HERE, now=T + 19).action == RESTART


def test_the_same_place_again_gives_up():
    """A second hang where the first hung is given up: restarting cannot help."""
    policy = HungPolicy(10.0)
    first = policy.decide(STALL, T, HERE, now=T + 11)
    second = policy.decide(OTHER, T + 100, HERE, now=T + 111)
    assert (first.action, second.action) == (RESTART, GIVE_UP)


def test_a_hang_elsewhere_is_restarted_again():
    """A second hang at another place is restarted again."""
    policy = HungPolicy(10.0)
    policy.decide(STALL, T, HERE, now=T + 11)
    assert policy.decide(OTHER, T + 100, THERE, now=T + 111).action == RESTART


@pytest.mark.parametrize(("text", "seconds"), [("60", 60), ("60s", 60), ("1.5m", 90), ("2h", 7200)])
def test_durations_parse(text, seconds):
    """``--restart-hung-after`` takes seconds, minutes or hours."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-5", "ten", "5 parsecs"])
def test_bad_durations_are_refused(text):
    """Anything but a positive duration is a ValueError."""
    with pytest.raises(ValueError):
        parse_duration(text)
