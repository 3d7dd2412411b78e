"""The store: records read once through TensorBoard's data provider, decoded into sorted columns."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest
from plugin_helpers import huge_pages_advised, local_provider, picture, refreshed_store, small_job
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.data.provider import RunTagFilter
from two_jobs import write_two_jobs

from tb_monitor import contract, timeline
from tb_monitor.analysis.health import report_of
from tb_monitor.analysis.jobs import separate_jobs
from tb_monitor.elastic.events.api import Event, EventSource, RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin import provider_store
from tb_plugin import store as store_module
from tb_plugin.columns import SortedEvents
from tb_plugin.provider_store import REFRESH_INTERVAL_S
from tb_plugin.runlength import EventIds
from tb_plugin.store import TimelineStore, UnknownEventError


class CountingProvider:
    """A real data provider that counts its listings and reads."""

    def __init__(self, inner):
        self.inner = inner
        self.listings = 0
        self.reads = 0

    def list_tensors(self, *args, **kwargs):
        self.listings += 1
        return self.inner.list_tensors(*args, **kwargs)

    def read_tensors(self, *args, **kwargs):
        self.reads += 1
        return self.inner.read_tensors(*args, **kwargs)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A small synthetic job with one restart."""
    return small_job(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def store(job):
    """A store over the job, refreshed once: every record decoded."""
    return refreshed_store(job.logdir)


def test_refresh_decodes_every_record(store, job):
    """One refresh decodes every record of the job into the snapshot's columns."""
    snap = store.snapshot()
    assert len(snap.columns.t) == job.total_events
    assert snap.generation == store.generation > 0
    assert snap.loading is None


def test_states_are_interned_in_the_timeline_models_order(store):
    """timeline.STATES come first, in order, so a known state's id is its severity."""
    names = [state.name for state in timeline.STATES]
    assert store.snapshot().states[: len(names)] == names


def test_columns_are_sorted_by_lane_then_time(store):
    """The snapshot's columns are ordered by lane display position, then by time."""
    cols = store.snapshot().columns
    rank = cols.lane_rank[cols.lane]
    assert (np.lexsort((cols.t, rank)) == np.arange(len(cols.t))).all()


def test_snapshot_is_reused_until_records_arrive(store):
    """Without new records a snapshot's columns are the same arrays, not a re-sort."""
    assert store.snapshot().columns is store.snapshot().columns


def test_lane_fields_are_made_again_only_when_a_lane_or_run_is_added(tmp_path):
    """Snapshots share their lanes' payload fields until a new run brings a new lane."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1)
    provider = local_provider(job.logdir)
    store = TimelineStore(provider)
    store.refresh(tb_context.RequestContext(), force=True)
    first = store.snapshot().lane_fields
    assert store.snapshot().lane_fields is first
    beat = RdzvEvent("x._keep_alive", job.run_id, "", "node-new", 7000, "RUNNING", local_id=0)
    with AsyncWriter(f"{job.logdir}/{job.runs[0]}-extra") as writer:
        writer.add_timeline(contract.RENDEZVOUS, beat.serialize(), job.end + 1)
    provider._multiplexer.AddRunsFromDirectory(str(job.logdir))
    provider._multiplexer.Reload()
    store.refresh(tb_context.RequestContext(), force=True)
    fields = store.snapshot().lane_fields
    assert fields is not first
    assert "node-new (pid 7000)" in fields.columns["label"].tolist()
    assert len(fields.columns["label"]) == len(first.columns["label"]) + 1


def test_a_refresh_within_the_interval_does_not_list_the_provider(job):
    """An unforced refresh less than REFRESH_INTERVAL_S after the last one is free."""
    now = [100.0]
    provider = CountingProvider(local_provider(job.logdir))
    store = TimelineStore(provider, clock=lambda: now[0])
    ctx = tb_context.RequestContext()
    store.refresh(ctx)
    generation = store.generation
    store.refresh(ctx)
    assert provider.listings == 1
    now[0] += REFRESH_INTERVAL_S
    assert store.refresh(ctx) == generation  # listed again, nothing new: no new generation
    assert provider.listings == 2


def test_settled_only_refresh_waits_for_a_second_listing(job):
    """A settled-only refresh reads a series only once its max_step held still between listings."""
    store = TimelineStore(local_provider(job.logdir))
    ctx = tb_context.RequestContext()
    store.refresh(ctx, force=True, settled_only=True)
    assert len(store.snapshot().columns.t) == 0
    store.refresh(ctx, force=True, settled_only=True)
    assert len(store.snapshot().columns.t) == job.total_events


def test_a_settled_only_refresh_that_left_nothing_behind_makes_the_store_fresh(job):
    """A background poll that found every series settled counts as a full refresh: a request
    right after it does not list the provider again; one that left a series behind does not."""
    now = [100.0]
    provider = CountingProvider(local_provider(job.logdir))
    store = TimelineStore(provider, clock=lambda: now[0])
    ctx = tb_context.RequestContext()
    store.refresh(ctx, force=True, settled_only=True)  # first sight: every series "moved"
    assert not store.refreshed_within(REFRESH_INTERVAL_S)
    store.refresh(ctx, force=True, settled_only=True)  # all held still: all read
    assert store.refreshed_within(REFRESH_INTERVAL_S)
    store.refresh(ctx)
    assert provider.listings == 2


def test_corrupt_records_are_skipped(tmp_path):
    """A record under the timeline tag that is not a contract record is skipped, not fatal."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1, events=0)
    with AsyncWriter(f"{job.logdir}/{job.runs[0]}") as writer:
        writer.add_timeline(contract.RENDEZVOUS, "not json", job.end + 1)
        writer.add_timeline(contract.AGENT, "[1, 2]", job.end + 2)
    store = TimelineStore(local_provider(job.logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    assert len(store.snapshot().columns.t) == job.total_events


def test_event_reads_back_every_field(store):
    """event() returns the stored record: its contract fields and its raw JSON."""
    snap = store.snapshot()
    failed = snap.states.index("FAILED")
    (i,) = np.flatnonzero(snap.columns.state == failed)
    event_id = int(snap.columns.ids[i])
    details = store.event(tb_context.RequestContext(), event_id)
    assert details["id"] == event_id
    assert details["kind"] == contract.WORKER
    assert set(details["fields"]) == set(contract.FIELDS)
    assert json.loads(details["raw"])["name"] == "torchelastic.worker.status.FAILED"


def test_every_events_step_is_that_of_the_tensorboard_record_it_came_in(store, job):
    """Each event's details name the step of the TensorBoard record holding it, batched or not."""
    ctx = tb_context.RequestContext()
    provider = local_provider(job.logdir)
    listing = provider.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
    expected = Counter()
    for run, tags in listing.items():
        for tag in tags:
            kind = contract.kind_of_tag(tag)
            for datum in provider.read_tensors(
                ctx,
                experiment_id="",
                plugin_name=contract.PLUGIN_NAME,
                downsample=10**6,
                run_tag_filter=RunTagFilter(runs=[run], tags=[tag]),
            )[run][tag]:
                values = datum.numpy.reshape(-1).tolist()
                decoded = contract.decode_records([(values, datum.wall_time, datum.numpy.ndim)])
                expected.update((run, kind, datum.step, t) for t in decoded.times.tolist())
    got = Counter()
    for event_id in range(len(store.snapshot().columns.t)):
        details = store.event(ctx, event_id)
        got[(details["run"], details["kind"], details["step"], details["wall_time"])] += 1
    assert got == expected
    assert max(step for _, _, step, _ in got) > 0


@pytest.mark.parametrize("event_id", [-1, 10**9])
def test_unknown_event_ids_raise(store, event_id):
    """An id the store does not hold raises UnknownEventError naming it."""
    with pytest.raises(UnknownEventError, match=str(event_id)):
        store.event(tb_context.RequestContext(), event_id)


def test_identical_payloads_are_decoded_once(tmp_path, monkeypatch):
    """Repeated identical records (heartbeats) are decoded once, yet each is an event."""
    calls = []
    decode = contract.decode_record
    monkeypatch.setattr(contract, "decode_record", lambda *a: calls.append(a) or decode(*a))

    def decodes(logdir, events: int) -> int:
        calls.clear()
        store = TimelineStore(local_provider(logdir))
        store.refresh(tb_context.RequestContext(), force=True)
        assert len(store.snapshot().columns.t) == events
        return len(calls)

    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1, events=0)
    before = decodes(job.logdir, job.total_events)
    beat = RdzvEvent("x._keep_alive", job.run_id, "", "node-000", 4000, "RUNNING", local_id=0)
    with AsyncWriter(f"{job.logdir}/{job.runs[0]}") as writer:
        for i in range(5):
            writer.add_timeline(contract.RENDEZVOUS, beat.serialize(), job.end + 1 + i)
    assert decodes(job.logdir, job.total_events + 5) == before + 1


def test_a_read_in_several_chunks_gives_freed_memory_back_once_at_its_end(job, monkeypatch):
    """After a read in several chunks (a big first read), the heap's free pages go back to the
    system once; a one-chunk read (a live job's poll) does not pay for it."""
    import tb_plugin.provider_store as provider_store_module
    import tb_plugin.store as store_module

    trims = []
    monkeypatch.setattr(provider_store_module, "release_freed_memory", lambda: trims.append(1))
    TimelineStore(local_provider(job.logdir)).refresh(tb_context.RequestContext(), force=True)
    assert trims == []
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 1)
    TimelineStore(local_provider(job.logdir)).refresh(tb_context.RequestContext(), force=True)
    assert trims == [1]


def test_events_read_after_the_columns_were_sorted_join_their_one_sorted_copy(tmp_path):
    """A store that sorted half a job's runs and then read the rest (keeping one sorted copy
    of its events) draws and details every event as a store that read them all at once."""
    job = small_job(tmp_path / "job")
    logdir = tmp_path / "logs"
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={contract.PLUGIN_NAME: 0}
    )
    store = TimelineStore(data_provider.MultiplexerDataProvider(multiplexer, str(logdir)))
    runs = sorted(job.runs)
    for half in (runs[1::2], runs[::2]):  # agents and workers in both halves
        for run in half:
            shutil.copytree(f"{job.logdir}/{run}", logdir / run)
        multiplexer.AddRunsFromDirectory(str(logdir))
        multiplexer.Reload()
        store.refresh(tb_context.RequestContext(), force=True)
        sorted_once = store.snapshot().columns
    assert len(sorted_once.t) == job.total_events
    assert picture(store) == picture(refreshed_store(job.logdir))
    drawn, counted = sorted_once.rec[np.arange(len(sorted_once.t))], sorted_once.rec_count
    assert counted.tolist() == np.bincount(drawn, minlength=len(counted)).tolist()  # as read


