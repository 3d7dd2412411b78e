"""tb_monitor.analysis.restarts: one row per attempt of a synthetic elastic job."""

from __future__ import annotations

import pytest
from conftest import need

from tb_monitor import contract
from tb_monitor.analysis.restarts import SUMMARY_COLUMNS, restart_summary
from tb_monitor.logdir import readers
from tb_monitor.testing import generate_job


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
