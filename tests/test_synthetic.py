"""tb_monitor.synthetic: synthetic torchelastic jobs, deterministic and shaped as asked."""

from __future__ import annotations

import pytest

from tb_monitor import contract, testing
from tb_monitor.logdir import readers
from tb_monitor.synthetic import generate_job


def _events_by_run(logdir) -> dict[str, list[bytes]]:
    """Every event each run holds, as written, but the file header (it holds the real time)."""
    runs: dict[str, list[bytes]] = {}
    for run, event in readers.iter_events(logdir):
        if not event.HasField("file_version"):
            runs.setdefault(run, []).append(event.SerializeToString())
    return runs


def _rows(logdir, kind: str) -> list[dict]:
    rows = readers.decode_timeline(readers.iter_timeline(logdir))
    return [row for row in rows if row["kind"] == kind]


def test_testing_reexports_the_generators():
    """tb_monitor.testing keeps serving the generators that moved to tb_monitor.synthetic."""
    assert testing.generate_job is generate_job
    assert testing.SyntheticJob.__module__ == "tb_monitor.synthetic.jobs"


def test_the_same_seed_writes_the_same_events(tmp_path):
    """Two jobs generated with one seed hold the same events, byte for byte, run by run."""
    options = dict(nodes=3, workers_per_node=2, restarts=2, seed=5, scalars=True, rank_stats=True)
    generate_job(tmp_path / "a", **options)
    generate_job(tmp_path / "b", **options)
    generate_job(tmp_path / "c", **{**options, "seed": 6})
    first = _events_by_run(tmp_path / "a")
    assert first == _events_by_run(tmp_path / "b")
    assert first != _events_by_run(tmp_path / "c")


def test_processes_write_the_same_runs_as_one_process(tmp_path):
    """Runs written by two processes hold exactly what one process writes."""
    options = dict(nodes=3, workers_per_node=2, events=400, seed=2, rank_stats=True)
    one = generate_job(tmp_path / "one", **options)
    two = generate_job(tmp_path / "two", processes=2, **options)
    assert _events_by_run(tmp_path / "one") == _events_by_run(tmp_path / "two")
    assert (one.counts, one.end, one.rank_windows) == (two.counts, two.end, two.rank_windows)


def test_events_asked_for_are_the_events_written(tmp_path):
    """``events=N`` writes N timeline records, keep-alives making up the difference."""
    job = generate_job(tmp_path, nodes=4, workers_per_node=2, restarts=1, events=1_234)
    assert job.total_events == 1_234
    rows = list(readers.decode_timeline(readers.iter_timeline(tmp_path)))
    assert len(rows) == 1_234


def test_hours_sets_the_length_of_the_job(tmp_path):
    """``hours`` stretches the attempts over that long, give or take the rendezvous rounds."""
    job = generate_job(tmp_path, nodes=2, workers_per_node=1, restarts=1, hours=0.1)
    # Besides training: per attempt a rendezvous (the straggler joins ~20 s late) and a 2-s
    # restart gap; at the end the straggler finishes 8.5 s late.
    overhead_s = 2 * (21 + 2) + 9
    assert 0.1 * 3600 <= job.end - job.start <= 0.1 * 3600 + overhead_s


@pytest.mark.parametrize("fail_last, verdict", [(False, "SUCCEEDED"), (True, "FAILED")])
def test_every_agent_ends_with_the_jobs_verdict(tmp_path, fail_last, verdict):
    """Each agent's last event is the job's verdict: FAILED only with ``fail_last``."""
    generate_job(tmp_path, nodes=3, workers_per_node=1, restarts=1, fail_last=fail_last)
    last: dict[str, dict] = {}
    for row in _rows(tmp_path, contract.AGENT):
        last[row["run"]] = row
    assert len(last) == 3
    assert {row["state"] for row in last.values()} == {verdict}


def test_a_failed_attempt_carries_its_workers_traceback(tmp_path):
    """Each restart follows one worker's FAILED event, its error file holding a traceback."""
    generate_job(tmp_path, nodes=2, workers_per_node=2, restarts=2)
    failed = [row for row in _rows(tmp_path, contract.WORKER) if row["state"] == "FAILED"]
    assert len(failed) == 2
    assert all("Traceback (most recent call last)" in row["error_trace"] for row in failed)


def test_rank_stats_counts_the_windows_it_writes(tmp_path):
    """``rank_windows`` is the number of step windows written, over every rank's run."""
    job = generate_job(tmp_path, nodes=2, workers_per_node=2, hours=0.05, rank_stats=True)
    tag = contract.stat_tag(contract.RANK_STEP, "count")
    counts = [p for p in readers.iter_scalars(tmp_path) if p.tag == tag]
    assert job.rank_windows == len(counts) > 0
    assert {p.run for p in counts} == {f"job/rank-{r}" for r in range(4)}


@pytest.mark.parametrize(
    "option, message",
    [
        ({"nodes": 0}, "nodes must be at least 1, got 0"),
        ({"workers_per_node": 0}, "workers_per_node must be at least 1, got 0"),
        ({"restarts": -1}, "restarts must be non-negative, got -1"),
        ({"events": -5}, "events must be non-negative, got -5"),
        ({"hours": 0}, "hours must be positive, got 0"),
        ({"processes": 0}, "processes must be at least 1, got 0"),
    ],
)
def test_bad_options_are_refused_by_name(tmp_path, option, message):
    """A bad option raises a ValueError naming it and its value, before anything is written."""
    with pytest.raises(ValueError, match=message):
        generate_job(tmp_path / "job", **option)
    assert not (tmp_path / "job").exists()
