"""Why each attempt of an elastic job ended: ``tb_monitor.analysis.attempts`` (plain Python),
``restart_marks`` (drawn) and ``restarts`` (the tables), on synthetic and hand-made jobs."""

from __future__ import annotations

import pytest
from conftest import need
from elastic_records import agent as _agent
from elastic_records import joined as _joined
from elastic_records import own as _own

from tb_monitor import contract, read_events
from tb_monitor.analysis import restarts
from tb_monitor.analysis.attempts import attempts
from tb_monitor.analysis.restart_marks import STOPPED_AT_END, STOPPED_BY_RESTART, mark_restarts
from tb_monitor.analysis.restarts import RESTARTS_COLUMNS, SUMMARY_COLUMNS, restart_summary
from tb_monitor.logdir import readers
from tb_monitor.testing import generate_job
from tb_monitor.timeline import STATES, spans, state_color


@pytest.fixture
def job(logdir):
    """A synthetic two-node job (2 workers each) with one failed attempt and a restart."""
    return generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)


@pytest.fixture
def rows(logdir, job):
    """The job's decoded timeline records."""
    return list(readers.decode_timeline(readers.iter_timeline(logdir)))


def test_restart_summary_has_one_row_per_attempt_with_outcome_and_failed_ranks(logdir, rows):
    """Attempt 0 failed on the rank whose worker FAILED; attempt 1 succeeded."""
    need("pandas")
    failed = {r["rank"] for r in rows if r["kind"] == contract.WORKER and r["state"] == "FAILED"}
    summary = restart_summary(logdir)
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    assert summary[["job", "attempt", "outcome"]].values.tolist() == [
        ["job", 0, "FAILED"],
        ["job", 1, "SUCCEEDED"],
    ]
    assert summary["failed_ranks"].tolist() == [sorted(failed), []]


def test_restart_summary_names_the_first_rank_to_fail(logdir, rows):
    """first_failed_rank is the rank of the earliest FAILED record, NA for a clean attempt."""
    need("pandas")
    failures = [r for r in rows if r["kind"] == contract.WORKER and r["state"] == "FAILED"]
    first = min(failures, key=lambda r: r["wall_time"])["rank"]
    summary = restart_summary(logdir)
    assert summary["first_failed_rank"].iloc[0] == first
    assert summary["first_failed_rank"].isna().iloc[1]


def test_restart_summary_times_the_rendezvous_before_each_attempt(logdir, rows):
    """rendezvous_s runs from the first node trying to join a round to the last one joining it."""
    need("pandas")
    tries: dict[str, list[float]] = {}
    for r in rows:
        if r["kind"] == contract.RENDEZVOUS and "attempts to join" in r["message"]:
            tries.setdefault(r["hostname"], []).append(r["wall_time"])
    summary = restart_summary(logdir)
    for attempt, rendezvous_s in zip(summary["attempt"], summary["rendezvous_s"], strict=True):
        joined = [
            r["wall_time"]
            for r in rows
            if r["kind"] == contract.RENDEZVOUS and f"has joined round {attempt} " in r["message"]
        ]
        first = min(sorted(times)[attempt] for times in tries.values())
        assert rendezvous_s == pytest.approx(max(joined) - first)
    assert (summary["rendezvous_s"] > 15).all()  # the synthetic straggler joins ~18 s late


def test_restart_summary_of_a_logdir_without_workers_is_empty(logdir):
    """A logdir with no worker records gives an empty frame with the documented columns."""
    need("pandas")
    summary = restart_summary(logdir)
    assert summary.empty and list(summary.columns) == list(SUMMARY_COLUMNS)


# -- restarts(): why each attempt ended ---------------------------------------------------------


def _failing_rows(rows):
    return [r for r in rows if r["kind"] == contract.WORKER and r["state"] == "FAILED"]


