"""Records are decoded off the request threads: warm-up at load, partial answers while loading."""

from __future__ import annotations

import json
import threading

import pytest
from plugin_helpers import GatedProvider, local_provider, small_job, wait_for
from tensorboard import context as tb_context
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from tb_plugin import refresher as refresher_module
from tb_plugin import store as store_module
from tb_plugin.plugin import TimelinePlugin
from tb_plugin.query import timeline_payload
from tb_plugin.refresher import Refresher, Refreshers
from tb_plugin.requests import Query
from tb_plugin.store import TimelineStore


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A small synthetic job with one restart."""
    return small_job(tmp_path_factory.mktemp("logs"))


@pytest.fixture
def gated(job, monkeypatch):
    """A provider over the job whose second read waits; one run read at a time."""
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 1)
    provider = GatedProvider(local_provider(job.logdir))
    yield provider
    provider.gate.set()  # never leave a refresh thread waiting


def _query(store: TimelineStore) -> dict:
    return timeline_payload(store.snapshot(), Query())


def _total(store: TimelineStore) -> int:
    return _query(store)["total"]


def test_warm_up_decodes_every_record_without_a_request(job):
    """A started refresher decodes the whole job on its own, before anything is asked."""
    store = TimelineStore(local_provider(job.logdir))
    refresher = Refresher(store, poll_s=0.05).start()
    try:
        wait_for(lambda: _total(store) == job.total_events, timeout=60, what="the warm-up")
        assert store.loading() is None
    finally:
        refresher.stop(timeout=30)


def test_a_request_during_a_long_decode_gets_partial_data_and_progress(job, gated):
    """While the first decode is stuck, a request answers with the records read so far."""
    store = TimelineStore(gated)
    refresher = Refresher(store, poll_s=60).start()
    try:
        assert refresher.request(tb_context.RequestContext(), wait_s=0.2) is False
        data = wait_for(lambda: (d := _query(store))["loading"] and d, what="loading")
        assert 0 < data["total"] < job.total_events
        assert data["loading"]["expected"] >= len(job.runs)  # TensorBoard records, not events
        assert 0 < data["loading"]["done"] < data["loading"]["expected"]
        gated.gate.set()
        assert refresher.request(tb_context.RequestContext(), wait_s=60) is True
        final = _query(store)
        assert final["total"] == job.total_events
        assert final["loading"] is None
    finally:
        refresher.stop(timeout=30)


def test_timeline_route_answers_while_decoding(job, gated):
    """The plugin's timeline route returns partial data with 'loading' instead of hanging."""
    plugin = TimelinePlugin(base_plugin.TBContext(data_provider=gated))
    client = Client(plugin.get_plugin_apps()["/timeline"])
    body = wait_for(
        lambda: (d := json.loads(client.get("/timeline").get_data(as_text=True)))["loading"] and d,
        what="a loading answer",
    )
    assert body["total"] < job.total_events
    gated.gate.set()
    done = wait_for(
        lambda: (
            not (d := json.loads(client.get("/timeline").get_data(as_text=True)))["loading"]
            and d["total"] == job.total_events
            and d
        ),
        what="the complete answer",
    )
    assert done["events"]["count"] == job.total_events


def test_a_failed_refresh_does_not_end_the_thread(job, gated):
    """A provider error (its data server still starting) is retried by the next round."""
    gated.gate.set()
    gated.fail_next_listing = True
    store = TimelineStore(gated)
    refresher = Refresher(store, poll_s=0.05).start()
    try:
        wait_for(lambda: _total(store) == job.total_events, timeout=60, what="the retry")
    finally:
        refresher.stop(timeout=30)


class SteppedProvider(GatedProvider):
    """A real data provider whose reads after the first each wait for a step of the test."""

    def __init__(self, inner):
        super().__init__(inner)
        self.steps = threading.Semaphore(0)

    def read_tensors(self, *args, **kwargs):
        self.reads += 1
        if self.reads > 1:
            assert self.steps.acquire(timeout=60), "the test never took the next step"
        return self.inner.read_tensors(*args, **kwargs)


def test_while_loading_the_picture_is_resorted_only_when_it_doubled_early_in_the_read(
    job, monkeypatch
):
    """During a long first read, the columns handed out are sorted again only once the events
    have doubled and the read is not yet a quarter done; once done, they hold every event."""
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 1)
    provider = SteppedProvider(local_provider(job.logdir))
    store = TimelineStore(provider)
    refresher = Refresher(store, poll_s=60).start()
    try:
        refresher.request(tb_context.RequestContext(), wait_s=0)
        loading = wait_for(store.loading, what="the first read")
        shown = store.snapshot().columns
        resorts = 0
        for _ in range(loading["expected"]):
            done = (store.loading() or {}).get("done")
            if done is None:
                break
            provider.steps.release()
            wait_for(lambda d=done: (store.loading() or {}).get("done", -1) != d, what="a read")
            progress = store.loading()
            events = store._folded + len(store._t)  # decoded so far, sorted or not
            columns = store.snapshot().columns
            if columns is not shown:
                resorts += 1
                assert events >= 2 * len(shown.t)
                assert progress is None or 4 * progress["done"] < progress["expected"]
                shown = columns
        assert resorts >= 1
        refresher.request(tb_context.RequestContext(), wait_s=60)
        assert len(store.snapshot().columns.t) == job.total_events
    finally:
        provider.steps.release(1000)
        refresher.stop(timeout=30)


def test_refreshers_keep_only_the_newest_experiments(job):
    """Past ``most`` experiments, the oldest one's refresher is stopped and forgotten: a stray
    experiment id in a URL cannot pile up threads, and asking for it again starts afresh."""
    provider = local_provider(job.logdir)
    stores = Refreshers(lambda eid: TimelineStore(provider, eid), most=2)
    first = stores.get("a")
    assert stores.get("a") is first
    stores.get("b")
    stores.get("c")
    wait_for(lambda: not first.is_running(), timeout=30, what="the oldest refresher to stop")
    assert stores.get("a") is not first


def test_the_heap_is_trimmed_once_requests_stop_and_never_while_idle(job, monkeypatch):
    """An idle poll after requests gives the C heap's free pages back once; polls with no
    request since (a TensorBoard nobody looks at) do not trim again."""
    trims = threading.Semaphore(0)
    monkeypatch.setattr(refresher_module, "release_freed_memory", trims.release)
    store = TimelineStore(local_provider(job.logdir))
    refresher = Refresher(store, poll_s=0.05).start()
    try:
        wait_for(lambda: store.loading() is None and store.has_read_all(), 60, what="the warm-up")
        assert not trims.acquire(timeout=0.5)  # idle polls, no request yet: nothing to give back
        refresher.request(tb_context.RequestContext())
        assert trims.acquire(timeout=10)  # the next idle poll
        assert not trims.acquire(timeout=0.5)  # once
    finally:
        refresher.stop(timeout=30)
