"""One refresh for both views' stores: the Timeline's and the Ranks view's read the same way."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
from plugin_helpers import huge_pages_advised, local_provider, small_job
from tensorboard import context as tb_context

from tb_monitor.testing import generate_rank_windows
from tb_plugin import provider_store
from tb_plugin.provider_store import (
    REFRESH_INTERVAL_S,
    ChunkRequest,
    ProviderStore,
    chunk_requests,
    cyclic_gc_paused,
    listed_points,
    small_pages,
)
from tb_plugin.ranks import RankStore
from tb_plugin.store import TimelineStore

STORES = [TimelineStore, RankStore]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """A synthetic job whose 4 ranks record timeline events and rank-health windows."""
    root = tmp_path_factory.mktemp("both")
    job = small_job(root, nodes=2, workers_per_node=2)
    generate_rank_windows(root, 4, 0.1, start=job.start)
    return root


class Listings:
    """A real data provider that counts its listings."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.count = 0

    def __getattr__(self, name: str):
        if name.startswith("list_"):
            self.count += 1
        return getattr(self.inner, name)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("make", STORES, ids=lambda cls: cls.__name__)
def test_a_poll_reads_what_stopped_growing_and_then_counts_as_full(logdir, make):
    """A background poll leaves a series it sees for the first time for the next poll (it may
    still be loading); once a poll has read everything, the store has read all and is fresh."""
    clock = Clock()
    store = make(local_provider(logdir), "", clock)
    ctx = tb_context.RequestContext()
    first = store.refresh(ctx, force=True, settled_only=True)  # all new: left behind
    assert not store.has_read_all() and not store.refreshed_within(REFRESH_INTERVAL_S)
    assert store.refresh(ctx, force=True, settled_only=True) > first  # settled since: read
    assert store.has_read_all() and store.refreshed_within(REFRESH_INTERVAL_S)


@pytest.mark.parametrize("make", STORES, ids=lambda cls: cls.__name__)
def test_a_request_reads_everything_at_once(logdir, make):
    """A request's refresh reads every series, settled or not, and is a full refresh."""
    store = make(local_provider(logdir), "", Clock())
    assert store.refresh(tb_context.RequestContext(), force=True) > 0
    assert store.has_read_all() and store.loading() is None


@pytest.mark.parametrize("make", STORES, ids=lambda cls: cls.__name__)
def test_an_unforced_refresh_soon_after_lists_nothing(logdir, make):
    """Within REFRESH_INTERVAL_S of a full refresh, another unforced one answers at once."""
    clock, provider = Clock(), Listings(local_provider(logdir))
    store = make(provider, "", clock)
    ctx = tb_context.RequestContext()
    generation = store.refresh(ctx, force=True)
    assert (store.refresh(ctx), provider.count) == (generation, 1)
    clock.now += REFRESH_INTERVAL_S
    assert (store.refresh(ctx), provider.count) == (generation, 2)


def test_the_cyclic_collector_is_paused_until_the_last_pause_ends():
    """Nested pauses keep the collector off until the outermost ends, which turns it back on."""
    assert gc.isenabled()
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_that_was_off_off():
    """A collector someone else turned off stays off after a pause."""
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_read_that_raises_still_ends_its_pause():
    """An exception out of a paused read ends the pause."""
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("a read failed")
    assert gc.isenabled()


def test_numpys_huge_page_advice_is_off_until_the_last_small_pages_ends():
    """Nested ``small_pages`` keep numpy's huge-page advice off until the outermost ends,
    which gives it back."""
    was = provider_store._MADVISE(True)
    try:
        with small_pages():
            with small_pages():
                assert not huge_pages_advised()
            assert not huge_pages_advised()
        assert huge_pages_advised()
    finally:
        provider_store._MADVISE(was)


def test_small_pages_leave_advice_that_was_off_off():
    """Huge-page advice someone turned off stays off after ``small_pages``."""
    was = provider_store._MADVISE(False)
    try:
        with small_pages():
            pass
        assert not huge_pages_advised()
    finally:
        provider_store._MADVISE(was)


