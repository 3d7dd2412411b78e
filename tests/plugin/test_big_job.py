"""A big job, scaled down for CI (64 nodes x 4 workers, 1 hour, 3 restarts): every event is
present wherever it is read, on the right lanes, and level-of-detail buckets add up.

The full 1,024-node day is ``benchmarks/bench_timeline.py --day``; this checks correctness only.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from plugin_helpers import bucket_lanes, column, expected_lanes, lanes, refreshed_store
from tensorboard import context as tb_context

from tb_monitor import contract, export
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.logdir import readers
from tb_monitor.sinks.batching import TimelineBatcher
from tb_monitor.testing import generate_job
from tb_plugin import query as query_module
from tb_plugin.query import timeline_payload
from tb_plugin.requests import Query

NODES, WORKERS = 64, 4


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The scaled-down day, written by two processes with the project's writer."""
    logdir = tmp_path_factory.mktemp("day")
    return generate_job(
        logdir, nodes=NODES, workers_per_node=WORKERS, hours=1, restarts=3, processes=2
    )


@pytest.fixture(scope="module")
def store(job):
    """The plugin's store over the job, read through TensorBoard's own data provider."""
    return refreshed_store(job.logdir)


def test_the_job_is_a_day_in_miniature(job):
    """The generator wrote an hour of keep-alives every 5 s per node, through 4 attempts."""
    assert job.total_events > NODES * 3600 / 5 * 0.95
    assert 3600 < job.end - job.start < 3600 + 120


def test_keep_alives_are_stored_as_runs(job):
    """Keep-alives take a record per run of them, not one each: far fewer records than events."""
    records = sum(1 for _ in readers.iter_run_events(f"{job.logdir}/{job.runs[0]}"))
    events = sum(n for (run, _), n in job.counts.items() if run == job.runs[0])
    assert events > 100 and records < events / 5


def test_every_event_is_read_back_per_run_and_kind(job):
    """Our readers yield every event the generator wrote, per run and kind."""
    counts = Counter((r.run, r.kind) for r in readers.iter_timeline(job.logdir))
    assert counts == Counter(job.counts)


def test_every_event_reaches_the_store_through_tensorboard(job, store):
    """TensorBoard's loader hands the plugin every event: the store holds each one."""
    snap = store.snapshot()
    assert len(snap.columns.t) == job.total_events
    runs = Counter(snap.runs[r] for r in snap.columns.run.tolist())
    per_run = Counter()
    for (run, _), n in job.counts.items():
        per_run[run] += n
    assert runs == per_run


def test_every_lane_is_there(job, store):
    """A rendezvous and an agent lane per node, a worker and a monitor lane per rank."""
    payload = timeline_payload(store.snapshot(), Query())
    assert len(lanes(payload)) == expected_lanes(NODES, NODES * WORKERS)
    assert payload["total"] == job.total_events


def test_buckets_add_up_to_the_event_count(job, store, monkeypatch):
    """Zoomed out, the level-of-detail buckets count every event exactly once."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 1000)
    payload = timeline_payload(store.snapshot(), Query(width=800))
    assert payload["mode"] == "buckets"
    counts = column(payload, "buckets", "n")
    assert int(counts.sum()) == job.total_events == payload["in_window"]


def test_buckets_of_a_window_add_up_to_its_events(job, store, monkeypatch):
    """A zoomed window's buckets count exactly the events inside it."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 100)
    start, end = job.start + 600, job.start + 1800
    payload = timeline_payload(store.snapshot(), Query(start=start, end=end, width=600))
    t = store.snapshot().columns.t
    inside = int(np.count_nonzero((t >= start) & (t <= end)))
    assert int(column(payload, "buckets", "n").sum()) == inside