def test_restarts_has_the_documented_columns_one_row_per_attempt(logdir, job):
    """restarts() gives RESTARTS_COLUMNS, one row per attempt, in order."""
    need("pandas")
    frame = restarts(logdir)
    assert list(frame.columns) == list(RESTARTS_COLUMNS)
    assert frame[["attempt", "outcome"]].values.tolist() == [[0, "FAILED"], [1, "SUCCEEDED"]]


def test_restarts_root_cause_is_the_failed_rank_with_its_exception(logdir, rows):
    """The root cause is the FAILED rank, with the error file's exception, message and trace."""
    need("pandas")
    (failure,) = _failing_rows(rows)
    first = restarts(logdir).iloc[0]
    assert first["root_cause_rank"] == failure["rank"]
    assert first["exception"] == "OutOfMemoryError"
    assert first["message"] == f"CUDA out of memory (rank {failure['rank']})"
    assert first["reason"] == f"OutOfMemoryError: {first['message']}"
    assert first["traceback"].startswith("Traceback (most recent call last)")
    assert first["exit_code"] == 1 and need("pandas").isna(first["signal"])
    assert first["failed_at"].timestamp() == pytest.approx(failure["wall_time"])


def test_restarts_collateral_are_the_other_ranks(logdir, rows):
    """Every other rank of the failed attempt (terminated by its agent) is collateral."""
    need("pandas")
    (failure,) = _failing_rows(rows)
    first = restarts(logdir).iloc[0]
    assert first["collateral_ranks"] == [r for r in range(4) if r != failure["rank"]]


def test_restarts_time_lost_runs_to_the_next_attempt(logdir, rows):
    """time_lost_s runs from the failure to the next attempt's first worker START."""
    need("pandas")
    (failure,) = _failing_rows(rows)
    frame = restarts(logdir)
    expected = frame["start"].iloc[1].timestamp() - failure["wall_time"]
    assert frame["time_lost_s"].iloc[0] == pytest.approx(expected)


def test_restarts_clean_attempt_has_no_root_cause(logdir, job):
    """A successful attempt has no root cause, no collateral, no time lost."""
    pandas = need("pandas")
    last = restarts(logdir).iloc[-1]
    assert pandas.isna(last["root_cause_rank"]) and pandas.isna(last["reason"])
    assert last["collateral_ranks"] == [] and last["time_lost_s"] != last["time_lost_s"]


def test_restarts_failed_last_attempt_loses_no_time_to_a_restart(tmp_path):
    """When every attempt fails, each has a root cause; the last one, which no restart followed,
    loses no time to restarts (NaN)."""
    need("pandas")
    generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=1, fail_last=True)
    frame = restarts(tmp_path / "logs")
    assert frame["outcome"].tolist() == ["FAILED", "FAILED"]
    assert frame["root_cause_rank"].notna().all()
    assert frame["time_lost_s"].iloc[0] > 0 and frame["time_lost_s"].isna().iloc[-1]


def test_restarts_of_a_read_events_frame_equals_the_logdir(logdir, job):
    """The DataFrame read_events returns gives the same rows as the logdir."""
    need("pandas")
    assert restarts(read_events(logdir)).equals(restarts(logdir))


@pytest.mark.parametrize("value", [42, None, ["runs"], b"runs"])
def test_restarts_rejects_other_sources_naming_them(value):
    """Anything but a logdir or a DataFrame is a TypeError at the door, naming the value."""
    with pytest.raises(TypeError, match=r"restarts\(\) takes a logdir .* not "):
        restarts(value)


def test_restarts_of_a_frame_without_the_columns_says_which(logdir):
    """A DataFrame lacking read_events' columns is a ValueError naming them."""
    pandas = need("pandas")
    with pytest.raises(ValueError, match="wall_time"):
        restarts(pandas.DataFrame({"run": ["x"], "kind": ["worker"]}))


def test_restart_summary_takes_a_read_events_frame(logdir, job):
    """restart_summary() of read_events' DataFrame equals restart_summary() of the logdir."""
    need("pandas")
    assert restart_summary(read_events(logdir)).equals(restart_summary(logdir))


