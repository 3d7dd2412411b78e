"""The store: records read once through TensorBoard's data provider, decoded into sorted columns."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plugin_helpers import local_provider, refreshed_store, small_job
from tensorboard import context as tb_context

from tb_monitor import contract, timeline
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin.store import REFRESH_INTERVAL_S, TimelineStore, UnknownEventError


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
