"""A job a signal to its agent ended: every failure after the signal is its collateral, and the
attempt it cut short is TERMINATED, never FAILED or SUCCEEDED inside the TERMINATED job."""

from __future__ import annotations

import copy

from tb_monitor import contract
from tb_monitor.analysis.health import report_of
from tb_monitor.logdir import readers
from tb_monitor.testing import generate_job


def _rows(logdir, fail: bool) -> list[dict]:
    generate_job(logdir, nodes=2, workers_per_node=2, restarts=0, fail_last=fail)
    return list(readers.decode_timeline(readers.iter_timeline(logdir)))


def _preempted(rows: list[dict], stop_began: float | None) -> list[dict]:
    """``rows`` with an agent's TERMINATED verdict, as ``tb-monitor run`` records it after the
    stop, its agent having begun stopping the workers at ``stop_began``."""
    agent = next(r for r in rows if r["kind"] == contract.AGENT and r["source"] == "AGENT")
    verdict = copy.deepcopy(agent)
    end = max(r["wall_time"] for r in rows)
    metadata = {"signal": "SIGTERM", "exit_code": 1, "state": "TERMINATED"}
    if stop_began is not None:
        metadata["stop_began"] = stop_began
    verdict.update(
        name="torchelastic.worker.status.TERMINATED",
        state="TERMINATED",
        wall_time=end + 1.0,
        metadata={**(verdict.get("metadata") or {}), **metadata},
    )
    return [*rows, verdict]


def _failure_time(rows: list[dict]) -> float:
    return min(
        r["wall_time"] for r in rows if r["kind"] == contract.WORKER and r["state"] == "FAILED"
    )


def test_a_failure_after_the_signal_is_collateral_and_the_attempt_terminated(logdir):
    """A rank failing after its agent began stopping the workers (a lost peer, the agent's
    SIGKILL) is no root cause: the attempt is TERMINATED and the rank collateral."""
    rows = _rows(logdir, fail=True)
    failed_at = _failure_time(rows)
    report = report_of(str(logdir), _preempted(rows, stop_began=failed_at - 0.055))
    [job] = report.jobs
    [attempt] = job.attempts
    assert (job.status, attempt.outcome, attempt.root_cause) == ("TERMINATED", "TERMINATED", None)
    assert attempt.collateral_ranks == attempt.failed_ranks != ()
    assert report.status == "terminated" and report.exit_code == 1


def test_a_failure_before_the_signal_stays_the_root_cause(logdir):
    """A rank that failed before the preemption is still the attempt's root cause."""
    rows = _rows(logdir, fail=True)
    failed_at = _failure_time(rows)
    report = report_of(str(logdir), _preempted(rows, stop_began=failed_at + 10.0))
    [attempt] = report.jobs[0].attempts
    assert attempt.outcome == "FAILED" and attempt.root_cause is not None


def test_an_attempt_the_signal_cut_short_is_not_read_as_succeeded(logdir):
    """A preempted job whose ranks exit 0 on SIGTERM (a handler that saves and returns) reads
    its attempt TERMINATED, not SUCCEEDED."""
    rows = _rows(logdir, fail=False)
    end = max(r["wall_time"] for r in rows)
    report = report_of(str(logdir), _preempted(rows, stop_began=end - 2.0))
    [attempt] = report.jobs[0].attempts
    assert attempt.outcome == "TERMINATED"
    assert report.to_json()["jobs"][0]["terminated"]["stop_began"] == end - 2.0


def test_a_verdict_without_the_stop_time_leaves_the_attempts_as_they_were(logdir):
    """An older agent's verdict (no stop time recorded) changes no attempt."""
    rows = _rows(logdir, fail=True)
    before = report_of(str(logdir), rows).jobs[0].attempts
    after = report_of(str(logdir), _preempted(rows, stop_began=None)).jobs[0].attempts
    assert [a.outcome for a in after] == [a.outcome for a in before] == ["FAILED"]
