"""A big read decoded in helper processes: the same store as a read in TensorBoard's process."""

from __future__ import annotations

import logging
import pickle
import select
import sys
import time

import pytest
from plugin_helpers import (
    assert_same_store,
    job_and_extra_run,
    loaded_data_server,
    local_provider,
    wait_for,
)
from tensorboard import context as tb_context

import tb_plugin.store
from tb_monitor import contract
from tb_plugin import read_workers
from tb_plugin.provider_store import ChunkRequest
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.store import TimelineStore


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A job written by two processes of our writer, and a run ``extra`` of its own."""
    return job_and_extra_run(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def provider(job):
    """TensorBoard's gRPC provider over the job, its Rust data server loaded."""
    return loaded_data_server(job)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few records, so the small job is a read of many."""
    monkeypatch.setattr(tb_plugin.store, "CHUNK_RECORDS", 2)


class CountingHelper(read_workers._Helper):
    """A helper process that counts the chunks it decoded, and keeps every helper started."""

    decoded = 0
    started: list[read_workers._Helper] = []

    def __init__(self, *args) -> None:
        super().__init__(*args)
        CountingHelper.started.append(self)

    def answer(self):
        found = super().answer()
        CountingHelper.decoded += found is not None
        return found


@pytest.fixture
def counting(monkeypatch):
    """Helpers that count what they decode (from 0 in each test)."""
    monkeypatch.setattr(CountingHelper, "decoded", 0)
    monkeypatch.setattr(CountingHelper, "started", [])
    monkeypatch.setattr(read_workers, "_Helper", CountingHelper)
    return CountingHelper


def _read(provider, helpers=None) -> TimelineStore:
    store = TimelineStore(provider, helpers=helpers)
    store.refresh(tb_context.RequestContext(), force=True)
    return store


def test_helpers_decode_the_same_events_with_the_same_ids(job, provider, small_chunks, counting):
    """A read dealt out to two helper processes holds every event, in the same order and with
    the same ids, records and skipped records as a read in TensorBoard's process."""
    helpers = ReadWorkers.of(provider)
    helpers.processes = 2
    ours, theirs = _read(provider, helpers), _read(provider)
    assert counting.decoded >= read_workers.MIN_CHUNKS
    assert len(ours.snapshot().columns.t) == job.total_events + 1  # and "late"
    assert ours.skipped()["count"] == 1
    assert_same_store(ours, theirs)


def test_a_helper_that_dies_leaves_its_chunks_to_tensorboards_process(
    provider, small_chunks, monkeypatch, caplog
):
    """Helpers that exit at once: every chunk is decoded in TensorBoard's process instead, with
    a warning, and the store holds everything."""
    monkeypatch.setattr(read_workers, "_COMMAND", [sys.executable, "-c", "pass"])
    with caplog.at_level(logging.WARNING, logger=read_workers.__name__):
        ours = _read(provider, ReadWorkers.of(provider))
    assert "a read helper is gone" in caplog.text
    assert_same_store(ours, _read(provider))


def test_a_chunk_a_helper_fails_is_decoded_in_tensorboards_process(provider, small_chunks, caplog):
    """A helper that cannot reach the data server says why for each chunk; each is decoded in
    TensorBoard's process instead, with a warning."""
    helpers = ReadWorkers("127.0.0.1:1", "local", processes=1)
    with caplog.at_level(logging.WARNING, logger=read_workers.__name__):
        ours = _read(provider, helpers)
    assert "a read helper failed a chunk" in caplog.text
    assert_same_store(ours, _read(provider))


def test_a_small_read_starts_no_helper(provider, monkeypatch):
    """A read of fewer than ``MIN_CHUNKS`` chunks is decoded in TensorBoard's process."""

    def no_helper(*args):
        raise AssertionError("a helper was started")

    monkeypatch.setattr(read_workers, "_Helper", no_helper)
    store = _read(provider, ReadWorkers.of(provider))
    assert len(store.snapshot().columns.t) > 0


