"""``tb-monitor report``: the terminal summary of why a job restarted, on synthetic jobs."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from tb_monitor.cli import main as cli_main
from tb_monitor.cli import report
from tb_monitor.testing import DEFAULT_START, generate_job


def _run(*argv: str, **kwargs) -> tuple[int, str]:
    out = io.StringIO()
    code = report.main(list(argv), out=out, **kwargs)
    return code, out.getvalue()


@pytest.fixture
def restarted(tmp_path):
    """A synthetic 2x2 job: attempt 0 fails on one rank, attempt 1 succeeds."""
    return generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=1)


@pytest.fixture
def failed(tmp_path):
    """A synthetic 2x2 job whose every attempt fails."""
    return generate_job(tmp_path / "failed", nodes=2, workers_per_node=2, fail_last=True)


def test_report_names_the_root_cause_and_its_last_line(restarted):
    """The text names the failed rank and its exception's last line, and the collateral ranks."""
    code, text = _run(restarted.logdir)
    assert code == report.EXIT_OK
    assert "root cause      rank 2 on node-001" in text
    assert "OutOfMemoryError: CUDA out of memory (rank 2)" in text
    assert "went down with  ranks 0, 1, 3 (stopped by restart)" in text


def test_a_job_without_restarts_reads_no_time_lost_to_them(tmp_path):
    """A job whose only attempt failed: no time lost to restarts in its line, and the ranks that
    went down with the failure stopped when the job ended, not by a restart."""
    job = generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=0, fail_last=True)
    _, text = _run(job.logdir)
    (line,) = [line for line in text.splitlines() if line.startswith("job job:")]
    assert line.startswith("job job: FAILED · 1 attempt, 0 restarts · finished")
    assert "lost" not in text and "(stopped when the job ended)" in text
    assert "stopped by restart" not in text


def test_report_summarises_the_job(restarted):
    """The job line: last outcome, attempts, restarts, time lost, finished."""
    _, text = _run(restarted.logdir)
    (line,) = [line for line in text.splitlines() if line.startswith("job job:")]
    assert line.startswith("job job: SUCCEEDED · 2 attempts, 1 restart · ")
    assert "lost to restarts · finished" in line
    assert text.rstrip().endswith("healthy: every job succeeded")


def test_report_exits_1_when_the_last_attempt_failed(failed):
    """A job whose last attempt failed: exit code 1, and the text says so."""
    code, text = _run(failed.logdir)
    assert code == report.EXIT_FAILED == 1
    assert text.rstrip().endswith("FAILED: the last attempt failed (exit code 1)")
    assert text.count("root cause      rank") == 2


def test_report_json_follows_the_schema(restarted):
    """--json: one document with the documented keys; the root cause with its traceback."""
    code, text = _run(restarted.logdir, "--json")
    doc = json.loads(text)
    assert code == doc["exit_code"] == 0
    assert set(doc) == {
        "schema",
        "logdir",
        "status",
        "exit_code",
        "ranks",
        "jobs",
        "flight_recorder",
    }
    assert doc["ranks"] is None  # no rank health recorded
    assert doc["flight_recorder"] == []  # no Flight Recorder dump imported
    assert (doc["schema"], doc["status"]) == (report.SCHEMA_VERSION, "succeeded")
    (job,) = doc["jobs"]
    assert set(job) == {
        "job",
        "status",
        "finished",
        "attempts_total",
        "restarts",
        "time_lost_s",
        "terminated",
        "ranks",
        "attempts",
        "waiting_ranks",
        "captures",
    }
    assert job["captures"] == []  # no tb-monitor capture taken
    assert job["terminated"] is None  # no signal to an agent ended it
    assert job["ranks"] is None  # no rank health recorded
    first = job["attempts"][0]
    assert set(first) >= {"attempt", "outcome", "root_cause", "collateral_ranks", "time_lost_s"}
    assert first["root_cause"]["rank"] == 2
    assert first["root_cause"]["traceback"].startswith("Traceback")
    assert job["attempts"][1]["root_cause"] is None


