"""The store over content version 4: every distinct event visible on its own, the same picture
as version 3, and the stores of a view bounded by their bytes, least recently used first."""

from __future__ import annotations

import json
from collections import Counter
from concurrent import futures

import pytest
from plugin_helpers import local_provider, refreshed_store, small_job, wait_for
from tensorboard import context as tb_context

from tb_monitor import contract
from tb_monitor.logdir import readers
from tb_monitor.sinks import encoding
from tb_plugin.refresher import Refreshers
from tb_plugin.store import TimelineStore, UnknownEventError


@pytest.fixture(scope="module")
def distinct(tmp_path_factory):
    """A small job whose keep-alives all differ (their message counts them)."""
    return small_job(tmp_path_factory.mktemp("distinct"), events=800, distinct_beats=True)


def _picture(store: TimelineStore) -> list[tuple]:
    """Each event as the timeline draws it: time, lane, state, name and message."""
    snap = store.snapshot()
    cols = snap.columns
    return sorted(
        zip(
            cols.t.tolist(),
            [snap.lanes[i].label for i in cols.lane.tolist()],
            [snap.states[i] for i in cols.state.tolist()],
            [snap.names[i] for i in cols.name.tolist()],
            [snap.msgs[i] for i in cols.msg.tolist()],
            strict=True,
        )
    )


def test_every_distinct_event_is_its_own_event_with_its_own_json(distinct):
    """Each written payload is one event of the store, whose details give back its exact JSON."""
    store = refreshed_store(distinct.logdir)
    ctx = tb_context.RequestContext()
    written = Counter(record.payload for record in readers.iter_timeline(distinct.logdir))
    ids = range(len(store.snapshot().columns.t))
    assert Counter(store.event(ctx, event_id)["raw"] for event_id in ids) == written
    assert sum(written.values()) == distinct.total_events


def test_each_event_s_details_are_its_own_read_back_from_its_record(distinct):
    """The details read back from the data provider are the event's own: its message is the one
    drawn for it, event by event (not only the same JSON somewhere in the job)."""
    store = refreshed_store(distinct.logdir)
    snap, ctx = store.snapshot(), tb_context.RequestContext()
    cols = snap.columns
    rendezvous = cols.kind == contract.KINDS.index(contract.RENDEZVOUS)  # each its own message
    pairs = zip(cols.ids[rendezvous].tolist(), cols.msg[rendezvous].tolist(), strict=True)
    for event_id, msg in pairs:
        assert json.loads(store.event(ctx, event_id)["raw"])["message"] == snap.msgs[msg]


class _Forgetful:
    """A data provider that, once told to, holds no record any more (sampled out)."""

    def __init__(self, inner):
        self.inner, self.forgot = inner, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read_tensors(self, ctx, **kwargs):
        data = self.inner.read_tensors(ctx, **kwargs)
        return (
            {run: {tag: [] for tag in tags} for run, tags in data.items()} if self.forgot else data
        )


def test_details_of_an_event_whose_record_is_gone_name_its_record(distinct):
    """An event whose record the data provider no longer holds gets a clear UnknownEventError
    naming the run, tag and step, not a wrong event's JSON."""
    provider = _Forgetful(local_provider(distinct.logdir))
    store = TimelineStore(provider)
    ctx = tb_context.RequestContext()
    store.refresh(ctx, force=True)
    provider.forgot = True
    with pytest.raises(UnknownEventError, match=r"run .*tag 'timeline/.*step \d+.*no longer held"):
        store.event(ctx, 0)


def test_distinct_messages_each_show(distinct):
    """Every keep-alive's own message is in the store's columns (no two events share one)."""
    messages = [m for *_, m in _picture(refreshed_store(distinct.logdir)) if "heartbeat" in m]
    assert len(messages) == len(set(messages)) > 500


def test_version_3_and_4_logdirs_draw_the_same_picture(tmp_path, monkeypatch):
    """The same job written in content version 3 and in version 4 gives the same events."""
    pictures = []
    for columnar in (False, True):
        monkeypatch.setattr(encoding, "COLUMNAR", columnar)
        job = small_job(tmp_path / str(columnar), events=600, distinct_beats=True)
        pictures.append(_picture(refreshed_store(job.logdir)))
    assert pictures[0] == pictures[1]
    assert len(pictures[0]) == 600


def test_a_store_counts_its_bytes(distinct):
    """nbytes grows with what the store holds: nothing before a read, more after."""
    store = TimelineStore(local_provider(distinct.logdir))
    empty = store.nbytes()
    store.refresh(tb_context.RequestContext(), force=True)
    assert store.nbytes() > empty + 12 * distinct.total_events


def test_a_stores_bytes_are_told_while_a_sort_holds_its_lock(distinct):
    """nbytes, asked of every store at each request, answers at once while the store's lock
    is held (a big read's sort holds it for seconds), with the size as of the last change."""
    store = refreshed_store(distinct.logdir)
    size = store.nbytes()
    with store._lock, futures.ThreadPoolExecutor(1) as other:
        assert other.submit(store.nbytes).result(timeout=5) == size


def test_stores_over_the_byte_budget_are_dropped_least_recently_used_first(distinct):
    """Past the bytes allowed, the least recently used store goes; the one in use stays."""
    provider = local_provider(distinct.logdir)
    one = refreshed_store(distinct.logdir).nbytes()
    stores = Refreshers(lambda eid: TimelineStore(provider, eid), most=8, max_bytes=int(one * 2.5))
    first = {eid: stores.get(eid) for eid in "abc"}
    for refresher in first.values():
        wait_for(lambda r=refresher: r.store.nbytes() >= one, timeout=60, what="a warm store")
    assert stores.get("a") is first["a"]  # now the most recently used
    stores.get("d")  # a, b, c: over budget; b, the least recently used, goes
    wait_for(lambda: not first["b"].is_running(), timeout=30, what="b to be dropped")
    assert stores.get("a") is first["a"]


def test_the_store_in_use_is_kept_whatever_its_size(distinct):
    """A budget smaller than one store still keeps the store being asked for."""
    provider = local_provider(distinct.logdir)
    stores = Refreshers(lambda eid: TimelineStore(provider, eid), max_bytes=1)
    refresher = stores.get("a")
    wait_for(lambda: refresher.store.nbytes() > 1, timeout=60, what="a warm store")
    assert stores.get("a") is refresher
    assert refresher.is_running()


def test_the_synthetic_generator_writes_distinct_payloads(distinct):
    """distinct_beats leaves no two keep-alives alike."""
    beats = [
        json.loads(r.payload)["message"]
        for r in readers.iter_timeline(distinct.logdir)
        if "_keep_alive" in r.payload
    ]
    assert len(beats) == len(set(beats)) > 0
