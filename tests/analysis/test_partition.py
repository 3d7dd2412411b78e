"""A network partition between two nodes, on records built as the campaign's real partition leaves
them (tests/netns.py): node b's agent loses the rendezvous store node a hosts and stops its ranks;
a's ranks fail on gloo's timed-out connections to b. The root cause is b's ranks, cut off from
a's, dated by what a's side saw first; not a's first rank, which only lost its peer."""

from __future__ import annotations

from elastic_records import agent, joined, own, rendezvous, verdict

from tb_monitor.analysis.attempts import attempt_dict, attempts
from tb_monitor.analysis.health import report_of

TIMED_OUT = "RuntimeError: [pair.cc:537] Read error [10.213.7.2]:4242: Connection timed out"
CLOSED = "RuntimeError: [pair.cc:553] Connection closed by peer [10.213.7.1]:4243"
STORE_LOST = "RendezvousConnectionError: The connection to the C10d store has failed."
#: When a's rank 1 saw its connection to b time out, and when b's agent lost the store.
A_SAW, B_LOST = 10.8, 11.5


def _own(t, rank, state, message=None):
    """Rank ``rank``'s own record: ranks 0 and 1 on node a, 2 and 3 on node b."""
    return own(t, rank, state, message, message, host="a" if rank < 2 else "b")


def _keep_alive(t: float, node: str, pid: int, state: str) -> dict:
    """The agent ``pid``'s keep-alive to the rendezvous store, sent or failed."""
    said = "has sent a keep-alive" if state == "RUNNING" else "has failed to send a keep-alive"
    message = f"The node '{node}_{pid}_0' {said} heartbeat to the rendezvous 'job'"
    if state == "FAILED":
        message += " due to an error of type RendezvousConnectionError."
    return rendezvous(t, node, pid, state, message, method="h._keep_alive")


def _partitioned(a_alive_until: float = 16.4) -> list[dict]:
    """Nodes a (ranks 0, 1; agent pid 10, the store's host) and b (ranks 2, 3; pid 20) train;
    the link between them is cut at 3.0. Rank 1 times out on b at ``A_SAW``; b's agent fails
    its keep-alive at ``B_LOST`` and stops its ranks (SIGTERM); rank 0 then loses rank 1; a's
    agent keeps its keep-alives going until ``a_alive_until`` and records its end there."""
    rows = [joined(0.5, "a", 10), joined(0.6, "b", 20)]
    rows += [agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [_own(1.2, r, "RUNNING") for r in range(4)]
    rows += [_own(A_SAW, 1, "FAILED", TIMED_OUT), _keep_alive(B_LOST, "b", 20, "FAILED")]
    rows += [rendezvous(B_LOST + 0.3, "b", 20, "FAILED", STORE_LOST, method="h.num_nodes")]
    rows += [_own(B_LOST + 0.4, r, "TERMINATED", "received SIGTERM") for r in (2, 3)]
    rows += [
        verdict(B_LOST + 0.6, "b", 20, "FAILED"),
        _keep_alive(a_alive_until - 2, "a", 10, "RUNNING"),
    ]
    rows += [_own(a_alive_until - 0.5, 0, "FAILED", CLOSED)]
    rows += [agent(a_alive_until, "a", 10, "FAILED", r, 1) for r in (0, 1)]
    return [*rows, verdict(a_alive_until, "a", 10, "SUCCEEDED")]


def test_the_root_cause_of_a_partition_is_the_nodes_cut_off_from_the_store():
    """b's ranks, whose agent lost the store a still served, are the cause; not rank 1's error."""
    (only,) = attempts(_partitioned())
    cause = only.root_cause
    assert (cause.ranks, cause.source, cause.node) == ((2, 3), "cut_off", "b (pid 20)")
    assert cause.cut_off_from == (0, 1)


def test_a_partition_is_dated_by_what_the_other_side_saw_first():
    """The cut is dated at the first failure a rank across it recorded, and names that rank."""
    (only,) = attempts(_partitioned())
    assert (only.root_cause.time, only.root_cause.seen_by) == (A_SAW, "rank 1")


def test_the_other_sides_ranks_are_collateral_of_a_partition():
    """a's ranks, which only lost their peers across the cut, went down with it."""
    (only,) = attempts(_partitioned())
    assert only.collateral_ranks == (0, 1)


def test_the_report_json_says_which_ranks_were_cut_off_from_which():
    """``report --json``'s root cause carries the cut-off ranks, the other side's, and the kind."""
    (only,) = attempts(_partitioned())
    cause = attempt_dict(only)["root_cause"]
    assert (cause["ranks"], cause["cut_off_from"], cause["source"]) == ([2, 3], [0, 1], "cut_off")
    assert cause["reason"] == "node b cut off from the rendezvous store: ranks 2, 3 from ranks 0, 1"


def test_the_report_text_names_the_cut_off_node_and_who_saw_it():
    """The report's root cause names the node cut off and the rank that saw the cut first."""
    text = str(report_of("logs", _partitioned()))
    assert "root cause      ranks 2, 3 on b (pid 20)" in text
    assert "first seen by rank 1" in text


def test_a_store_lost_after_its_host_ended_is_no_partition():
    """An agent that loses the store once the store's host has recorded its end lost nothing to
    a cut: the store is gone, and the root cause stays the first failure recorded."""
    (only,) = attempts(_partitioned(a_alive_until=B_LOST - 0.1))
    assert only.root_cause.source == "worker"