def test_report_json_of_a_failed_job(failed):
    """--json of a failed job: status failed, exit code 1."""
    code, text = _run(failed.logdir, "--json")
    assert code == 1 and json.loads(text)["status"] == "failed"


def test_missing_logdir_is_exit_2(tmp_path, capsys):
    """A logdir that does not exist: one line on stderr naming it, exit 2."""
    code, text = _run(str(tmp_path / "nope"))
    assert code == report.EXIT_USAGE == 2 and text == ""
    assert "nope" in capsys.readouterr().err


def test_bad_option_is_exit_2(capsys):
    """An unknown option is a usage error: exit 2."""
    code, _ = _run("logs", "--no-such-option")
    assert code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_empty_logdir_reports_nothing_and_exits_0(tmp_path):
    """A logdir with no attempts yet: nothing to report, exit 0."""
    (tmp_path / "empty").mkdir()
    code, text = _run(str(tmp_path / "empty"))
    assert code == 0 and "no elastic job attempts recorded yet" in text


def test_follow_stops_when_the_job_has_ended(restarted):
    """--follow on a finished job draws once and returns without waiting."""
    waits: list[float] = []
    code, text = _run(restarted.logdir, "--follow", sleep=waits.append)
    assert code == 0 and waits == [] and text.count("job job:") == 1


def test_follow_waits_for_the_logdir_and_redraws(tmp_path):
    """--follow waits for a logdir that is not there yet, redrawing every --interval, and stops
    once the job written meanwhile has ended; the exit code is the job's."""
    logdir = tmp_path / "later"
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the job appears during the second wait
            generate_job(logdir, nodes=2, workers_per_node=2, fail_last=True)

    code, text = _run(str(logdir), "--follow", "--interval", "0.5", sleep=sleep)
    assert code == 1 and waits == [0.5, 0.5]
    assert text.count("waiting for it to appear") == 2
    assert text.count("--- ") == 2  # a separator before each redraw in a log
    assert "FAILED: the last attempt failed" in text


def test_follow_stops_after_max_refreshes(tmp_path):
    """The refresh limit (for tests and scripts) ends following a job that never ends."""
    waits: list[float] = []
    code, text = _run(str(tmp_path / "never"), "--follow", sleep=waits.append, max_refreshes=3)
    assert code == 0 and len(waits) == 2


def test_follow_json_prints_one_document_per_refresh(tmp_path):
    """--follow --json: one JSON document per line and refresh."""
    code, text = _run(
        str(tmp_path / "never"), "--follow", "--json", sleep=lambda s: None, max_refreshes=2
    )
    docs = [json.loads(line) for line in text.splitlines()]
    assert [d["status"] for d in docs] == ["waiting", "waiting"]


def test_ctrl_c_stops_following(tmp_path):
    """Ctrl-C while following ends it with the exit code of what was shown."""

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    code, _ = _run(str(tmp_path / "never"), "--follow", sleep=interrupt)
    assert code == 0


def test_report_is_a_tb_monitor_command(restarted, capsys):
    """``tb-monitor report`` dispatches to the report command and returns its exit code."""
    assert cli_main(["report", restarted.logdir]) == 0
    assert "root cause" in capsys.readouterr().out


def test_report_runs_as_a_process(failed):
    """The console entry point prints the report and exits 1 for the failed job."""
    proc = subprocess.run(
        [sys.executable, "-m", "tb_monitor.cli", "report", failed.logdir],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "root cause" in proc.stdout


@pytest.mark.slow
def test_report_reads_a_logdir_on_s3(s3_bucket):
    """A logdir in a bucket of a real S3 server reports the same root cause as a local one."""
    logdir = f"{s3_bucket}/jobs/exp7"
    generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)
    code, text = _run(logdir, "--json")
    doc = json.loads(text)
    assert code == 0 and doc["logdir"] == logdir
    assert doc["jobs"][0]["attempts"][0]["root_cause"]["rank"] == 2