# -- hand-made records: SIGKILL, lost peers, membership -----------------------------------------


GLOO = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1234"


def _sigkill_job():
    """Rank 1 SIGKILLed at ~5 s; ranks 2 and 3 record gloo errors before its agent notices;
    node b leaves and node c joins the next round."""
    rows = [_joined(0.5, "a", 10, 0), _joined(0.6, "b", 20, 0)]
    rows += [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [_own(5.0, 2, "FAILED", GLOO, GLOO), _own(5.01, 3, "FAILED", GLOO, GLOO)]
    rows += [_agent(5.2, "a", 10, "FAILED", 1, -9, '{"message": "<NONE>"}')]
    rows += [_agent(5.2, "a", 10, "TERMINATED", 0)]
    rows += [_agent(5.3, "b", 20, "FAILED", r, -15, '{"message": "<NONE>"}') for r in (2, 3)]
    rows += [_joined(8.0, "a", 10, 1), _joined(8.1, "c", 30, 1)]
    rows += [_agent(9.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(9.0, "c", 30, "START", r) for r in (2, 3)]
    rows += [_agent(15.0, "a", 10, "SUCCEEDED", r) for r in (0, 1)]
    rows += [_agent(15.0, "c", 30, "SUCCEEDED", r) for r in (2, 3)]
    return rows


def test_sigkilled_rank_is_the_root_cause_not_its_peers_connection_errors():
    """A rank killed by SIGKILL (only its agent's record, exit code -9) is the root cause, though
    its peers' connection errors were recorded first."""
    first, second = attempts(_sigkill_job())
    cause = first.root_cause
    assert (cause.rank, cause.signal, cause.exit_code, cause.reason) == (
        1,
        "SIGKILL",
        -9,
        "killed by SIGKILL",
    )
    assert cause.source == "agent" and cause.time == 5.2
    assert first.collateral_ranks == (0, 2, 3)
    assert first.time_lost_s == pytest.approx(9.0 - 5.2)
    assert second.root_cause is None and second.outcome == "SUCCEEDED"


def test_the_agents_sigkill_of_a_sibling_is_collateral_not_the_root_cause():
    """A rank exits with code 1 and its agent SIGKILLs the sibling stuck in a collective (both
    recorded by the agent at once): the rank that failed is the root cause, the killed one is
    collateral."""
    rows = [_joined(0.5, "a", 10, 0)] + [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(3.1, "a", 10, "FAILED", 0, -9), _agent(3.1, "a", 10, "FAILED", 1, 1)]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.reason) == (1, "exited with code 1")
    assert only.collateral_ranks == (0,)


def test_an_exception_that_reads_like_a_timeout_beats_the_agents_later_sigkill():
    """A rank raising an exception that mentions a timeout is still the root cause when its agent
    SIGKILLs its sibling after the stop grace: that SIGKILL is the agent's own shutdown."""
    rows = [_joined(0.5, "a", 10, 0)] + [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    error = "RuntimeError: timed out reading batch"
    rows += [_own(3.0, 1, "FAILED", error, f"Traceback...\n{error}")]
    rows += [_agent(3.1, "a", 10, "FAILED", 1, 1), _agent(33.1, "a", 10, "FAILED", 0, -9)]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.source) == (1, "worker")
    assert only.collateral_ranks == (0,)


def test_a_sigkill_its_sibling_lost_as_a_peer_just_before_is_the_root_cause():
    """Rank 1 SIGKILLed from outside; its sibling records "Connection closed by peer" 50 ms
    before the agent's next look records the SIGKILL (the fault campaign, seed 73, Lightning):
    that lost peer is the echo of the kill, no stop the SIGKILL escalated."""
    rows = [_joined(0.5, "a", 10, 0)] + [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_own(5.05, 0, "FAILED", GLOO, GLOO)]
    rows += [_agent(5.1, "a", 10, "FAILED", 1, -9), _agent(5.2, "a", 10, "FAILED", 0, 1)]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.signal) == (1, "SIGKILL")
    assert only.collateral_ranks == (0,)


