"""tb_monitor.analysis.health: the job's health as one JobReport, on synthetic logdirs."""

from __future__ import annotations

import io
import json

import pytest

from tb_monitor.analysis.attempts import attempt_dict, attempts
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.health import SCHEMA_VERSION, JobReport, job_report, report_of
from tb_monitor.analysis.report_text import duration
from tb_monitor.analysis.sources import timeline_rows
from tb_monitor.cli import report as report_command
from tb_monitor.sinks import AsyncWriter
from tb_monitor.testing import (
    DEFAULT_START,
    generate_job,
    generate_rank_windows,
    rank_heartbeat_scalars,
)


@pytest.fixture
def restarted(tmp_path):
    """A synthetic 2x2 job: attempt 0 fails on rank 2, attempt 1 succeeds; no rank health."""
    return generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=1)


@pytest.fixture
def straggler(tmp_path):
    """A synthetic 2x2 job whose 4 ranks record 18 windows of health; rank 1 computes 1.5x."""
    job = generate_job(tmp_path / "ranks", nodes=2, workers_per_node=2, restarts=0)
    generate_rank_windows(job.logdir, 4, 0.05, slow_ranks=[1], start=job.start)
    return job


def _hang(logdir: str, when: float, hung: int) -> None:
    """One heartbeat per rank at ``when``: three inside collective 61 for 45 s, ``hung`` behind."""
    for rank in range(4):
        behind = rank == hung
        beat = rank_heartbeat_scalars(60, 60 if behind else 61, 60, 0.0 if behind else 45.0, 46.0)
        with AsyncWriter(f"{logdir}/job/rank-{rank}") as writer:
            writer.add_scalars(beat, wall_time=when)


def test_a_restarted_job_has_its_attempts_root_cause_and_time_lost(restarted):
    """One job, two attempts: the first FAILED on rank 2 with the others collateral, the time
    lost running to the second attempt's start; the job succeeded and is over."""
    found = job_report(restarted.logdir)
    (job,) = found.jobs
    first, second = job.attempts
    assert (first.outcome, first.root_cause.rank, first.collateral_ranks) == (
        "FAILED",
        2,
        (0, 1, 3),
    )
    assert first.time_lost_s == pytest.approx(second.start - first.root_cause.time)
    assert (job.status, job.restarts, job.finished) == ("SUCCEEDED", 1, True)
    assert job.time_lost_s == pytest.approx(first.time_lost_s)
    assert (found.status, found.exit_code, found.ranks) == ("succeeded", 0, None)


def test_the_attempts_are_the_attempts_analysis(restarted):
    """The report holds exactly what ``attempts`` finds in the logdir's records."""
    (job,) = job_report(restarted.logdir).jobs
    assert list(job.attempts) == attempts(timeline_rows(restarted.logdir))


def test_a_failed_last_attempt_fails_the_report(tmp_path):
    """Every attempt failed: status failed, exit code 1."""
    job = generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, fail_last=True)
    found = job_report(job.logdir)
    assert (found.status, found.exit_code) == ("failed", 1)


def test_to_json_is_the_documented_plain_document(restarted):
    """to_json() is plain JSON with the schema version and each attempt's attempt_dict."""
    found = job_report(restarted.logdir)
    doc = json.loads(json.dumps(found.to_json()))
    assert (doc["schema"], doc["logdir"], doc["status"]) == (
        SCHEMA_VERSION,
        restarted.logdir,
        "succeeded",
    )
    assert doc["jobs"][0]["attempts"] == [attempt_dict(a) for a in found.jobs[0].attempts]


def test_report_json_prints_the_job_report(straggler):
    """``tb-monitor report --json`` prints JobReport.to_json() of the same logdir, nothing else."""
    out = io.StringIO()
    code = report_command.main([straggler.logdir, "--json"], out=out)
    assert json.loads(out.getvalue()) == job_report(straggler.logdir).to_json()
    assert code == job_report(straggler.logdir).exit_code == 0


def test_stragglers_and_stalls_are_the_rank_grids(straggler):
    """The ranks part is RankGrid's: the same scores, slowest first, and rank 1 flagged."""
    ranks = job_report(straggler.logdir).ranks
    grid = RankGrid.from_logdir(straggler.logdir)
    assert list(ranks.scores) == grid.scores()
    assert [s.rank for s in ranks.stragglers] == [1]
    assert (ranks.count, ranks.windows, ranks.window_s) == (4, 18, grid.window_s)
    assert list(ranks.stalls) == grid.stalls() == []


