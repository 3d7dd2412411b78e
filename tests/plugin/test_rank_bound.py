"""The Ranks view's store within a fixed budget per rank: older windows folded, answers kept."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.grid_history import FOLD_EVERY, FoldedGrid
from tb_monitor.testing import generate_rank_windows
from tb_plugin import ranks
from tb_plugin.requests import RankQuery

KEEP = 40


def _store(logdir, **kwargs) -> ranks.RankStore:
    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    store = ranks.RankStore(provider, **kwargs)
    store.refresh(tb_context.RequestContext(), force=True)
    return store


@pytest.fixture(scope="module")
def long_job(tmp_path_factory):
    """Four ranks for 2 hours of 10-s windows (720 a rank), rank 1 slow throughout."""
    logdir = tmp_path_factory.mktemp("long_ranks")
    generate_rank_windows(logdir, 4, 2.0, slow_ranks=[1])
    return logdir


@pytest.fixture(scope="module")
def bounded(long_job):
    """The job's snapshot from a store keeping KEEP windows whole."""
    return _store(long_job, keep=KEEP).snapshot()


def test_the_store_keeps_at_most_keep_windows_a_series(long_job):
    """Once read, each rank's series hold at most KEEP + FOLD_EVERY windows, not 720."""
    store = _store(long_job, keep=KEEP)
    store.snapshot()
    lengths = {key: len(series.wall) for key, series in store._series.items()}
    assert lengths and max(lengths.values()) <= KEEP + FOLD_EVERY
    assert store.late == 0


def test_bounded_route_names_the_unbounded_stragglers(long_job, bounded):
    """The route over the bounded store flags and counts what a store keeping everything does."""
    whole = _store(long_job, keep=10**9).snapshot()
    assert isinstance(bounded.grid, FoldedGrid) and not isinstance(whole.grid, FoldedGrid)
    ours = ranks.ranks_payload(bounded, RankQuery(width=800))
    theirs = ranks.ranks_payload(whole, RankQuery(width=800))
    assert [s["rank"] for s in ours["stragglers"]] == [s["rank"] for s in theirs["stragglers"]]
    assert ours["recorded"] == theirs["recorded"] == 4 * 720
    assert ours["extent"] == pytest.approx(theirs["extent"])


def test_a_view_of_folded_time_says_so(bounded):
    """The whole job's heatmap reads the history's columns and names where windows are whole."""
    payload = ranks.ranks_payload(bounded, RankQuery(width=800))
    factor = bounded.grid.history.factor
    assert payload["folded"] == {"since": bounded.grid.full_since, "windows": factor}
    assert payload["per_bin"] % factor == 0  # whole windows a bucket, whole columns too
    assert payload["bin_s"] == pytest.approx(10.0 * payload["per_bin"])


def test_a_view_of_the_newest_windows_is_whole(long_job, bounded):
    """Zoomed into the windows kept whole, one window a bucket, as the whole job's grid has."""
    lo = bounded.grid.full_since
    query = RankQuery(start=lo, end=bounded.extent[1], width=1000)
    payload = ranks.ranks_payload(bounded, query)
    assert payload["per_bin"] == 1 and payload["bin_s"] == 10.0
    full = RankGrid.from_logdir(long_job)
    ours = np.frombuffer(base64.b64decode(payload["cells"]), np.uint8)
    expected = ranks.levels(full.relative[:, -payload["bins"] :])
    np.testing.assert_array_equal(ours.reshape(4, -1), expected)


def test_median_scores_match_the_report(long_job, bounded):
    """Each rank's median relative score is within 1% of the report's (which reads the logdir
    whole, ``RankGrid.from_logdir``)."""
    report = {s.rank: s for s in RankGrid.from_logdir(long_job).scores()}
    for score in bounded.scores:
        assert score["relative"] == pytest.approx(report[score["rank"]].relative, rel=0.01)
