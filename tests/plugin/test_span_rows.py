"""The rows the restart analysis reads stay bounded over a long job's repeated syncs."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import refreshed_store, small_job

from tb_monitor import contract
from tb_monitor.analysis.attempts import attempt_dict
from tb_monitor.analysis.health import report_of
from tb_monitor.analysis.sources import timeline_rows
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.synthetic import keep_alive_round

#: Keep-alive rounds appended after the job: each one's sync is one more event of one record.
SYNCS = 50
_SYNC = keep_alive_round("job", "node-000", 4000)[1]
_MESSAGE = contract.decode_record(contract.RENDEZVOUS, json.loads(_SYNC))["message"]


def _synced_job(root, newest_first: bool):
    """A small job, then ``SYNCS`` syncs of node-000's agent 5 s apart (written newest first
    where asked: the store must not rely on the order they come in)."""
    job = small_job(root)
    times = [job.end + 5.0 * (i + 1) for i in range(SYNCS)]
    with AsyncWriter(f"{job.logdir}/{contract.agent_run_name('job', 'node-000', 4000)}") as out:
        for at in sorted(times, reverse=newest_first):
            out.add_timeline(contract.RENDEZVOUS, _SYNC, at)
    return job, times


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """The job with its syncs appended in time order, and a store refreshed over it."""
    job, times = _synced_job(tmp_path_factory.mktemp("logs"), newest_first=False)
    return job, times, refreshed_store(job.logdir)


def _sync_times(store) -> list[float]:
    return sorted(row["wall_time"] for row in store._span_rows if row.get("message") == _MESSAGE)


@pytest.mark.parametrize("newest_first", [False, True])
def test_a_repeated_sync_keeps_only_its_earliest_and_newest_rows(tmp_path, newest_first):
    """Of one sync record's many events, the analysis rows are its earliest and newest."""
    job, times = _synced_job(tmp_path / "logs", newest_first)
    store = refreshed_store(job.logdir)
    earlier = [r["wall_time"] for r in timeline_rows(job.logdir) if r.get("message") == _MESSAGE]
    assert _sync_times(store) == [min(earlier), max(times)]


def test_every_sync_is_still_an_event_on_the_timeline(synced):
    """Bounding the analysis rows leaves every event drawn."""
    job, _, store = synced
    assert len(store.snapshot().columns.t) == job.total_events + SYNCS


def test_a_kept_rows_id_is_its_own_events(synced):
    """The newest sync's row names that event's id, which reads back at its time."""
    _, times, store = synced
    newest = max(
        (r for r in store._span_rows if r.get("message") == _MESSAGE), key=lambda r: r["_id"]
    )
    assert store._table.locate(newest["_id"])[0] == newest["wall_time"] == max(times)


def test_the_attempts_are_those_every_record_gives(synced):
    """The report over the store's bounded rows gives the attempts it gives over every record."""
    job, _, store = synced
    kept, every = (
        report_of(job.logdir, rows) for rows in (store._span_rows, timeline_rows(job.logdir))
    )
    assert [attempt_dict(a) for a in kept.attempts] == [attempt_dict(a) for a in every.attempts]
