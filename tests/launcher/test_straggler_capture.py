"""The agent of rank 0 asks for one capture when a straggler is first flagged, and no more."""

from __future__ import annotations

from tb_monitor.analysis.scoring import Score
from tb_monitor.launcher import straggler_capture
from tb_monitor.launcher.straggler_capture import RATE_S, StragglerCapture, median_rank


class _Grid:
    def __init__(self, scores: list[Score]) -> None:
        self._scores = scores

    def scores(self) -> list[Score]:
        return self._scores


def _score(rank: int, relative: float, flagged: bool = False, job: str = "job") -> Score:
    return Score(rank, rank, f"{job}/rank-{rank}", relative, 1.0, 0.1, 5 if flagged else 0, flagged)


class _Watch:
    """A StragglerCapture over scores the test sets, with the requests it made and a clock."""

    def __init__(self, leads: bool = True) -> None:
        self.scores: list[Score] = [_score(r, 1.0) for r in range(4)]
        self.asked: list[tuple[str, float, str]] = []
        self.now = 0.0
        self.watch = StragglerCapture(
            "logs",
            lambda: "job",
            lambda: leads,
            grid=lambda logdir: _Grid(self.scores),
            ask=lambda logdir, seconds, reason: (
                self.asked.append((logdir, seconds, reason)) or "id"
            ),
            clock=lambda: self.now,
        )

    def flag(self, rank: int, job: str = "job") -> None:
        self.scores = [s for s in self.scores if (s.rank, s.run) != (rank, f"{job}/rank-{rank}")]
        self.scores.append(_score(rank, 1.8, flagged=True, job=job))


def test_a_rank_first_flagged_asks_one_capture_naming_it_and_the_median_rank():
    """Rank 2 flagged: one request, its reason naming rank 2 and the median rank beside it."""
    w = _Watch()
    w.flag(2)
    assert w.watch.look() == "id"
    [(logdir, seconds, reason)] = w.asked
    assert (logdir, seconds) == ("logs", straggler_capture.SECONDS)
    assert "rank 2 first flagged" in reason and "median rank" in reason


def test_no_straggler_asks_nothing():
    """A job with no rank flagged asks for no capture."""
    w = _Watch()
    assert w.watch.look() is None and w.asked == []


def test_a_rank_still_flagged_asks_no_second_capture():
    """Rank 2 flagged again at the next look asks nothing more."""
    w = _Watch()
    w.flag(2)
    w.watch.look()
    w.now += 2 * RATE_S
    assert w.watch.look() is None and len(w.asked) == 1


def test_another_straggler_within_the_rate_asks_nothing_then_after_it_asks():
    """A second rank flagged within RATE_S of the first capture waits; one flagged after it asks."""
    w = _Watch()
    w.flag(2)
    w.watch.look()
    w.now += RATE_S / 2
    w.flag(3)
    assert w.watch.look() is None
    w.now += RATE_S
    w.flag(1)
    assert w.watch.look() == "id" and "rank 1 first flagged" in w.asked[-1][2]


def test_an_agent_without_rank_0_does_not_watch():
    """Only the agent running global rank 0 asks: one request per job."""
    w = _Watch(leads=False)
    w.flag(2)
    assert w.watch.look() is None and w.asked == []


def test_another_jobs_straggler_in_the_logdir_is_not_ours():
    """A rank flagged in another job sharing the logdir asks nothing of this job's agents."""
    w = _Watch()
    w.flag(2, job="other")
    assert w.watch.look() is None


def test_the_median_rank_is_the_middle_relative_score():
    """The median rank is the scored rank in the middle of the relative scores."""
    scores = [_score(0, 1.0), _score(1, 0.9), _score(2, 1.8), _score(3, 1.05)]
    assert median_rank(scores) == 3


def test_the_environment_turns_it_off(monkeypatch):
    """TB_MONITOR_STRAGGLER_CAPTURE=0 turns the automatic capture off."""
    monkeypatch.setenv(straggler_capture.ENABLED_ENV, "0")
    assert not StragglerCapture.enabled()