def test_sorted_events_give_back_each_event_s_own_record():
    """An event drawn on another record than its own (a collateral end drawn as stopped) is
    found, and sorted again, with its own record; appended events' ids follow on."""
    t = np.array([1.0, 2.0, 3.0])
    ids = EventIds.of(np.array([2, 0, 1], dtype=np.int32))
    events = SortedEvents.of(t, np.array([5, 9, 7]), ids, np.array([5, 6, 7]))
    assert events.find(0) == (2.0, 6) and events.find(1) == (3.0, 7)
    t, own, ids = events.with_appended(np.array([4.0]), np.array([8], dtype=np.int32))
    assert (t.tolist(), own.tolist(), ids.tolist()) == ([1, 2, 3, 4], [5, 6, 7, 8], [2, 0, 1, 3])


@pytest.mark.parametrize("logdir", ["one job", "two jobs sharing a run id"])
def test_a_rows_lane_is_its_records_or_its_own_job_s(logdir, job, tmp_path):
    """The intervals' lanes, taken from the records' interned lanes, are the ones each row
    draws: also where two jobs share a run id and the rows told apart have lanes of their own."""
    root = job.logdir if logdir == "one job" else write_two_jobs(tmp_path).logdir
    store = refreshed_store(root)
    store.snapshot()
    rows = separate_jobs(store._span_rows)
    assert (rows != store._span_rows) == (logdir != "one job")
    assert timeline.spans(rows, store._lane_of_rows()) == timeline.spans(rows)