@pytest.mark.slow
def test_report_of_a_missing_s3_logdir_is_exit_2(s3_bucket, capsys):
    """A prefix holding nothing in the bucket is an unreadable logdir: exit 2, naming it."""
    code, _ = _run(f"{s3_bucket}/nothing-here")
    assert code == 2 and "nothing-here" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Rank health: stragglers and stalls (tb_monitor.analysis.stragglers)
# ---------------------------------------------------------------------------------------------


def _beats(logdir, when: float, hung: int | None) -> None:
    """One heartbeat per rank of job/rank-0..3 at ``when``: with ``hung``, the others inside
    collective 61 for 45 s and ``hung`` outside it, behind (as rank_health reports a hang)."""
    from tb_monitor.sinks import AsyncWriter
    from tb_monitor.testing import rank_heartbeat_scalars

    for rank in range(4):
        stuck = hung is not None
        behind = rank == hung
        with AsyncWriter(f"{logdir}/job/rank-{rank}") as writer:
            entered = 60 if behind or not stuck else 61
            inside = 45.0 if stuck and not behind else 0.0
            beat = rank_heartbeat_scalars(60, entered, 60, inside, 46.0 if stuck else 0.05)
            writer.add_scalars(beat, wall_time=when)


@pytest.fixture
def straggler(tmp_path):
    """A synthetic 2x2 job whose 4 ranks record health; rank 1 computes 1.5x longer."""
    pytest.importorskip("pandas")
    from tb_monitor.testing import generate_rank_windows

    job = generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=0)
    generate_rank_windows(job.logdir, 4, 0.05, slow_ranks=[1], start=job.start)
    return job


def test_report_lists_the_straggler_with_its_score(straggler):
    """Text: rank 1 is the one straggler, about 1.5x the median rank; exit 0 (slow is not stalled)."""
    code, text = _run(straggler.logdir)
    assert code == 0
    lines = [line for line in text.splitlines() if line.startswith("  straggler ")]
    assert len(lines) == 1 and lines[0].startswith("  straggler       rank 1 x1.")
    assert "ranks: 4 ranks recorded their health, 18 windows" in text
    assert "STALLED" not in text


def test_report_json_lists_stragglers_and_slowest(straggler):
    """--json: ranks.stragglers holds rank 1 with its relative score; nothing stalled."""
    code, text = _run(straggler.logdir, "--json")
    ranks = json.loads(text)["ranks"]
    assert code == 0
    assert [s["rank"] for s in ranks["stragglers"]] == [1]
    assert ranks["stragglers"][0]["relative"] == pytest.approx(1.5, rel=0.1)
    assert set(ranks["stragglers"][0]) == {
        "rank",
        "relative",
        "individual",
        "windows_over",
        "flagged",
        "starved",
        "starved_over",
        "cause",
        "reason",
    }
    assert ranks["slowest"][0]["rank"] == 1 and len(ranks["slowest"]) == 3
    assert (ranks["count"], ranks["windows"], ranks["window_s"]) == (4, 18, 10.0)
    assert ranks["stalls"] == [] and ranks["waited_for"] == [] and ranks["stalled"] is False


def test_a_stalled_rank_is_named_and_exits_1(tmp_path):
    """Rank 3 outside the collective the others wait in: named as waited for, exit code 1."""
    pytest.importorskip("pandas")
    from tb_monitor.testing import generate_rank_windows

    logdir = str(tmp_path / "logs")  # rank health only: the job's own records are not needed
    generate_rank_windows(logdir, 4, 0.05)
    _beats(logdir, DEFAULT_START + 240, hung=3)
    code, text = _run(logdir)
    assert code == report.EXIT_FAILED == 1
    assert "  STALLED         rank 3: the others wait for it" in text
    assert text.rstrip().endswith("STALLED: the job waits for rank 3 (exit code 1)")
    code, text = _run(logdir, "--json")
    doc = json.loads(text)
    assert code == doc["exit_code"] == 1 and doc["status"] == "empty"
    assert doc["ranks"]["stalled"] is True and doc["ranks"]["waited_for"] == [3]
    assert doc["ranks"]["stalls"][0] == {
        "rank": 3,
        "since_step_s": 46.0,
        "entered": 60,
        "left": 60,
        "in_collective": False,
        "fr_seq": None,
        "waited_for": True,
        "silent": False,
        "cut_off": False,
        "agent": None,
    }