def test_filtered_buckets_count_only_the_kind_asked_for(job, store, monkeypatch):
    """With a kind filter, the buckets count that kind's events only."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 100)
    payload = timeline_payload(store.snapshot(), Query(kind=contract.RENDEZVOUS))
    wanted = sum(n for (_, kind), n in job.counts.items() if kind == contract.RENDEZVOUS)
    assert int(column(payload, "buckets", "n").sum()) == wanted


def test_any_event_has_its_details(job, store):
    """Clicking any event, a keep-alive in a run included, shows its own time and JSON."""
    snap = store.snapshot()
    names = snap.names
    beat = int(np.flatnonzero([names[n].endswith("._keep_alive") for n in snap.columns.name])[7])
    event_id = int(snap.columns.ids[beat])
    details = store.event(tb_context.RequestContext(), event_id)
    assert details["wall_time"] == snap.columns.t[beat]
    assert details["fields"]["name"].endswith("._keep_alive")
    assert details["fields"]["state"] == "RUNNING"


def test_the_export_has_every_event(job, tmp_path):
    """The JSON-lines export writes one line per event."""
    out = tmp_path / "events.jsonl"
    export.write_jsonl(job.logdir, out)
    assert sum(1 for _ in out.open()) == job.total_events


def test_each_lane_s_buckets_count_that_lane_s_events(job, store, monkeypatch):
    """Zoomed out, each lane's buckets count exactly its own events, and the worst state shows."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 1000)
    snap = store.snapshot()
    payload = timeline_payload(snap, Query(width=800))
    lane = bucket_lanes(payload)
    per_lane = np.bincount(lane, weights=column(payload, "buckets", "n"))
    labels = [entry["label"] for entry in lanes(payload)]
    events = Counter(snap.lanes[i].label for i in snap.columns.lane.tolist())
    assert {labels[i]: int(n) for i, n in enumerate(per_lane)} == dict(events)
    failed = snap.states.index("FAILED")
    assert failed in column(payload, "buckets", "state").tolist()


RDZV = contract.timeline_tag(contract.RENDEZVOUS)
BEAT = RdzvEvent("H._keep_alive", "job", "", "node-0", 4000, "RUNNING", local_id=0).serialize()
JOIN = RdzvEvent("H.next_rendezvous", "job", "", "node-0", 4000, "RUNNING", local_id=0).serialize()


def _run_lengths(batcher: TimelineBatcher, events: list[tuple[str, float]]) -> list[int]:
    """How many events each batch written holds, given (payload, time) events in order."""
    out = []
    for payload, t in events:
        batcher.add(RDZV, payload, t)
        out += [len(b.times) for b in batcher.take()]
    return out + [len(b.times) for b in batcher.take(seal=True)]


def test_a_quiet_tag_s_keep_alive_runs_double_up_to_the_longest():
    """Keep-alives alone, every 5 s: runs of 60, 120, 240 s, then 240 s each (the longest)."""
    batcher = TimelineBatcher(run_s=60.0, clock=lambda: 0.0, longest_run_s=240.0)
    beats = [(BEAT, 5.0 * i) for i in range(12 * 9)]  # 9 minutes
    assert _run_lengths(batcher, beats) == [12, 24, 48, 24]


def test_another_event_of_the_tag_writes_the_open_run_and_starts_runs_short_again():
    """A rendezvous round writes the keep-alives before it along with it, and the runs after it
    start again at their shortest, so around whatever happens the keep-alives are current."""
    batcher = TimelineBatcher(run_s=60.0, clock=lambda: 0.0, longest_run_s=240.0)
    before = [(BEAT, 5.0 * i) for i in range(12 * 3 + 4)]  # runs of 60 and 120 s, then 20 s
    after = [(BEAT, 1000.0 + 5.0 * i) for i in range(12 * 2)]
    assert _run_lengths(batcher, [*before, (JOIN, 500.0), *after]) == [12, 24, 4, 1, 12, 12]


def test_a_live_run_is_written_its_own_length_after_it_opened():
    """By the writer's clock, a run is written once open as long as it may last: a live job's
    keep-alives show within the first run's length, later ones within theirs."""
    now = [0.0]
    batcher = TimelineBatcher(run_s=60.0, clock=lambda: now[0], longest_run_s=240.0)
    batcher.add(RDZV, BEAT, 0.0)
    now[0] = 60.0
    assert [len(b.times) for b in batcher.take()] == [1]
    batcher.add(RDZV, BEAT, 65.0)
    now[0] = 179.0
    assert batcher.take() == []
    now[0] = 180.0
    assert [len(b.times) for b in batcher.take()] == [1]


def test_a_longest_run_shorter_than_the_first_is_rejected():
    """A longest run shorter than the first one is an error naming both."""
    with pytest.raises(ValueError, match="60.*30"):
        TimelineBatcher(run_s=60.0, longest_run_s=30.0)