@pytest.mark.parametrize("value, count", [("0", 0), ("3", 3), ("-2", 0)])
def test_the_environment_sets_how_many_helpers_a_read_starts(monkeypatch, value, count):
    """``TB_MONITOR_READ_PROCESSES`` sets the helpers a read starts (0 or less: none)."""
    monkeypatch.setenv("TB_MONITOR_READ_PROCESSES", value)
    assert ReadWorkers("127.0.0.1:1").processes == count


def test_a_malformed_helper_count_is_a_warning_and_the_default(monkeypatch, caplog):
    """A helper count that is not a number is named in a warning; the default holds."""
    monkeypatch.setenv("TB_MONITOR_READ_PROCESSES", "many")
    with caplog.at_level(logging.WARNING, logger=read_workers.__name__):
        count = ReadWorkers("127.0.0.1:1").processes
    assert "'many'" in caplog.text and 1 <= count <= 4


def test_only_the_grpc_provider_gets_helpers(job):
    """TensorBoard's in-process provider has no data server to share: no helpers."""
    assert ReadWorkers.of(local_provider(job.logdir)) is None


def test_helpers_are_gone_when_the_read_is_done(provider, small_chunks, counting):
    """Every helper a read started has exited, by itself, when the read returns."""
    _read(provider, ReadWorkers(provider._addr, "local", processes=2))
    assert len(counting.started) == 2
    assert [h.process.returncode for h in counting.started] == [0, 0]


def test_a_read_that_stops_early_does_not_wait_on_its_helpers(provider, small_chunks, counting):
    """When keeping a chunk fails, the read fails at once and its helpers exit by themselves,
    though they were asked for chunks whose answers nobody reads."""
    store = TimelineStore(provider, helpers=ReadWorkers(provider._addr, "local", processes=2))

    def fails(chunk):
        raise RuntimeError("a chunk that cannot be kept")

    store._keep_chunk = fails
    with pytest.raises(RuntimeError, match="cannot be kept"):
        store.refresh(tb_context.RequestContext(), force=True)
    assert [h.process.returncode for h in counting.started] == [0, 0]


def test_a_helper_hung_up_on_exits_at_once_with_answers_unread(provider):
    """A helper asked more than its pipe holds and hung up on before its answers are read
    exits at once by itself: nothing it was still asked delays the read that stops."""
    ctx = tb_context.RequestContext()
    listing = provider.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
    tags = sorted({tag for by_tag in listing.values() for tag in by_tag})
    everything = ChunkRequest(sorted(listing), tags, 0)  # ~40 KB an answer
    helper = read_workers._Helper(provider._addr, "local")
    for _ in range(8):  # ~320 KB of answers: more than a pipe holds
        helper.ask(("", everything, {}))
    wait_for(lambda: select.select([helper.process.stdout], [], [], 0)[0], what="an answer")
    started = time.monotonic()
    helper.close()
    assert helper.process.returncode == 0
    assert time.monotonic() - started < 2.0  # not the 5 s after which it would be killed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_helper_starts_no_blas_threads(monkeypatch):
    """A helper runs with one BLAS thread, whatever TensorBoard's environment asks: it does no
    linear algebra, and a thread per core started at numpy's import costs its start."""
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "8")
    helper = read_workers._Helper(None, "local")
    try:
        helper.ask(("", ChunkRequest([], [], 0), {}))
        assert helper.answer() is not None  # it runs: its environment is its own
        with open(f"/proc/{helper.process.pid}/environ", "rb") as environ:
            env = dict(e.split(b"=", 1) for e in environ.read().split(b"\0") if b"=" in e)
    finally:
        helper.close()
    assert {env[name] for name in (b"OPENBLAS_NUM_THREADS", b"OMP_NUM_THREADS")} == {b"1"}


def test_a_helper_whose_request_is_cut_short_exits():
    """A helper that reads half a request (TensorBoard killed as it asked) exits by itself,
    rather than wait for a next request that never comes."""
    request = pickle.dumps(("", ChunkRequest(["run"], ["tag"], 0), {}), pickle.HIGHEST_PROTOCOL)
    helper = read_workers._Helper(None, "local")
    try:
        helper.process.stdin.write(request[: len(request) // 2])
        helper.process.stdin.flush()
        helper.process.stdin.close()
        assert helper.process.wait(timeout=30) == 0
    finally:
        helper.close()
