"""Several jobs in one logdir (``tb_monitor.analysis.jobs``): told apart by run id and start in
the attempts, the report (one section per job, ``--job``) and the ranks' scores and stalls."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest

from tb_monitor import contract
from tb_monitor.analysis.attempts import attempts
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.health import job_report, report_of
from tb_monitor.analysis.jobs import job_spans, separate_jobs
from tb_monitor.cli import report as report_command
from tb_monitor.sinks import AsyncWriter
from tb_monitor.testing import DEFAULT_START, generate_job, generate_rank_windows
from tb_monitor.testing import rank_heartbeat_scalars as beat_of

FIRST, SECOND = DEFAULT_START, DEFAULT_START + 1000.0  # two jobs' starts


def _rec(t, run, kind, name, state=None, **fields):
    row = dict.fromkeys(contract.FIELDS)
    row.update(run=run, kind=kind, wall_time=t, name=name, state=state, run_id=run.split("/")[0])
    row["metadata"] = fields.pop("metadata", {})
    row.update(fields)
    return row


def _node(t, run, message):
    return _rec(t, run, contract.RENDEZVOUS, "h.next", "RUNNING", message=message, hostname="a")


def _status(t, run, kind, state, **fields):
    return _rec(t, run, kind, f"torchelastic.worker.status.{state}", state, **fields)


def _job(start, run_id="none", end=None, failed_rank=None):
    """One job of 4 ranks on one agent (the same agent run each time: a reused pid): it joins
    round 0 and starts its workers; with ``end``, each worker and the agent SUCCEEDED (or
    ``failed_rank`` FAILED and the agent FAILED) then, and the agent closes the rendezvous."""
    agent = f"{run_id}/agent-a-10"
    rows = [
        _node(start, agent, f"The node 'a_10_0' attempts to join the next round of '{run_id}'"),
        _node(start + 0.5, agent, f"The node 'a_10_0' has joined round 0 of '{run_id}' as rank 0"),
    ]
    for rank in range(4):
        worker = dict(rank=rank, hostname="a", source="WORKER", metadata={"agent_restarts": 0})
        rows.append(_status(start + 1, agent, contract.WORKER, "START", **worker))
        if end is not None:
            state = "FAILED" if rank == failed_rank else "SUCCEEDED"
            code = {"exit_code": 1} if rank == failed_rank else {}
            worker["metadata"] = {**worker["metadata"], **code}
            rows.append(_status(end, agent, contract.WORKER, state, **worker))
    if end is not None:
        verdict = "FAILED" if failed_rank is not None else "SUCCEEDED"
        rows.append(_status(end + 0.5, agent, contract.AGENT, verdict, source="AGENT"))
        rows.append(_node(end + 0.6, agent, f"The node 'a_10_0' has closed '{run_id}'."))
    return rows


def _clock(t):
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")


def test_two_jobs_sharing_a_run_id_are_two_jobs():
    """Two jobs with torchrun's default run id "none", one after the other in the same run
    directories, are two jobs named by their start, each with its own attempt and outcome."""
    rows = separate_jobs([*_job(FIRST, end=FIRST + 100, failed_rank=2), *_job(SECOND)])
    found = attempts(rows)
    assert [(a.job, a.attempt, a.outcome) for a in found] == [
        (f"none@{_clock(FIRST)}", 0, "FAILED"),
        (f"none@{_clock(SECOND)}", 0, "RUNNING"),
    ]
    assert found[0].root_cause.rank == 2 and found[1].root_cause is None


def test_an_agents_records_after_its_verdict_stay_in_its_job():
    """An agent closing the rendezvous after its verdict is still the same job: one job, its
    records unchanged."""
    rows = _job(FIRST, end=FIRST + 100)
    assert separate_jobs(rows) == rows and [s.job for s in job_spans(rows)] == ["none"]


def test_jobs_with_their_own_run_ids_are_left_as_they_are():
    """Records of jobs with different run ids come back unchanged: they are apart already."""
    rows = [*_job(FIRST, "a", end=FIRST + 100), *_job(SECOND, "b")]
    assert separate_jobs(rows) == rows
    assert [(s.job, s.shared) for s in job_spans(rows)] == [("a", False), ("b", False)]


def _hang(logdir, when, hung, run_id="none"):
    """One heartbeat per rank at ``when``: three inside a collective for 45 s, ``hung`` behind."""
    for rank in range(4):
        behind = rank == hung
        beat = beat_of(60, 60 if behind else 61, 60, 0.0 if behind else 45.0, 46.0)
        with AsyncWriter(f"{logdir}/{run_id}/rank-{rank}") as writer:
            writer.add_scalars(beat, wall_time=when)


@pytest.fixture
def shared(tmp_path):
    """Job 1 (run id "none") ran and succeeded; job 2, same run id and run directories, runs
    now with rank 3 stalled. Both recorded rank health; rows and grid as the plugin holds them."""
    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.02, run_id="none", start=FIRST)
    generate_rank_windows(logdir, 4, 0.02, run_id="none", start=SECOND)
    _hang(logdir, SECOND + 150, hung=3)
    rows = [*_job(FIRST, end=FIRST + 100), *_job(SECOND)]
    return report_of(logdir, rows, RankGrid.from_logdir(logdir))


def test_a_stall_in_the_second_job_of_a_run_id_is_not_hidden(shared):
    """The running job's stalled rank is named for it and fails the report; the job that ended
    before shows no stall."""
    first, second = shared.jobs
    assert (first.status, first.finished, first.ranks.stalls) == ("SUCCEEDED", True, ())
    assert (second.status, second.stalled, second.ranks.waited_for) == ("RUNNING", True, (3,))
    assert (shared.stalled, shared.exit_code, shared.ranks) == (True, 1, None)
    assert f"STALLED: job none@{_clock(SECOND)} waits for rank 3" in str(shared)


def test_each_jobs_ranks_are_its_own_windows(shared):
    """Each job's ranks hold only the windows of its own time: the logdir's windows, half each
    (both jobs ran the same 72 s)."""
    whole = RankGrid.from_logdir(shared.logdir)
    recorded = int((whole.steps > 0).any(axis=0).sum())
    assert [job.ranks.windows for job in shared.jobs] == [recorded // 2] * 2


def test_the_json_holds_each_jobs_ranks(shared):
    """--json: each job has its ranks section; the top-level one is null with several jobs."""
    doc = shared.to_json()
    assert doc["ranks"] is None
    assert [job["ranks"]["stalled"] for job in doc["jobs"]] == [False, True]
    assert doc["jobs"][1]["ranks"]["waited_for"] == [3]


@pytest.fixture
def side_by_side(tmp_path):
    """Jobs "a" and "b" at the same time in one logdir: b's steps take twice a's (another model),
    and b's rank 1 computes 1.5x its peers."""
    logdir = str(tmp_path / "logs")
    generate_job(logdir, nodes=2, workers_per_node=2, restarts=0, run_id="a")
    generate_job(logdir, nodes=2, workers_per_node=2, restarts=0, run_id="b")
    generate_rank_windows(logdir, 4, 0.05, run_id="a", step_s=0.05)
    generate_rank_windows(logdir, 4, 0.05, run_id="b", step_s=0.1, slow_ranks=[1])
    return logdir


