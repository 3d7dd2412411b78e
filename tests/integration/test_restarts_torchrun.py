"""Acceptance (issue 12): why a real torchrun job restarted, from ``restarts()`` and ``tb-monitor
report``: the root cause, the ranks that went down with it, the time lost.

The jobs are ``tests/torchrun_jobs.py``'s (two agents x two workers, gloo on CPU, 127.0.0.1),
shared with the other acceptance tests; the Timeline's view of ``restarted`` is checked in
Chromium by tests/plugin/test_browser_restarts.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import need
from torchrun_jobs import FAIL_RANK, OTHER_FAIL_RANK, Job, tb_monitor_command

from tb_monitor import read_events
from tb_monitor.analysis import restarts

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def _report(job: Job, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        tb_monitor_command("report", job.logdir, *args), capture_output=True, text=True, timeout=60
    )


def _rows(job: Job):
    need("pandas")
    return restarts(job.logdir)


# -- rank 2 raises a ValueError at step 3, the group restarts and succeeds ---------------------


def test_restarted_job_names_rank_2_and_its_exception(restarted):
    """The first attempt's root cause is rank 2's ValueError, with its message and traceback."""
    assert restarted.returncodes == [0, 0], restarted.output
    first, second = _rows(restarted).to_dict("records")
    assert (first["attempt"], first["outcome"], first["root_cause_rank"]) == (0, "FAILED", 2)
    assert first["exception"] == "ValueError"
    assert first["message"] == "injected failure on rank 2 at step 3"
    assert "Traceback (most recent call last)" in first["traceback"]
    assert first["traceback"].rstrip().endswith("ValueError: injected failure on rank 2 at step 3")
    assert second["outcome"] == "SUCCEEDED"


def test_restarted_job_names_the_other_three_ranks_as_collateral(restarted):
    """Ranks 0, 1 and 3, which went down with rank 2, are collateral, not root causes."""
    first = _rows(restarted).iloc[0]
    assert first["collateral_ranks"] == [r for r in range(4) if r != FAIL_RANK]


def test_restarted_job_time_lost_runs_until_the_second_attempt(restarted):
    """Time lost runs from rank 2's failure to the second attempt's first start."""
    first, second = _rows(restarted).to_dict("records")
    expected = (second["start"] - first["failed_at"]).total_seconds()
    assert first["time_lost_s"] == pytest.approx(expected) and 0 < expected < 60


def test_restarted_job_same_answer_from_read_events(restarted):
    """restarts() of the read_events DataFrame equals restarts() of the logdir."""
    by_logdir = _rows(restarted)
    by_frame = restarts(read_events(restarted.logdir))
    assert by_frame.equals(by_logdir)


def test_restarted_job_report_names_the_root_cause_and_exits_0(restarted):
    """tb-monitor report names rank 2, the exception's last line and the collateral; exit 0."""
    proc = _report(restarted)
    assert proc.returncode == 0, proc.stderr
    assert "root cause      rank 2" in proc.stdout
    assert "ValueError: injected failure on rank 2 at step 3" in proc.stdout
    assert "went down with  ranks 0, 1, 3 (stopped by restart)" in proc.stdout
    assert "1 restart" in proc.stdout and "lost to restarts" in proc.stdout


def test_restarted_job_report_json(restarted):
    """--json gives the documented schema: the job succeeded, attempt 0's root cause is rank 2."""
    proc = _report(restarted, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["schema"], doc["status"], doc["exit_code"]) == (1, "succeeded", 0)
    (job,) = doc["jobs"]
    assert (job["job"], job["status"], job["restarts"], job["finished"]) == (
        restarted.run_id,
        "SUCCEEDED",
        1,
        True,
    )
    cause = job["attempts"][0]["root_cause"]
    assert (cause["rank"], cause["exception"], cause["source"]) == (2, "ValueError", "worker")


# -- a worker killed by SIGKILL ----------------------------------------------------------------


def test_sigkilled_worker_is_the_root_cause_with_its_signal(sigkilled):
    """The rank killed by SIGKILL, which could record nothing itself, is the root cause, named
    by the signal its agent saw, although its peers' connection errors were recorded first."""
    assert sigkilled.returncodes == [0, 0], sigkilled.output
    first = _rows(sigkilled).iloc[0]
    assert first["root_cause_rank"] == OTHER_FAIL_RANK
    assert (first["signal"], first["exit_code"]) == ("SIGKILL", -9)
    assert first["reason"] == "killed by SIGKILL"
    assert first["collateral_ranks"] == [r for r in range(4) if r != OTHER_FAIL_RANK]


def test_sigkilled_worker_report_names_the_signal(sigkilled):
    """tb-monitor report says the rank was killed by SIGKILL; the job recovered: exit 0."""
    proc = _report(sigkilled)
    assert proc.returncode == 0, proc.stderr
    assert f"root cause      rank {OTHER_FAIL_RANK}" in proc.stdout
    assert "killed by SIGKILL" in proc.stdout


# -- a job that fails on every attempt ---------------------------------------------------------


def test_always_failing_job_has_a_root_cause_per_attempt(always_failing):
    """Both attempts failed, each with rank 1's RuntimeError as its root cause; only the first
    lost time to a restart (none followed the last)."""
    rows = _rows(always_failing)
    assert rows["outcome"].tolist() == ["FAILED", "FAILED"]
    assert rows["root_cause_rank"].tolist() == [OTHER_FAIL_RANK, OTHER_FAIL_RANK]
    assert rows["exception"].tolist() == ["RuntimeError", "RuntimeError"]
    assert rows["time_lost_s"].iloc[0] >= 0
    assert rows["time_lost_s"].isna().iloc[-1]


def test_always_failing_job_report_exits_1(always_failing):
    """tb-monitor report shows both root causes and exits 1: the last attempt failed."""
    proc = _report(always_failing)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("RuntimeError: injected failure on rank 1") == 2
    assert "FAILED: the last attempt failed" in proc.stdout