def test_a_runs_points_are_its_stale_series_steps_as_listed():
    """A run weighs the steps its stale series hold (the newest step listed, plus one),
    not those of its series that did not grow."""
    listing = {
        "a": {"x": SimpleNamespace(max_step=9), "y": SimpleNamespace(max_step=99)},
        "b": {"x": SimpleNamespace(max_step=0)},
    }
    assert listed_points({"a": ["x"], "b": ["x"]}, listing) == {"a": 10, "b": 1}


def test_chunks_hold_about_a_limit_of_points():
    """Runs are dealt, biggest first, to the lightest chunk: as many chunks as the limit
    makes of all the points, each run in one of them."""
    points = {"a": 6, "b": 5, "c": 3, "d": 9}
    chunks = chunk_requests({run: ["t"] for run in points}, points, 10)
    assert [(c.runs, c.points) for c in chunks] == [(["d"], 9), (["a"], 6), (["b", "c"], 8)]


def test_a_run_of_few_points_counts_as_its_cost():
    """Costing each run 4 points more, runs of one point each fill a chunk sooner: each costs
    its read too, so thousands of small runs do not make one chunk many times another's; the
    chunk still says how many points it holds."""
    points = {f"rank-{i}": 1 for i in range(10)}
    costs = {run: n + 4 for run, n in points.items()}
    chunks = chunk_requests({run: ["t"] for run in points}, points, 20, costs)
    assert [len(c.runs) for c in chunks] == [4, 3, 3]
    assert [c.points for c in chunks] == [4, 3, 3]


def test_small_runs_are_spread_over_the_chunks():
    """Every chunk holds a like share of the big runs and of the small ones, each in name
    order, rather than the small ones filling the last chunks (name order)."""
    points = {f"agent-{i:02}": 300 for i in range(12)} | {f"rank-{i:03}": 1 for i in range(96)}
    stale = {run: ["t"] for run in points}
    chunks = chunk_requests(stale, points, 1000, {run: n + 16 for run, n in points.items()})
    assert len(chunks) == 6
    assert [sum(run.startswith("agent") for run in c.runs) for c in chunks] == [2] * 6
    assert [sum(run.startswith("rank") for run in c.runs) for c in chunks] == [16] * 6
    assert all(c.runs == sorted(c.runs) for c in chunks)
    assert sorted(run for c in chunks for run in c.runs) == sorted(points)


def test_each_chunk_lists_the_tags_of_its_own_runs():
    """A chunk reads the tags its runs are stale in, not every stale tag of the read."""
    points = {"a": 50, "b": 50}
    chunks = chunk_requests({"a": ["x"], "b": ["y"]}, points, 50)
    assert sorted((c.runs, c.tags) for c in chunks) == [(["a"], ["x"]), (["b"], ["y"])]
    assert sum(c.points for c in chunks) == sum(points.values())


def test_the_collector_stays_paused_from_a_reads_first_chunk_to_its_last():
    """No cyclic collection runs between a read's chunks (each would walk every object kept
    so far), whatever they allocate; the collector is back on once the read ends."""
    collections: list[str] = []
    seen_at_keep: list[int] = []  # per chunk kept: the collections run before it

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(phase)

    def keep(_: object) -> None:
        seen_at_keep.append(len(collections))
        kept.extend([i] for i in range(5_000))  # far past the youngest generation's threshold

    kept: list[list[int]] = []
    store = ProviderStore(None, "", lambda: 0.0)
    chunks = [ChunkRequest([f"r{i}"], ["t"], 1) for i in range(4)]
    gc.callbacks.append(seen)
    try:
        store._read_in_chunks(chunks, iter(chunks), keep)
    finally:
        gc.callbacks.remove(seen)
    assert len(set(seen_at_keep)) == 1 and len(kept) == 20_000
    assert gc.isenabled()
