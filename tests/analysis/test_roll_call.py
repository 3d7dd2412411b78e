"""The roll-call of a hung job: ranks grouped by where their main thread is, the odd one first."""

from __future__ import annotations

import json

from tb_monitor import contract
from tb_monitor.analysis.roll_call import group_ranks, innermost, roll_calls

T = 1_700_000_000.0
TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _frames(*frames: tuple[str, str, int]) -> list[dict]:
    return [
        {"name": n, "file": f, "line": line, "native": f.endswith(".so")} for n, f, line in frames
    ]


WAITING = _frames(
    ("__poll", "/lib/libc.so", 0),
    ("all_reduce", TORCH, 2501),
    ("train", "/job/train.py", 42),
    ("<module>", "/job/train.py", 60),
)
SLEEPING = _frames(("train", "/job/train.py", 40), ("<module>", "/job/train.py", 60))


def _capture(frames: list[dict], stacks: str = "...", state: str = "S") -> dict:
    return {"frames": frames, "stacks": stacks, "method": "py-spy --native", "process_state": state}


def _row(rank: int, wall: float, frames: list[dict], since: float, job: str = "job") -> dict:
    meta = {
        "roll_call": f"a@{wall}",
        "stalled_since": since,
        "frames": json.dumps(frames),
        "stacks": f"stacks of rank {rank}",
        "method": "py-spy",
    }
    return {
        "run": f"{job}/agent-a-1",
        "name": contract.RANK_STACKS,
        "rank": rank,
        "wall_time": wall,
        "metadata": meta,
    }


def test_innermost_skips_native_and_library_frames():
    """The function is the innermost Python one; the place is the innermost user frame."""
    assert innermost(WAITING) == ("all_reduce", "train.py:42")


def test_odd_one_out_comes_first():
    """Three ranks waiting in all_reduce and one elsewhere: the lone rank's group is first."""
    groups = group_ranks(
        {0: _capture(WAITING), 1: _capture(SLEEPING), 2: _capture(WAITING), 3: _capture(WAITING)}
    )
    assert [(g.ranks, g.where) for g in groups] == [
        ((1,), "train.py:40"),
        ((0, 2, 3), "train.py:42"),
    ]


def test_a_stopped_rank_in_the_waiters_frame_is_the_odd_one_out():
    """A rank SIGSTOPped inside the backward (the frame the others wait in) is a group apart."""
    captures = {r: _capture(WAITING) for r in (0, 2, 3)} | {1: _capture(WAITING, state="T")}
    groups = group_ranks(captures)
    assert [(g.ranks, g.held) for g in groups] == [((1,), "stopped"), ((0, 2, 3), None)]
    assert groups[0].words() == "rank 1 (stopped) in `all_reduce` at train.py:42"


def test_a_held_group_comes_before_a_running_one_as_large():
    """Of two groups of one, the rank in uninterruptible sleep comes first."""
    groups = group_ranks({0: _capture(WAITING), 1: _capture(WAITING, state="D")})
    assert [(g.ranks, g.held) for g in groups] == [((1,), "uninterruptible sleep"), ((0,), None)]


def test_roll_calls_read_the_process_state_of_each_capture():
    """A capture's /proc state (its record's process_state) sets a stopped rank apart."""
    rows = [_row(r, T + 10, WAITING, T) for r in range(3)]
    rows[2]["metadata"]["process_state"] = "t"
    assert [g.ranks for g in roll_calls(rows)["job"].groups] == [(2,), (0, 1)]


def test_group_words_name_the_function_and_the_place():
    """A group reads as 'ranks 0, 2, 3 in `all_reduce` at train.py:42'."""
    (group,) = group_ranks({0: _capture(WAITING), 2: _capture(WAITING), 3: _capture(WAITING)})
    assert group.words() == "ranks 0, 2, 3 in `all_reduce` at train.py:42"


def test_roll_calls_gather_both_agents_captures_of_one_stall():
    """Captures from two agents taken after the stall began make one roll-call."""
    rows = [_row(0, T + 10, WAITING, T), _row(1, T + 11, SLEEPING, T + 0.5)]
    rows[1]["run"] = "job/agent-b-1"
    call = roll_calls(rows)["job"]
    assert call.words() == "rank 0 in `all_reduce` at train.py:42; rank 1 in `train` at train.py:40"


def test_roll_calls_leave_out_an_earlier_stalls_capture():
    """A rank captured only in an earlier stall (before steps resumed) is not in the new one."""
    rows = [_row(0, T + 10, WAITING, T), _row(1, T + 100, SLEEPING, T + 90)]
    assert [g.ranks for g in roll_calls(rows)["job"].groups] == [(1,)]


def test_roll_calls_ignore_stacks_outside_a_roll_call():
    """A silent rank's own dump (no roll_call) makes no roll-call."""
    row = _row(0, T, WAITING, T)
    del row["metadata"]["roll_call"]
    assert roll_calls([row]) == {}


def test_roll_call_json_holds_groups_with_their_main_thread():
    """The JSON says the summary, and per group its ranks, method and main thread's frames."""
    out = roll_calls([_row(0, T + 10, WAITING, T)])["job"].to_json()
    (group,) = out["groups"]
    assert (out["summary"], group["ranks"], group["method"]) == (
        "rank 0 in `all_reduce` at train.py:42",
        [0],
        "py-spy",
    )
    assert group["main_thread"][1]["name"] == "all_reduce"