def test_a_straggler_is_scored_among_its_own_jobs_ranks(side_by_side):
    """Each job's ranks are scored among themselves: b's rank 1 is its straggler, and none of a's
    or b's other ranks is flagged for the other job's pace."""
    found = job_report(side_by_side)
    flagged = {job.job: [s.rank for s in job.ranks.stragglers] for job in found.jobs}
    assert flagged == {"a": [], "b": [1]}


def test_report_job_picks_one_job(side_by_side):
    """--job b shows job b only, with its ranks; the text has one job section."""
    out = io.StringIO()
    code = report_command.main([side_by_side, "--job", "b", "--json"], out=out)
    doc = json.loads(out.getvalue())
    assert code == 0 and [job["job"] for job in doc["jobs"]] == ["b"]
    assert [s["rank"] for s in doc["ranks"]["stragglers"]] == [1]
    out = io.StringIO()
    report_command.main([side_by_side, "--job", "b"], out=out)
    assert out.getvalue().count("\njob ") == 1 and "job b:" in out.getvalue()


def test_report_job_not_there_names_the_jobs(side_by_side, capsys):
    """--job naming no job of the logdir: exit 2, and the error names the jobs there are."""
    assert report_command.main([side_by_side, "--job", "c"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "no job 'c'" in err and "(jobs: a, b)" in err


def test_a_records_run_directory_names_the_same_job_as_its_run_id():
    """A run id that had to be encoded for the file system (``a/b`` in ``a%2Fb``) is one job,
    whether a record carries the run id or only its run's directory."""
    from tb_monitor.analysis.jobs import job_of

    directory = contract.run_name_from_env({"TORCHELASTIC_RUN_ID": "a/b", "RANK": "0"})
    assert job_of({"run": directory}) == job_of({"run": directory, "run_id": "a/b"}) == "a/b"