def test_step_times_separate_the_slow_rank_by_compute(straggler):
    """Every rank steps at the same pace; rank 1's median compute is ~1.5x the others'."""
    times = {s.rank: s for s in job_report(straggler.logdir).ranks.step_times}
    assert sorted(times) == [0, 1, 2, 3] and {s.windows for s in times.values()} == {18}
    assert times[1].step_s == pytest.approx(times[0].step_s, rel=0.1)
    assert times[1].compute_s / times[0].compute_s == pytest.approx(1.5, rel=0.1)
    for s in times.values():
        assert s.compute_s == pytest.approx(s.step_s - s.collective_s)


def test_a_stall_while_the_job_runs_fails_the_report(tmp_path):
    """Rank health only (no job records): rank 3 behind the others' collective is waited for,
    the report is stalled and exits 1."""
    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.05)
    _hang(logdir, DEFAULT_START + 240, hung=3)
    found = job_report(logdir)
    assert found.ranks.waited_for == (3,)
    assert (found.status, found.stalled, found.exit_code) == ("empty", True, 1)


@pytest.fixture
def ended(tmp_path):
    """A synthetic 2x2 job that ran ~89 s, its 4 ranks recording 72 s of health in it."""
    job = generate_job(tmp_path / "ended", nodes=2, workers_per_node=2, restarts=0)
    generate_rank_windows(job.logdir, 4, 0.02, start=job.start)
    return job


def test_a_stall_before_a_job_ended_is_not_listed_once_it_ended(ended):
    """A rank stalled until just before its job ended is no stall once every agent recorded its
    verdict: none is listed, and the report does not fail."""
    _hang(ended.logdir, ended.end - 1, hung=3)
    found = job_report(ended.logdir)
    assert (found.ranks.stalls, found.ranks.waited_for) == ((), ())
    assert (found.stalled, found.exit_code) == (False, 0)


def test_a_finished_job_lists_no_rank_stalled_after_its_end(ended):
    """Heartbeats without steps after the job's end (ranks shutting down): no rank is stalled."""
    _hang(ended.logdir, ended.end + 240, hung=3)
    found = job_report(ended.logdir)
    assert found.jobs[0].finished and found.ranks.stalls == ()
    assert (found.stalled, found.exit_code) == (False, 0)


def test_an_empty_logdir_is_an_empty_report(tmp_path):
    """A logdir with nothing recorded yet: no jobs, no ranks, status empty, exit 0."""
    (tmp_path / "empty").mkdir()
    found = job_report(tmp_path / "empty")
    assert found == JobReport(logdir=str(tmp_path / "empty"), jobs=(), ranks=None)
    assert (found.status, found.exit_code) == ("empty", 0)


@pytest.mark.parametrize("value", [42, None, ["runs"]])
def test_job_report_rejects_anything_but_a_logdir_naming_it(value):
    """A TypeError at the door that names the value."""
    with pytest.raises(TypeError, match=r"job_report\(\) takes a logdir"):
        job_report(value)


def test_windows_of_5_s_are_read_as_recorded(tmp_path):
    """Ranks recording 5-s windows (TB_MONITOR_RANK_WINDOW_S=5): the report counts every window
    of the 3 minutes, 5 s long, and still flags the slow rank."""
    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.05, slow_ranks=[2], window_s=5.0)
    ranks = job_report(logdir).ranks
    assert (ranks.window_s, ranks.windows) == (5.0, 36)
    assert [s.rank for s in ranks.stragglers] == [2]


def test_report_of_what_a_reader_holds_equals_the_logdirs(straggler):
    """report_of(rows, grid), as the plugin would call it, is job_report(logdir)."""
    rows = timeline_rows(straggler.logdir)
    grid = RankGrid.from_logdir(straggler.logdir)
    assert report_of(straggler.logdir, rows, grid) == job_report(straggler.logdir)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5.04, "5.0 s"),
        (59.96, "1 min 0 s"),
        (119.9, "2 min 0 s"),
        (125.0, "2 min 5 s"),
        (3599.6, "1 h 0 min"),
        (7199.0, "2 h 0 min"),
        (5430.0, "1 h 30 min"),
    ],
)
def test_a_duration_is_rounded_before_it_is_split_into_units(seconds, text):
    """An attempt of 119.9 s reads "2 min 0 s", never "1 min 60 s"."""
    assert duration(seconds) == text
