"""Lanes and intervals: the timeline model shared by the plugin, the export and the notebook."""

from __future__ import annotations

from tb_monitor import contract, timeline


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