def test_a_stalled_rank_says_where_the_flight_recorder_has_it(tmp_path):
    """A rank that read torch's Flight Recorder while stalled (a DDP job) is reported with its
    newest collective there, in the text and the JSON."""
    pytest.importorskip("pandas")
    from tb_monitor.sinks import AsyncWriter
    from tb_monitor.testing import generate_rank_windows, rank_heartbeat_scalars

    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.05)
    for rank in range(4):
        with AsyncWriter(f"{logdir}/job/rank-{rank}") as writer:
            beat = rank_heartbeat_scalars(60, 0, 0, 0.0, 46.0, fr_seq=120 if rank == 3 else 121)
            writer.add_scalars(beat, wall_time=DEFAULT_START + 240)
    code, text = _run(logdir)
    assert code == 1
    assert "rank 3: the others wait for it" in text
    assert "Flight Recorder at collective 120" in text
    doc = json.loads(_run(logdir, "--json")[1])
    assert [s["fr_seq"] for s in doc["ranks"]["stalls"]] == [120, 121, 121, 121]


def test_a_healthy_rank_job_has_no_stall(tmp_path):
    """Fresh heartbeats on every rank: no stall, exit 0."""
    pytest.importorskip("pandas")
    from tb_monitor.testing import generate_rank_windows

    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.05)
    _beats(logdir, DEFAULT_START + 240, hung=None)
    code, text = _run(logdir, "--json")
    assert code == 0 and json.loads(text)["ranks"]["stalls"] == []


def test_a_stall_in_a_job_that_has_ended_is_not_listed(tmp_path):
    """Once every agent recorded its verdict, a stall from before the job's end is no stall: none
    is listed and the report does not fail."""
    pytest.importorskip("pandas")
    from tb_monitor.testing import generate_rank_windows

    job = generate_job(tmp_path / "logs", nodes=2, workers_per_node=2, restarts=0)
    generate_rank_windows(job.logdir, 4, 0.02, start=job.start)  # 72 s, inside the job's ~89 s
    _beats(job.logdir, job.end - 1, hung=3)
    code, text = _run(job.logdir, "--json")
    ranks = json.loads(text)["ranks"]
    assert code == 0 and ranks["stalls"] == ranks["waited_for"] == [] and ranks["stalled"] is False


def test_follow_exits_1_when_a_rank_stalls(tmp_path):
    """--follow on a job that stalls: the refresh that sees it names rank 3, and the exit code is 1."""
    pytest.importorskip("pandas")
    from tb_monitor.testing import generate_rank_windows

    logdir = str(tmp_path / "logs")
    generate_rank_windows(logdir, 4, 0.05)
    code, text = _run(logdir, "--follow", "--interval", "0.01", max_refreshes=1)
    assert code == 0
    _beats(logdir, DEFAULT_START + 240, hung=3)
    code, text = _run(logdir, "--follow", "--interval", "0.01", max_refreshes=1)
    assert code == 1 and "STALLED: the job waits for rank 3" in text


@pytest.mark.parametrize(
    "command", [["report", "s3:/bucket/run"], ["export", "s3:bucket", "--format", "csv", "-o", "-"]]
)
def test_a_malformed_url_is_one_line_and_exit_2(command, tmp_path, monkeypatch, capsys):
    """report/export of 's3:/bucket/run' or 's3:bucket': one line naming it, exit 2, nothing made."""
    monkeypatch.chdir(tmp_path)
    code = cli_main(command)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and f"'{command[1]}' is not a valid s3:// URL" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["report", "export"])
def test_help_documents_the_exit_codes(command, capsys):
    """--help ends with what the exit codes mean: 2 is a logdir that could not be read."""
    with pytest.raises(SystemExit):
        cli_main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0" in text and "2 a usage error, a logdir that could not be read" in text