def test_sigkills_no_other_failure_preceded_are_real():
    """Two ranks SIGKILLed at once with nothing failing before (the OOM killer) are real: the
    first rank is the root cause, killed by SIGKILL."""
    rows = [_joined(0.5, "a", 10, 0)] + [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(3.1, "a", 10, "FAILED", r, -9) for r in (1, 0)]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.signal) == (0, "SIGKILL")


def test_a_sigkill_after_only_a_sigterm_on_its_agent_is_real():
    """The agent recording a SIGTERMed rank (its own stop) and a SIGKILLed one at once, as a
    real torchrun does when a rank is killed from outside: the SIGKILL is the root cause."""
    rows = [_joined(0.5, "a", 10, 0), _joined(0.6, "b", 20, 0)]
    rows += [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [_own(5.0, 2, "FAILED", GLOO, GLOO), _own(5.01, 3, "FAILED", GLOO, GLOO)]
    rows += [_agent(5.1, "a", 10, "FAILED", 0, -15), _agent(5.1, "a", 10, "FAILED", 1, -9)]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.signal) == (1, "SIGKILL")
    assert only.collateral_ranks == (0, 2, 3)


def _node_lost_job():
    """Node b (ranks 2, 3) killed with its agent at ~4 s: nothing of it records an end; ranks 0
    and 1 fail with gloo's connection errors and their agent records the job FAILED."""
    rows = [_joined(0.5, "a", 10, 0), _joined(0.6, "b", 20, 0)]
    rows += [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_agent(1.0, "b", 20, "START", r) for r in (2, 3)]
    rows += [_own(1.5, r, "RUNNING") for r in range(4)]
    rows += [_own(5.0, 1, "FAILED", GLOO, GLOO), _own(5.01, 0, "FAILED", GLOO, GLOO)]
    rows += [_agent(5.2, "a", 10, "FAILED", r, 1) for r in (0, 1)]
    return rows


def test_a_vanished_node_is_the_root_cause_not_the_peers_that_lost_it():
    """When a node vanishes (its ranks record no end, its agent goes silent), the node is the
    root cause, not a peer whose connection to it broke."""
    (only,) = attempts(_node_lost_job())
    cause = only.root_cause
    assert (cause.rank, cause.source, cause.ranks) == (2, "vanished", (2, 3))
    assert only.collateral_ranks == (0, 1)


def test_the_last_attempts_collateral_ranks_stopped_when_the_job_ended():
    """In a job's last attempt no restart followed: no time is lost to one, and the collateral
    ranks are drawn STOPPED_AT_END, labelled "stopped when the job ended"."""
    rows = _node_lost_job()
    marks = spans(rows)
    (only,) = found = attempts(rows, marks)
    assert (only.restarted, only.time_lost_s, only.collateral_state) == (
        False,
        None,
        STOPPED_AT_END,
    )
    drawn = {s.lane.label: s for s in mark_restarts(marks, found) if s.end is not None}
    assert drawn["rank 0"].state == STOPPED_AT_END
    assert drawn["rank 0"].label == "attempt 0: stopped when the job ended"


def test_stopped_at_end_is_a_state_with_its_own_colour():
    """STOPPED_AT_END is in the state vocabulary next to STOPPED_BY_RESTART, with its own colour."""
    names = [s.name for s in STATES]
    assert names.index(STOPPED_AT_END) == names.index(STOPPED_BY_RESTART) + 1
    assert [s.color for s in STATES].count(state_color(STOPPED_AT_END)) == 1


def test_membership_change_between_rounds():
    """The second attempt's round lost node b and gained node c."""
    first, second = attempts(_sigkill_job())
    assert first.nodes == ("a (pid 10)", "b (pid 20)") and first.nodes_joined == ()
    assert second.nodes_left == ("b (pid 20)",) and second.nodes_joined == ("c (pid 30)",)


