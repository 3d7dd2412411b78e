"""The roll-call on real 2-agent x 2-worker DDP jobs (gloo, CPU) under tb-monitor run: a rank
SIGSTOPped, and a rank hanging in a Python sleep before its collective."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import need
from users_jobs import DDP, SHORT_STALL_FLOOR, SHORT_WINDOWS, UserJob, user_job

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

HANG = Path(__file__).parent / "scripts" / "ddp_hang.py"
#: The agents' stall rule and the report's alike: a 5-s floor (the steps take milliseconds).
ENV = {**SHORT_WINDOWS, **SHORT_STALL_FLOOR, "STEP_SLEEP_S": "0.05"}
ROLL_CALL_WITHIN_S = 60.0


def _roll_call(job: UserJob, since: float = 0.0) -> dict:
    """The report's roll-call taken after ``since`` (wall time) once it holds all 4 ranks (or
    what it holds after the wait): on a loaded machine a pause before the fault may have had
    one of its own."""
    deadline, call = time.monotonic() + ROLL_CALL_WITHIN_S, None
    while time.monotonic() < deadline:
        ranks = job.report(SHORT_STALL_FLOOR)["ranks"] or {}
        call = ranks.get("roll_call")
        taken = call and (call.get("at") or 0.0) >= since
        if taken and sum(len(g["ranks"]) for g in call["groups"]) == 4:
            return call
        time.sleep(2.0)
    raise AssertionError(f"no roll-call of 4 ranks in {ROLL_CALL_WITHIN_S} s: {json.dumps(call)}")


@pytest.fixture(scope="module")
def stopped_call(tmp_path_factory) -> dict:
    """The roll-call of the DDP job whose rank 1 is SIGSTOPped while it trains."""
    need("torch")
    with user_job(tmp_path_factory.mktemp("rc-stop"), DDP, "100000", "100000", env=ENV) as job:
        job.wait_for_output("Epoch 3 ")
        stopped_at = time.time()
        job.signal_rank(1, signal.SIGSTOP)
        try:
            return _roll_call(job, since=stopped_at)
        finally:
            job.signal_rank(1, signal.SIGCONT)


@pytest.fixture(scope="module")
def sleeping_call(tmp_path_factory) -> dict:
    """The roll-call of the DDP job whose rank 1 sleeps before its collective."""
    need("torch")
    env = {**ENV, "HANG_RANK": "1", "HANG_AT": "30", "HANG_S": "120"}
    with user_job(tmp_path_factory.mktemp("rc-sleep"), HANG, env=env) as job:
        job.wait_for_output("hangs at step")
        return _roll_call(job, since=time.time() - 1.0)


def test_stopped_rank_is_the_odd_one_out(stopped_call):
    """The SIGSTOPped rank 1 comes first, alone and stopped (whether the stop caught it in the
    backward the other three wait in or elsewhere); the other three share one frame."""
    groups = stopped_call["groups"]
    assert [(g["ranks"], g["held"]) for g in (groups[0], groups[-1])] == [
        ([1], "stopped"),
        ([0, 2, 3], None),
    ], json.dumps(groups)


def test_stopped_ranks_stacks_are_read_by_py_spy(stopped_call):
    """A stopped process cannot dump its stacks; py-spy reads them (Python frames)."""
    (odd, *_) = stopped_call["groups"]
    assert odd["method"] == "py-spy" and odd["main_thread"], json.dumps(odd)


def test_sleeping_rank_is_named_where_it_sleeps(sleeping_call):
    """Rank 1 is in wait_before_collective, alone; the others wait in the backward."""
    odd, others = sleeping_call["groups"][0], sleeping_call["groups"][-1]
    assert (odd["ranks"], odd["function"]) == ([1], "wait_before_collective"), json.dumps(odd)
    assert others["ranks"] == [0, 2, 3] and others["where"].startswith("ddp_hang.py:")


def test_waiting_ranks_stacks_hold_native_frames(sleeping_call):
    """Running ranks are read with py-spy --native: frames below Python are there too."""
    others = sleeping_call["groups"][-1]
    assert others["method"] == "py-spy --native"
    assert any(f["native"] for f in others["main_thread"]), json.dumps(others["main_thread"])
