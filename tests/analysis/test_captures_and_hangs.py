"""Reading captures and hung attempts back from timeline records (``analysis.captures``,
``analysis.hung``)."""

from __future__ import annotations

import json

from tb_monitor import contract
from tb_monitor.analysis.attempts import Attempt
from tb_monitor.analysis.captures import captures
from tb_monitor.analysis.hung import hung_attempts

T = 1_700_000_000.0
AGENT = "job/agent-a-1"


def _capture_row(rank: int, at: float) -> dict:
    files = {"profile": f"job/captures/c1/rank-{rank}/profile.json"}
    meta = {"capture": "c1", "reason": "on request", "seconds": 2.0, "files": json.dumps(files)}
    meta["errors"] = "{}"
    return {
        "name": contract.RANK_CAPTURE,
        "run": AGENT,
        "rank": rank,
        "wall_time": at,
        "metadata": meta,
    }


def _stacks_row(rank: int, at: float, function: str, line: int) -> dict:
    frames = [{"name": function, "file": "/src/train.py", "line": line, "native": False}]
    meta = {"roll_call": "a@1", "stalled_since": T, "frames": json.dumps(frames), "stacks": ""}
    return {
        "name": contract.RANK_STACKS,
        "run": AGENT,
        "rank": rank,
        "wall_time": at,
        "metadata": meta,
    }


def _attempt(**changes) -> Attempt:
    values = dict(
        job="job",
        attempt=0,
        start=T - 30,
        end=T + 12,
        outcome="FAILED",
        ranks=(0, 1, 2),
        failed_ranks=(0, 1, 2),
        root_cause=None,
        collateral_ranks=(),
        time_lost_s=None,
        nodes=(),
        nodes_joined=(),
        nodes_left=(),
        rendezvous_s=0.0,
    )
    return Attempt(**{**values, **changes})


def test_one_capture_gathers_every_rank():
    """Each rank's record of one capture lands in one Capture, its files by rank."""
    (found,) = captures([_capture_row(1, T + 1), _capture_row(0, T)])["job"]
    assert (found.capture, found.at, sorted(found.files)) == ("c1", T, [0, 1])


def test_a_hung_attempt_names_the_odd_rank():
    """An attempt with a hung record is HUNG, its root cause the roll-call's odd one out."""
    hung = {"stalled_since": T, "held_s": 10.0, "action": "restart", "hostname": "a"}
    rows = [
        _stacks_row(0, T + 6, "all_reduce", 42),
        _stacks_row(1, T + 6, "sleep", 40),
        _stacks_row(2, T + 6, "all_reduce", 42),
        {
            "name": contract.AGENT_HUNG,
            "run": AGENT,
            "rank": None,
            "wall_time": T + 10,
            "metadata": hung,
        },
    ]
    (attempt,) = hung_attempts(rows, [_attempt()], {("job", 0): T + 15})
    assert (attempt.outcome, attempt.root_cause.rank, attempt.time_lost_s) == ("HUNG", 1, 15.0)
    assert attempt.root_cause.reason.startswith("hung: rank 1 in `sleep` at train.py:40")


def test_an_attempt_without_a_hung_record_is_left_alone():
    """No hung record: the attempt is as it was."""
    attempt = _attempt()
    assert hung_attempts([_capture_row(0, T)], [attempt], {}) == [attempt]