def test_earliest_real_exception_wins_over_later_ones():
    """Of two ranks raising ordinary exceptions, the earlier one is the root cause."""
    rows = [_agent(1.0, "a", 10, "START", r) for r in (0, 1)]
    rows += [_own(3.0, 1, "FAILED", "KeyError: 'shard'", "Traceback...\nKeyError: 'shard'")]
    rows += [_own(3.5, 0, "FAILED", "ValueError: late", "Traceback...\nValueError: late")]
    (only,) = attempts(rows)
    assert (only.root_cause.rank, only.root_cause.exception) == (1, "KeyError")
    assert only.root_cause.message == "'shard'" and only.collateral_ranks == (0,)


def test_sys_exit_code_reads_as_the_reason():
    """A worker's own sys.exit(3) record gives exception SystemExit and exit code 3."""
    rows = [_agent(1.0, "a", 10, "START", 0)]
    failed = _own(2.0, 0, "FAILED", "SystemExit: 3", "Traceback...\nSystemExit: 3")
    failed["metadata"]["exit_code"] = 3
    (only,) = attempts([*rows, failed])
    assert (only.root_cause.exception, only.root_cause.exit_code) == ("SystemExit", 3)


def test_mark_restarts_draws_collateral_as_stopped_by_restart():
    """Collateral ranks' attempts take STOPPED_BY_RESTART; the root cause's is labelled with it."""
    rows = _sigkill_job()
    marks = spans(rows)
    found = attempts(rows, marks)
    drawn = mark_restarts(marks, found)
    firsts = {
        s.lane.label: s
        for s in sorted(drawn, key=lambda s: -s.begin)
        if s.lane.kind == contract.WORKER and s.end is not None and s.number == 0
    }
    assert {firsts[f"rank {r}"].state for r in (0, 2, 3)} == {STOPPED_BY_RESTART}
    assert firsts["rank 1"].state == "FAILED"
    assert firsts["rank 1"].label == "attempt 0: killed by SIGKILL"


def test_stopped_by_restart_is_a_state_with_its_own_colour():
    """STOPPED_BY_RESTART is in the one state vocabulary, with a colour no other state has."""
    names = [s.name for s in STATES]
    assert STOPPED_BY_RESTART in names
    colors = [s.color for s in STATES]
    assert colors.count(state_color(STOPPED_BY_RESTART)) == 1
    assert names.index(STOPPED_BY_RESTART) < names.index("FAILED")  # less alarming


def test_no_membership_change_without_rendezvous_records():
    """Without rendezvous records the nodes come from the workers' hosts, and an unchanged set
    reads as no change."""
    rows = [_agent(1.0, "a", 10, "START", 0), _agent(2.0, "a", 10, "FAILED", 0, 1)]
    restart = _agent(3.0, "a", 10, "START", 0)
    restart["metadata"]["agent_restarts"] = 1
    first, second = attempts([*rows, restart])
    assert first.nodes == second.nodes == ("a",)
    assert second.nodes_joined == second.nodes_left == ()


def test_the_names_the_plugin_imports_stay_importable_from_restarts():
    """The split keeps ``tb_monitor.analysis.restarts``' names (tb_plugin.store imports them)."""
    import importlib

    old = importlib.import_module("tb_monitor.analysis.restarts")
    found = importlib.import_module("tb_monitor.analysis.attempts")
    drawn = importlib.import_module("tb_monitor.analysis.restart_marks")
    assert (old.attempts, old.attempt_dict, old.Attempt) == (
        found.attempts,
        found.attempt_dict,
        found.Attempt,
    )
    assert (old.mark_restarts, old.STOPPED_BY_RESTART) == (
        drawn.mark_restarts,
        drawn.STOPPED_BY_RESTART,
    )
