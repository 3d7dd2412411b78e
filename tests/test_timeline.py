"""Lanes and intervals: the timeline model shared by the plugin, the export and the notebook."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from tb_monitor import contract, timeline
from tb_monitor.synthetic import keep_alive_round

_SYNC = keep_alive_round("j", "h", 1)[1]  # a keep-alive round's middle record


def test_a_rendezvous_record_without_local_id_stays_on_its_nodes_lane():
    """The store's INIT record (local_id None) and later ones (local_id 0) share one lane."""
    base = {"run": "j/agent-h-1", "kind": contract.RENDEZVOUS, "run_id": "j", "hostname": "h"}
    early = {**base, "pid": 1, "local_id": None}
    later = {**base, "pid": 1, "local_id": 0}
    assert timeline.lane_of(early) == timeline.lane_of(later)
    assert timeline.lane_of(early).label == "h (pid 1)"


def _worker(state: str, wall_time: float, restarts: int = 0) -> dict:
    return {
        "run": "j/agent-h-1",
        "kind": contract.WORKER,
        "run_id": "j",
        "rank": 3,
        "state": state,
        "name": f"torchelastic.worker.status.{state}",
        "wall_time": wall_time,
        "metadata": {"agent_restarts": restarts},
    }


def _joined(number: int, wall_time: float) -> dict:
    """The agent of ``_worker``'s records joining rendezvous round ``number``."""
    message = f"The node 'h' has joined round {number} of the rendezvous 'j' as rank 0."
    return {
        "run": "j/agent-h-1",
        "kind": contract.RENDEZVOUS,
        "run_id": "j",
        "hostname": "h",
        "pid": 1,
        "message": message,
        "wall_time": wall_time,
    }


def test_a_worker_start_and_its_end_form_one_attempt_interval():
    """START then FAILED on one rank's lane is one interval, coloured by its outcome."""
    found = timeline.spans([_worker("START", 10.0), _worker("FAILED", 12.5)])
    assert [(s.begin, s.end, s.state, s.label) for s in found] == [
        (10.0, 12.5, "FAILED", "attempt 0: FAILED")
    ]


def test_an_attempt_without_an_end_runs_open_to_the_last_record():
    """A START with no end yet is an open interval up to the latest record seen."""
    found = timeline.spans([_worker("START", 10.0), {**_worker("HEALTHY", 11.0), "rank": 4}])
    attempt = next(s for s in found if s.lane.label == "rank 3")
    assert (attempt.begin, attempt.end, attempt.open) == (10.0, 11.0, True)


def test_records_whose_lane_inputs_differ_in_form_share_their_lane():
    """A run id given as a number and as its text, and a field the lane does not read (a
    worker's hostname, here a list), leave records on one lane: one attempt interval."""
    start = {**_worker("START", 10.0), "run_id": 7, "hostname": ["h", "h2"]}
    end = {**_worker("FAILED", 12.5), "run_id": "7"}
    found = timeline.spans([start, end])
    assert [(s.lane.label, s.begin, s.end, s.state) for s in found] == [
        ("rank 3", 10.0, 12.5, "FAILED")
    ]


def test_a_worker_attempt_is_numbered_by_its_agents_last_round_joined_before_it():
    """Rounds joined at 5 and 20: a START at 10 is attempt of round 1, one at 20 of round 2,
    whatever the restart count says; before any round, the restart count."""

    rows = [_joined(1, 5.0), _joined(2, 20.0), _worker("START", 2.0, restarts=9)]
    rows += [_worker("FAILED", 3.0), _worker("START", 10.0), _worker("FAILED", 11.0)]
    rows += [_worker("START", 20.0), _worker("SUCCEEDED", 30.0)]
    attempts = [s for s in timeline.spans(rows) if s.lane.kind == contract.WORKER]
    assert [(s.begin, s.number) for s in attempts] == [(2.0, 9), (10.0, 1), (20.0, 2)]


def test_records_without_a_number_for_a_time_leave_the_others_in_time_order():
    """Two records at NaN on another rank, wherever they come, leave rank 3's attempts as
    its starts, ends and its agent's rounds say (a NaN in the sort's key would not)."""

    nan = {**_worker("HEALTHY", float("nan")), "rank": 5}
    rows = [_worker("FAILED", 7.0), nan, _joined(2, 20.0), _worker("SUCCEEDED", 30.0), dict(nan)]
    rows += [_joined(1, 5.0), _worker("START", 21.0), _worker("START", 6.0)]
    attempts = [s for s in timeline.spans(rows) if s.lane.label == "rank 3" and s.end is not None]
    assert [(s.begin, s.end, s.number, s.state) for s in attempts] == [
        (6.0, 7.0, 1, "FAILED"),
        (21.0, 30.0, 2, "SUCCEEDED"),
    ]


def test_spans_take_each_records_lane_from_the_lane_of_given():
    """A caller that knows each record's lane gives it; records drawn on one lane chain there."""
    rows = [_worker("START", 10.0), {**_worker("SUCCEEDED", 20.0), "rank": 4}]
    one = timeline.Lane("j", contract.WORKER, "rank 3", (3,))
    found = timeline.spans(rows, lambda row: one)
    assert [(s.lane, s.begin, s.end, s.state) for s in found] == [(one, 10.0, 20.0, "SUCCEEDED")]


def test_a_lane_pickled_after_hashing_is_found_in_a_process_with_another_hash_seed():
    """A lane keeps its hash once made, but not in its pickle: read back where strings hash
    differently, it is still found as the same lane."""
    lane = timeline.lane_of(_joined(1, 10.0))
    hash(lane)  # made, and kept
    script = (
        "import pickle, sys\n"
        "from tb_monitor import timeline\n"
        "lane = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = timeline.Lane(lane.group, lane.kind, lane.label, lane.key)\n"
        "print({fresh: 'found'}.get(lane))\n"
    )
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=pickle.dumps(lane),
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        assert done.stdout.decode().strip() == "found"


def _rendezvous(state: str, message: str) -> dict:
    return {"kind": contract.RENDEZVOUS, "state": state, "message": message}


@pytest.mark.parametrize(
    "state, message",
    [
        ("RUNNING", "The node 'h_1_0' attempts to join the next round of the rendezvous 'j'."),
        ("RUNNING", "The node 'h_1_0' has joined round 2 of the rendezvous 'j' as rank 0."),
        ("RUNNING", "The node 'h_1_0' marked round 2 of the rendezvous 'j' as complete."),
        ("FAILED", "The node 'h_1_0' failed."),
        ("INIT", "The node 'h_1_0' hosts the TCPStore of the rendezvous 'j'."),
    ],
)
def test_a_rendezvous_record_with_a_part_in_a_round_marks_more_than_a_time(state, message):
    """Joins, joined rounds, completions, failures and INIT are each read for more than a time."""
    assert not timeline.marks_time_only(_rendezvous(state, message))


def test_a_keep_alive_rounds_sync_marks_only_a_time():
    """The sync torch records every keep-alive round tells the analyses only a time."""
    sync = contract.decode_record(contract.RENDEZVOUS, json.loads(_SYNC))
    assert timeline.marks_time_only({**sync, "kind": contract.RENDEZVOUS})


def test_a_worker_record_marks_more_than_a_time():
    """Only rendezvous records are ever told to mark a time only."""
    assert not timeline.marks_time_only(_worker("RUNNING", 1.0))