@pytest.mark.parametrize("logdir", ["one job", "two jobs sharing a run id"])
def test_the_attempts_shown_are_the_reports(logdir, job, tmp_path):
    """The store's attempts are the ones the job's report gives over the same records."""
    root = job.logdir if logdir == "one job" else write_two_jobs(tmp_path).logdir
    store = refreshed_store(root)
    shown = store.snapshot().attempts
    report = report_of(root, store._span_rows)
    assert shown and shown == [store._attempt_payload(a) for a in report.attempts]


def _worker_record(when: float, **metadata) -> str:
    meta = {"run_id": "job", "hostname": "h", "state": "RUNNING", **metadata}
    return Event("torchelastic.worker.status.RUNNING", EventSource.WORKER, when, meta).serialize()


def test_lane_fields_equal_but_of_another_type_give_lanes_of_their_own(tmp_path):
    """Ranks 1, 1.0 and True are equal as keys, yet each record is drawn on its own lane,
    the one ``timeline.lane_of`` makes of it, looked up again or not."""
    with AsyncWriter(tmp_path / "job" / "agent-h") as writer:
        for when, rank in enumerate([1, 1.0, True, 1, True, 1.0], start=1_000):
            writer.add_timeline(contract.WORKER, _worker_record(when, global_rank=rank), when)
    store = refreshed_store(tmp_path)
    snap = store.snapshot()
    drawn = [snap.lanes[snap.columns.rec_lane[snap.columns.rec[i]]].label for i in range(6)]
    assert drawn == ["rank 1", "rank 1", "rank 1.0", "rank 1.0", "rank True", "rank True"]


