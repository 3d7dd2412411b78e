"""A rank deadlocked in native code, in a real two-agent job: named, and its stacks reported."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import need
from users_jobs import SHORT_STALL_FLOOR, SHORT_WINDOWS, user_job

#: A stuck rank named within 30 s, beside no other timed test.
pytestmark = pytest.mark.timed

SCRIPT = Path(__file__).parent / "scripts" / "stuck_in_c.py"
NAMED_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def stuck_in_c(tmp_path_factory) -> tuple[float | None, dict]:
    """The job whose rank 3 blocks in C holding the GIL; the report (its stall floor 5 s: the
    steps take milliseconds) polled until it names it with its stacks (seconds it took, or
    None) and that report."""
    need("torch")
    with user_job(tmp_path_factory.mktemp("stuck"), SCRIPT, env=SHORT_WINDOWS) as job:
        job.wait_for_output("stuck in C")
        stuck = time.monotonic()
        while True:
            report = job.report(SHORT_STALL_FLOOR)
            waited = time.monotonic() - stuck
            stalls = (report.get("ranks") or {}).get("stalls", [])
            views = [s.get("agent") or {} for s in stalls if s["rank"] == 3]
            if any(v.get("stacks") and v.get("seen") == "alive but silent" for v in views):
                return waited, report
            if waited > NAMED_WITHIN_S:
                return None, report
            time.sleep(1.0)


def _stall(report: dict, rank: int) -> dict:
    return next(s for s in report["ranks"]["stalls"] if s["rank"] == rank)


def test_rank_stuck_in_c_is_named_waited_for_and_silent(stuck_in_c):
    """Within 30 s the report names rank 3, silent, as the one the job waits for."""
    named_after_s, report = stuck_in_c
    assert named_after_s is not None, json.dumps(report.get("ranks"))
    assert report["ranks"]["waited_for"] == [3]
    stall = _stall(report, 3)
    assert stall["silent"] and stall["agent"]["seen"] == "alive but silent"


def test_rank_stuck_in_c_has_its_python_stacks(stuck_in_c):
    """The stuck rank's stacks, read by py-spy (or dumped by faulthandler without it), name the
    C call's Python caller."""
    _, report = stuck_in_c
    stacks = _stall(report, 3)["agent"]["stacks"]
    assert "hold_the_gil_in_c" in stacks and ("in main" in stacks or "main (" in stacks)
