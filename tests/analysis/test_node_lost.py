"""A node lost with ``kill -9`` (its agent and its workers at once), on records built as a real
two-node job leaves them: one root cause naming every rank of the node, dated by what the
survivors recorded, and a job that reads ended once the surviving agent recorded its end."""

from __future__ import annotations

from elastic_records import agent, joined, own, rendezvous, verdict

from tb_monitor import contract
from tb_monitor.analysis.attempts import attempt_dict, attempts, finished_jobs
from tb_monitor.analysis.health import report_of
from tb_monitor.analysis.restart_marks import mark_restarts
from tb_monitor.timeline import spans

GLOO = "RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1234: Connection reset by peer"
#: Node b's last flushed records; the kill lands seconds later (``KILLED_AT``).
LAST_FLUSHED, KILLED_AT = 1.5, 4.0


def _own(t, rank, state, message=None):
    """Rank ``rank``'s own record: ranks 0 and 1 on node a, 2 and 3 on node b."""
    return own(t, rank, state, message, message, host="a" if rank < 2 else "b")


def _node_b_killed(survivor_fails_at: float = 5.0) -> list[dict]:
    """Nodes a (ranks 0, 1; agent pid 10) and b (ranks 2, 3; pid 20) train; b is killed at
    ``KILLED_AT``, its last records flushed at ``LAST_FLUSHED``; ranks 0 and 1 fail on gloo's
    read error from ``survivor_fails_at`` and a's agent records the ranks' failures and its
    own SUCCEEDED (torchelastic's: its ``run()`` returned), as a real store host does."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [_own(1.2, r, "RUNNING") for r in (0, 1)] + [_own(LAST_FLUSHED, 2, "RUNNING")]
    rows += [_own(LAST_FLUSHED - 0.1, 3, "RUNNING")]
    rows += [_own(survivor_fails_at, 1, "FAILED", GLOO)]
    rows += [_own(survivor_fails_at + 0.03, 0, "FAILED", GLOO)]
    rows += [agent(survivor_fails_at + 1.6, "a", 10, "FAILED", r, 1) for r in (0, 1)]
    return [*rows, verdict(survivor_fails_at + 1.6, "a", 10, "SUCCEEDED")]


def _keep_alive_failed(t: float) -> dict:
    """Node a's agent failing to reach the store node b hosted."""
    message = "The node 'a_10_0' has failed to send a keep-alive heartbeat to the rendezvous"
    return rendezvous(t, "a", 10, "FAILED", message, method="h._keep_alive")


def test_a_lost_node_is_dated_by_the_first_survivors_failure():
    """The loss is dated at the first surviving rank's failure after the node's last record,
    not at that last record, which the kill followed by seconds."""
    (only,) = attempts(_node_b_killed(survivor_fails_at=KILLED_AT + 0.07))
    cause = only.root_cause
    assert (cause.time, cause.seen_by) == (KILLED_AT + 0.07, "rank 1")


def test_a_lost_node_is_dated_by_the_surviving_agents_alarm_when_it_came_first():
    """A surviving agent's failed keep-alive before any surviving rank failed dates the loss."""
    rows = [*_node_b_killed(survivor_fails_at=30.0), _keep_alive_failed(KILLED_AT + 0.2)]
    (only,) = attempts(rows)
    cause = only.root_cause
    assert (cause.time, cause.seen_by) == (KILLED_AT + 0.2, "the agent on a (pid 10)")


def test_a_survivors_alarm_before_the_nodes_last_record_does_not_date_the_loss():
    """Trouble a survivor recorded while the node still wrote records says nothing of its loss."""
    rows = [*_node_b_killed(), _keep_alive_failed(LAST_FLUSHED - 0.5)]
    (only,) = attempts(rows)
    assert only.root_cause.time == 5.0


def test_every_rank_of_a_lost_node_is_named_in_its_root_cause():
    """The root cause is the node, naming both of its ranks; neither is collateral of the other."""
    (only,) = attempts(_node_b_killed())
    cause = only.root_cause
    assert (cause.ranks, cause.node, cause.source) == ((2, 3), "b (pid 20)", "vanished")
    assert cause.reason == "node b lost: ranks 2, 3"
    assert only.collateral_ranks == (0, 1)


def test_the_report_json_names_the_lost_nodes_ranks():
    """``report --json``'s root cause carries the node, its ranks and who saw the loss first."""
    (only,) = attempts(_node_b_killed())
    cause = attempt_dict(only)["root_cause"]
    assert (cause["rank"], cause["ranks"], cause["node"]) == (2, [2, 3], "b (pid 20)")
    assert cause["seen_by"] == "rank 1"


def test_the_report_text_names_the_lost_node_and_its_ranks():
    """The report's root cause line names every rank of the node and the node itself."""
    text = str(report_of("logs", _node_b_killed()))
    assert "root cause      ranks 2, 3 on b (pid 20)" in text
    assert "node b lost: ranks 2, 3" in text and "went down with  ranks 0, 1" in text


def test_every_rank_of_a_lost_node_is_drawn_with_the_cause():
    """The Timeline labels both ranks of the lost node with the root cause's reason."""
    rows = _node_b_killed()
    marks = spans(rows)
    drawn = mark_restarts(marks, attempts(rows, marks))
    labels = {s.lane.label: s.label for s in drawn if s.end is not None and s.number == 0}
    assert labels["rank 2"] == labels["rank 3"] == "attempt 0: node b lost: ranks 2, 3"


def test_a_job_whose_lost_agent_recorded_no_end_is_finished():
    """The surviving agent's end and the lost node's agent, gone, end the job: not running."""
    rows = _node_b_killed()
    assert finished_jobs(rows) == {"job": True}
    assert "still running" not in str(report_of("logs", rows))


def test_a_job_whose_surviving_agent_has_not_ended_is_still_running():
    """Until the surviving agent records its end, a job that lost a node is not over."""
    rows = [r for r in _node_b_killed() if r["kind"] != contract.AGENT]
    assert finished_jobs(rows) == {"job": False}


def test_a_real_exception_on_a_survivor_still_beats_a_lost_node():
    """A surviving rank's own exception (not a lost peer) stays the root cause."""
    rows = [*_node_b_killed(), _own(3.0, 0, "FAILED", "ValueError: bad batch")]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.exception) == (0, "ValueError")
    assert only.collateral_ranks == (1, 2, 3)


def _survivors_agent_failed_first() -> list[dict]:
    """Node b killed; a's agent records its ranks' exits (code 1, no error file) before the
    ranks' own records of the lost peer are read: what a read in between sees."""
    rows = [r for r in _node_b_killed() if not (r["state"] == "FAILED" and "agent" not in r["run"])]
    return [r for r in rows if r["kind"] != contract.AGENT]


def test_a_survivors_bare_exit_code_does_not_beat_a_lost_node():
    """A survivor known only by its agent's exit code (no signal, no message) says no more
    than a lost peer would: the vanished node is the root cause."""
    (only,) = attempts(_survivors_agent_failed_first())
    assert (only.root_cause.source, only.root_cause.ranks) == ("vanished", (2, 3))


def test_the_lost_nodes_ranks_are_never_named_waiting():
    """The ranks of a node that vanished are the cause, not ranks waiting for it."""
    (job,) = report_of("logs", _survivors_agent_failed_first()).to_json()["jobs"]
    assert job["waiting_ranks"] == []
