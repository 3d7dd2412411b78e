"""A worker killed before training, on records built as a real two-node job leaves them: its agent
stops its other worker and ends, but the agent that holds the rendezvous store learns nothing of
it (torchelastic asks the store only for nodes waiting), so its workers wait on in
``init_process_group`` and nothing ends them. The report names the killed rank as the root cause
and the ranks that still wait for it, while the job runs."""

from __future__ import annotations

from elastic_records import agent, joined, own, rendezvous, verdict

from tb_monitor.analysis.health import report_of

KILLED_AT = 1.5


def _rank_2_killed(survivors_end: bool = False) -> list[dict]:
    """Nodes a (ranks 0, 1; agent pid 10, the store's host) and b (ranks 2, 3; pid 20) start
    their workers; rank 2 is killed at ``KILLED_AT``, b's agent stops rank 3 and records its end
    (torchelastic's SUCCEEDED: its ``run()`` returned); a's agent records only its keep-alives
    unless ``survivors_end``."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [agent(KILLED_AT + 0.1, "b", 20, "FAILED", 2, -9), verdict(1.7, "b", 20, "SUCCEEDED")]
    rows += [agent(KILLED_AT + 0.1, "b", 20, "FAILED", 3, -15), _keep_alive(1.2, "a", 10)]
    rows += [_keep_alive(KILLED_AT + 3, "a", 10)]
    if survivors_end:
        rows += [agent(9.0, "a", 10, "FAILED", r, 1) for r in (0, 1)]
        rows += [verdict(9.1, "a", 10, "FAILED")]
    return rows


def _keep_alive(t: float, node: str, pid: int) -> dict:
    """The agent's keep-alive: it lives on."""
    return {
        **rendezvous(t, node, pid, "RUNNING", "", method="h._keep_alive"),
        "source": "RENDEZVOUS",
    }


def _job(rows: list[dict]) -> dict:
    (job,) = report_of("logs", rows).to_json()["jobs"]
    return job


def test_the_killed_rank_is_the_root_cause_while_the_job_runs():
    """The rank killed by SIGKILL is the root cause before the other node's ranks end."""
    job = _job(_rank_2_killed())
    cause = job["attempts"][-1]["root_cause"]
    assert (job["finished"], cause["rank"], cause["signal"]) == (False, 2, "SIGKILL")


def test_ranks_no_record_ended_are_named_waiting_while_the_job_runs():
    """The ranks of the node whose agent went on are listed waiting, not as stopped."""
    assert _job(_rank_2_killed())["waiting_ranks"] == [0, 1]


def test_no_rank_waits_once_the_job_ended():
    """Once the other agent ended its ranks and recorded its end, no rank is left waiting."""
    assert _job(_rank_2_killed(survivors_end=True))["waiting_ranks"] == []


def test_the_report_text_says_which_ranks_still_wait():
    """The text lists the stopped rank as gone down and the others as still waiting."""
    text = str(report_of("logs", _rank_2_killed()))
    assert "went down with  rank 3 (stopped when the job ended)" in text
    assert "still waiting   ranks 0, 1 (no record ended them: their agent goes on)" in text


def test_the_verdict_says_the_job_must_be_ended():
    """The verdict names the waiting ranks and that nothing will end them but the user."""
    text = str(report_of("logs", _rank_2_killed()))
    assert text.rstrip().endswith("ranks 0, 1 still wait for the failed rank: end the job")


def test_no_rank_waits_while_the_known_failure_is_only_a_lost_peer():
    """Rank 0 killed in a save: rank 2's "Connection closed by peer" lands before rank 0's agent
    records the kill, so rank 0, with no record yet, is a suspect, not a rank that waits."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    lost = "RuntimeError: [gloo] Connection closed by peer [10.0.0.1]:4242"
    rows += [own(KILLED_AT + 0.05, 2, "FAILED", message=lost, trace=lost)]
    rows += [_keep_alive(KILLED_AT + 0.2, node, pid) for node, pid in (("a", 10), ("b", 20))]
    assert _job(rows)["waiting_ranks"] == []


def test_no_rank_of_an_agent_unheard_since_the_failure_waits():
    """Until a's agent records anything after rank 2's kill (a keep-alive), its ranks are not
    known to wait: an agent killed with its node is as quiet (the campaign's node-kill9)."""
    rows = [r for r in _rank_2_killed() if r["wall_time"] < KILLED_AT + 3]
    assert _job(rows)["waiting_ranks"] == []


def test_no_rank_waits_while_the_known_failure_is_only_a_bare_exit_code():
    """Rank 2 killed in a save: rank 0's agent records its exit (code 1, no message) before
    rank 0's own record of the lost peer and before rank 2's agent records the kill: rank 2 is
    a suspect, not a rank that waits (the campaign's save-kill, seed 61)."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [agent(KILLED_AT + 0.3, "a", 10, "FAILED", 0, 1)]
    rows += [_keep_alive(KILLED_AT + 0.4, node, pid) for node, pid in (("a", 10), ("b", 20))]
    assert _job(rows)["waiting_ranks"] == []


def test_a_node_whose_rank_recorded_its_end_is_not_lost():
    """Rank 0 killed in a save; rank 3 records its lost peer while b's agent is between
    keep-alives and rank 2 still waits: node b is not lost (rank 3 lived to record), the root
    cause is no vanished node, and no rank is listed waiting (the campaign's save-kill)."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    lost = "RuntimeError: [gloo] Connection closed by peer [10.0.0.1]:4242"
    rows += [own(KILLED_AT + 0.05, r, "FAILED", message=lost, trace=lost) for r in (1, 3)]
    rows += [_keep_alive(KILLED_AT + 0.2, "a", 10)]
    job = _job(rows)
    assert (job["attempts"][-1]["root_cause"]["source"], job["waiting_ranks"]) == ("worker", [])


def _rank_2_exited(then: float) -> list[dict]:
    """Rank 2 exits with code 1 (no signal, no message: ``os._exit``) at ``KILLED_AT``; b's
    agent stops rank 3 and ends; a's agent keeps alive until ``then``."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20), _keep_alive(1.2, "a", 10)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [agent(KILLED_AT, "b", 20, "FAILED", 2, 1), agent(KILLED_AT, "b", 20, "FAILED", 3, -15)]
    return [*rows, verdict(KILLED_AT + 0.2, "b", 20, "SUCCEEDED"), _keep_alive(then, "a", 10)]


def test_a_bare_exit_code_long_unexplained_is_the_failure_ranks_wait_for():
    """Ten seconds on, nothing else explains rank 2's bare exit: it is the failure, and the
    ranks of a's agent, which keeps alive, are named waiting."""
    job = _job(_rank_2_exited(then=KILLED_AT + 12))
    assert (job["attempts"][-1]["root_cause"]["rank"], job["waiting_ranks"]) == (2, [0, 1])


def test_a_bare_exit_code_just_read_names_no_rank_waiting():
    """Read a second after it, the bare exit may be a lost peer's: no rank is named waiting."""
    assert _job(_rank_2_exited(then=KILLED_AT + 1))["waiting_ranks"] == []


def test_an_earlier_bare_exit_code_still_beats_a_later_exception():
    """Without a lost node to explain it, a bare exit code is a real failure: earlier than
    another rank's exception, it is the root cause."""
    preempted = "Preempted: SIGTERM"
    rows = [*_rank_2_exited(then=KILLED_AT + 1), own(KILLED_AT + 0.1, 0, "FAILED", preempted)]
    assert _job(rows)["attempts"][-1]["root_cause"]["rank"] == 2
