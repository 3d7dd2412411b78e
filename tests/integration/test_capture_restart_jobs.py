"""A capture on demand and a hung attempt restarted, on real 2-agent x 2-worker DDP jobs (gloo,
CPU) under tb-monitor run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need
from torchrun_jobs import tb_monitor_command
from users_jobs import DDP, SHORT_WINDOWS, run_hung_job, user_job

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

CAPTURED_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> tuple[Path, str, dict]:
    """The logdir, the capture id and the report of a running job captured from the command
    line (2 s of profile)."""
    need("torch")
    env = {**SHORT_WINDOWS, "STEP_SLEEP_S": "0.05"}
    with user_job(tmp_path_factory.mktemp("capture"), DDP, "100000", "100000", env=env) as job:
        job.wait_for_output("Epoch 3 ")
        command = tb_monitor_command("capture", str(job.logdir), "--seconds", "2")
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        capture_id = done.stdout.strip()
        deadline = time.monotonic() + CAPTURED_WITHIN_S
        while time.monotonic() < deadline:
            ranks = job.report()["jobs"][0]["captures"]
            if ranks and len(ranks[0]["ranks"]) == 4:
                return job.logdir, capture_id, ranks[0]
            time.sleep(2.0)
        raise AssertionError(f"no capture of 4 ranks in {CAPTURED_WITHIN_S} s:\n{job.output()}")


def test_every_rank_has_a_chrome_trace_of_its_training(captured):
    """Each rank's profile is chrome-trace JSON holding its all-reduces."""
    logdir, _, capture = captured
    for rank in capture["ranks"]:
        trace = json.loads((logdir / rank["files"]["profile"]).read_text())
        names = {event.get("name") for event in trace["traceEvents"]}
        assert "gloo:all_reduce" in names, rank["rank"]


def test_every_rank_has_its_stacks_and_flight_recorder(captured):
    """Each rank's stacks and Flight Recorder entries were written beside its profile."""
    logdir, _, capture = captured
    for rank in capture["ranks"]:
        assert "Thread" in (logdir / rank["files"]["stacks"]).read_text()
        recorder = json.loads((logdir / rank["files"]["flight_recorder"]).read_text())
        assert recorder["entries"], rank["rank"]


def test_the_report_lists_the_capture_the_command_asked_for(captured):
    """The report names the capture by the id the command printed, taken on request."""
    _, capture_id, capture = captured
    assert (capture["capture"], capture["reason"]) == (capture_id, "on request")


@pytest.fixture(scope="module")
def restarted(tmp_path_factory) -> tuple[list, dict]:
    """The agents' exit codes and the report of a job whose rank 1 hangs in its first attempt,
    run with --restart-hung-after 10s and --max-restarts 1."""
    need("torch")
    workdir = tmp_path_factory.mktemp("hung")
    env = {
        "HANG_AT": "30",
        "HANG_S": "600",
        "HANG_ONCE": str(workdir / "hung-once"),
        "STEPS": "200",
    }
    return run_hung_job(workdir, env, max_restarts=1)


def test_the_restarted_job_finishes(restarted):
    """Both agents exit 0: the second attempt trained to the end."""
    codes, report = restarted
    attempts = report["jobs"][0]["attempts"]
    outcomes = [a["outcome"] for a in attempts]
    why = [(a["outcome"], (a["root_cause"] or {}).get("reason")) for a in attempts]
    assert (codes, outcomes) == ([0, 0], ["HUNG", "SUCCEEDED"]), (report["status"], why)


def test_the_hung_attempt_names_the_rank_that_hung(restarted):
    """The hung attempt's root cause is rank 1 where it sleeps, restarted."""
    cause = restarted[1]["jobs"][0]["attempts"][0]["root_cause"]
    assert (cause["rank"], cause["source"]) == (1, "hung")
    assert "wait_before_collective" in cause["reason"] and "restarted after" in cause["reason"]