def test_a_record_with_an_unhashable_field_still_gets_its_lane(tmp_path):
    """A foreign worker record whose pid is a list (no lane reads it) is drawn on its rank's
    lane, like one whose pid is a number."""
    with AsyncWriter(tmp_path / "job" / "agent-h") as writer:
        for when, pid in enumerate([[1, 2], 7], start=1_000):
            meta = {"run_id": "job", "hostname": "h", "global_rank": 2, "pid": pid}
            payload = {"name": "a.worker.event", "source": "WORKER", "metadata": meta}
            writer.add_timeline(contract.WORKER, json.dumps(payload), when)
    snap = refreshed_store(tmp_path).snapshot()
    assert [lane.label for lane in snap.lanes] == ["rank 2"]
    assert len(snap.columns.t) == 2


def test_a_read_of_several_chunks_is_sorted_before_a_request_asks(job, monkeypatch):
    """A big read's columns are sorted as it ends, on a thread of their own: the request
    waiting for the next refresh finds them sorted, and a snapshot sorts nothing again."""
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 20)
    store = refreshed_store(job.logdir)
    store._sorting.join()
    columns, generation = store._shown
    assert generation == store.generation and len(columns.t) == job.total_events
    assert store.snapshot().columns is columns


def test_the_refresh_after_a_big_read_lists_once_its_sort_is_done(job, monkeypatch):
    """The refresh after a read of several chunks lists only once the read's sort ahead
    ended: its listing would take the GIL from the analysis beside the sort."""
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 20)
    store = refreshed_store(job.logdir)
    sorting, provider, alive = store._sorting, store._provider, []
    listed = provider.list_tensors
    monkeypatch.setattr(
        provider,
        "list_tensors",
        lambda *a, **k: alive.append(sorting.is_alive()) or listed(*a, **k),
    )
    store.refresh(tb_context.RequestContext(), force=True)
    assert alive == [False]
    assert store.snapshot().columns is store._shown[0]


def test_a_read_of_one_chunk_leaves_the_sort_to_the_request(job):
    """A small read starts no sort of its own: the request that follows sorts."""
    store = refreshed_store(job.logdir)
    assert store._sorting is None and store._shown is None
    assert len(store.snapshot().columns.t) == job.total_events


def test_a_sort_runs_with_numpys_huge_page_advice_off_and_gives_it_back(job, monkeypatch):
    """A store's sort allocates its columns without numpy's huge-page advice (each new big
    array a kernel compaction otherwise), which is as it was once the sort is done."""
    seen = []
    lane_time_order = store_module.lane_time_order

    def observed(*args):
        seen.append(huge_pages_advised())
        return lane_time_order(*args)

    monkeypatch.setattr(store_module, "lane_time_order", observed)
    was = provider_store._MADVISE(True)
    try:
        refreshed_store(job.logdir).snapshot()
        assert seen and not any(seen)
        assert huge_pages_advised()
    finally:
        provider_store._MADVISE(was)
