"""Issue 47's loose ends on real 2-agent x 2-worker DDP jobs (gloo, CPU) under tb-monitor run: a
rank hung before the first step gets a roll-call, and a job that hangs at the same place in every
attempt is restarted once, then given up."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need
from torchrun_jobs import tb_monitor_command
from users_jobs import HANG, SHORT_STALL_FLOOR, SHORT_WINDOWS, run_hung_job, user_job

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

ROLL_CALL_WITHIN_S = 90.0


def _text_report(logdir: Path) -> str:
    """``tb-monitor report`` of ``logdir`` as a user reads it, with the short stall floor."""
    command = tb_monitor_command("report", str(logdir))
    env = {**os.environ, **SHORT_STALL_FLOOR}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env).stdout


@pytest.fixture(scope="module")
def hung_at_start(tmp_path_factory) -> tuple[dict, str]:
    """The roll-call in ``report --json`` and the text report of a running job whose rank 1
    sleeps before DDP's constructor while the others wait in its collectives."""
    need("torch")
    env = {**SHORT_WINDOWS, **SHORT_STALL_FLOOR, "HANG_RANK": "1", "HANG_AT": "start"}
    with user_job(tmp_path_factory.mktemp("start"), HANG, env={**env, "HANG_S": "600"}) as job:
        job.wait_for_output("hangs before DDP")
        deadline = time.monotonic() + ROLL_CALL_WITHIN_S
        while time.monotonic() < deadline:
            call = (job.report(SHORT_STALL_FLOOR).get("ranks") or {}).get("roll_call")
            if call and sum(len(g["ranks"]) for g in call["groups"]) == 4:
                return call, _text_report(job.logdir)
            time.sleep(3.0)
        raise AssertionError(f"no roll-call in {ROLL_CALL_WITHIN_S} s:\n{job.output()}")


def test_a_hang_before_the_first_step_names_the_odd_rank(hung_at_start):
    """The roll-call's odd one out is rank 1 in its sleep; the others wait in DDP's constructor."""
    call, _ = hung_at_start
    odd, waiting = call["groups"]
    assert (odd["ranks"], waiting["ranks"]) == ([1], [0, 2, 3])
    assert "wait_before_collective" in call["summary"]


def test_the_text_report_shows_the_start_hangs_stacks(hung_at_start):
    """``tb-monitor report`` prints the roll-call with rank 1's main thread."""
    _, text = hung_at_start
    assert "roll-call" in text and "wait_before_collective" in text


@pytest.fixture(scope="module")
def given_up(tmp_path_factory) -> tuple[list, dict, str]:
    """The agents' exit codes, the report and the text report of a job whose rank 1 hangs at
    step 30 in every attempt, run with --restart-hung-after 10s and --max-restarts 3."""
    need("torch")
    workdir = tmp_path_factory.mktemp("give-up")
    env = {"HANG_AT": "30", "HANG_S": "600", "STEPS": "200"}
    codes, report = run_hung_job(workdir, env, max_restarts=3)
    return codes, report, _text_report(workdir / "logs")


def test_the_second_identical_hang_is_given_up(given_up):
    """The first hang is restarted, the second one where it hung before ends the run."""
    codes, report, _ = given_up
    assert [a["outcome"] for a in report["jobs"][0]["attempts"]] == ["HUNG", "HUNG"]
    assert 3 in codes and report["status"] == "hung"


def test_the_report_says_why_it_gave_up(given_up):
    """The text report says the job hung where it hung before and was not restarted again."""
    assert "not restarted again" in given_up[2]
