"""The fault campaign's drawing and scoring (``tests/fault_campaign.py``), without running a job."""

from __future__ import annotations

from fault_campaign import Case, Outcome, _score_end, plan
from fault_injection import Truth


class _EndedJob:
    """Stands for an ended ``UserJob``: its report is the one given."""

    def __init__(self, report: dict) -> None:
        self._report = report

    def report(self, env: dict | None = None) -> dict:
        return self._report


def _failed_report(cause_rank: int) -> dict:
    cause = {"rank": cause_rank, "signal": "SIGKILL", "reason": "SIGKILL", "exception": None}
    return {
        "status": "failed",
        "exit_code": 1,
        "ranks": {"stalled": [], "stragglers": []},
        "jobs": [{"attempts": [{"root_cause": cause}]}],
    }


def _outcome_of_save_kill(stalled: frozenset[int]) -> Outcome:
    truth = Truth("failed", frozenset({0}), "SIGKILL", collateral=frozenset({1, 2, 3}))
    outcome = Outcome(Case(0, "ddp", "save-kill", 0, 1.0), truth, {}, stalled=stalled)
    _score_end(outcome, _EndedJob(_failed_report(0)))
    return outcome


def test_a_fault_inside_a_save_is_drawn_only_on_scripts_that_save():
    """``save-kill`` and ``save-raise`` need a script that saves snapshots: the DDP one."""
    cases = plan(3, 8, scripts=("ddp", "hf"), faults=("save-kill", "save-raise"))
    assert {case.script for case in cases} == {"ddp"}


def test_a_rank_that_only_waited_for_the_save_called_stalled_is_wrong():
    """A collateral rank listed stalled while the job ran makes the answer wrong."""
    outcome = _outcome_of_save_kill(stalled=frozenset({2}))
    assert outcome.verdict == "wrong" and "only waited" in "; ".join(outcome.wrong)


def test_the_saving_rank_named_with_no_collateral_stall_is_right():
    """The saving rank as root cause, with the fault's kind and no rank stalled, is right."""
    assert _outcome_of_save_kill(stalled=frozenset()).verdict == "right"
