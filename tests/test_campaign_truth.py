"""The fault campaign's drawing and scoring (``tests/fault_campaign.py``), without running a job."""

from __future__ import annotations

from fault_campaign import Case, Outcome, _score_end, _wrongly_named, plan
from fault_injection import Truth


class _EndedJob:
    """Stands for an ended ``UserJob``: its report is the one given."""

    def __init__(self, report: dict) -> None:
        self._report = report

    def report(self, env: dict | None = None) -> dict:
        return self._report


HIT_AT = 1_700_000_000.0  # when the cases' faults were injected (epoch seconds)


def _failed_report(cause_rank: int, dated: float = HIT_AT + 0.2) -> dict:
    cause = {
        "rank": cause_rank,
        "time": dated,
        "signal": "SIGKILL",
        "reason": "SIGKILL",
        "exception": None,
    }
    return {
        "status": "failed",
        "exit_code": 1,
        "ranks": {"stalled": [], "stragglers": []},
        "jobs": [{"attempts": [{"root_cause": cause}]}],
    }


def _outcome_of_save_kill(stalled: frozenset[int], dated: float = HIT_AT + 0.2) -> Outcome:
    truth = Truth("failed", frozenset({0}), "SIGKILL", collateral=frozenset({1, 2, 3}))
    case = Case(0, "ddp", "save-kill", 0, 1.0)
    outcome = Outcome(case, truth, {}, stalled=stalled, hit_wall=HIT_AT)
    _score_end(outcome, _EndedJob(_failed_report(0, dated)))
    return outcome


def _outcome_of_throttle(cause: str) -> Outcome:
    truth = Truth("succeeded", stragglers=frozenset({3}), straggler_cause="cpu")
    straggler = {"rank": 3, "flagged": True, "cause": cause, "reason": "..."}
    report = {
        "status": "succeeded",
        "exit_code": 0,
        "ranks": {"stalled": [], "stragglers": [straggler]},
        "jobs": [{"waiting_ranks": [], "attempts": [{"root_cause": None}]}],
    }
    outcome = Outcome(Case(0, "fsdp2", "cpu-throttle", 3, 1.0), truth, {}, hit_wall=HIT_AT)
    _score_end(outcome, _EndedJob(report))
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


def test_a_root_cause_dated_before_the_fault_is_wrong():
    """A root cause dated before the injection (a lost node's last flushed records) is wrong."""
    outcome = _outcome_of_save_kill(stalled=frozenset(), dated=HIT_AT - 11.0)
    assert outcome.verdict == "wrong" and "11.0 s before the fault" in "; ".join(outcome.wrong)


def test_a_throttled_rank_flagged_for_its_compute_is_wrong():
    """The rank a CPU quota held, flagged with cause compute instead of cpu, is wrong."""
    outcome = _outcome_of_throttle("compute")
    assert outcome.verdict == "wrong" and "cause ['compute']" in "; ".join(outcome.wrong)


def test_a_throttled_rank_flagged_as_starved_of_cpu_is_right():
    """The rank a CPU quota held, the one straggler with cause cpu, is right."""
    assert _outcome_of_throttle("cpu").verdict == "right"


def _live_read(waited: list[int], stalled: list[int]) -> dict:
    stalls = [{"rank": rank, "waited_for": rank in waited} for rank in stalled]
    return {"status": "running", "ranks": {"waited_for": waited, "stalls": stalls}}


STOPPED_RANK_1 = Truth("succeeded", waited_for=frozenset({1}))


def test_a_live_read_naming_a_waiting_rank_as_waited_for_is_kept():
    """A live read that names rank 0 waited for, while rank 1 is the one stopped, is wrong."""
    assert _wrongly_named(_live_read([0, 3], [0, 1, 2, 3]), STOPPED_RANK_1)


def test_a_live_read_naming_the_stopped_rank_is_not_kept():
    """A live read that names only the stopped rank, with the others stalled, is right."""
    assert not _wrongly_named(_live_read([1], [0, 1, 2, 3]), STOPPED_RANK_1)


def test_a_live_stall_in_a_healthy_job_is_kept():
    """A live read that lists a stall in a job no fault held is wrong."""
    assert _wrongly_named(_live_read([], [2]), Truth("succeeded"))
