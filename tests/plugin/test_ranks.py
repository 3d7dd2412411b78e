"""The Ranks view's route: the heatmap's cells, level-of-detail buckets, stragglers and stalls."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from plugin_helpers import local_provider, small_job
from step_time_jobs import TAIL_RANK, median_of, p95_of, write_step_quantiles
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from test_routes import App

from tb_monitor import contract
from tb_monitor.analysis.scoring import longest_over, relative_scores
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import (
    DEFAULT_START,
    generate_rank_windows,
    rank_heartbeat_scalars,
    rank_window_scalars,
)
from tb_plugin import ranks
from tb_plugin.refresher import ANSWER_WAIT_S, Refresher, Refreshers
from tb_plugin.requests import RankQuery

ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/ranks"


def _cells(payload: dict) -> np.ndarray:
    cells = np.frombuffer(base64.b64decode(payload["cells"]), dtype=np.uint8)
    return cells.reshape(len(payload["ranks"]), payload["bins"])


def _provider(logdir) -> data_provider.MultiplexerDataProvider:
    """TensorBoard's in-process provider keeping every scalar (no reservoir sampling)."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={contract.PLUGIN_NAME: 0, "scalars": 0}
    )
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, str(logdir))


def _store(logdir) -> ranks.RankStore:
    store = ranks.RankStore(_provider(logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    return store


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory):
    """A synthetic job (timeline records, one restart) whose 4 ranks record health; rank 1 slow."""
    logdir = tmp_path_factory.mktemp("ranks")
    job = small_job(logdir, nodes=2, workers_per_node=2)
    generate_rank_windows(logdir, 4, 0.1, slow_ranks=[1], start=job.start)
    return job


@pytest.fixture(scope="module")
def app(slow_job):
    """TensorBoard's app over the slow job, shared by read-only tests."""
    return App(slow_job.logdir)


def test_route_flags_the_slow_rank_and_no_other(app):
    """rank 1 computing 1.5x longer is the one straggler, scored about 1.5 relative."""
    body = app.json(f"{ROUTE}?width=800")
    assert body["ranks"] == [0, 1, 2, 3] and body["recorded"] == 4 * 36
    assert [s["rank"] for s in body["stragglers"]] == [1]
    assert body["scores"][0]["rank"] == 1
    assert body["scores"][0]["relative"] == pytest.approx(1.5, rel=0.1)
    assert body["stalls"] == []


def test_cells_colour_the_slow_rank_slower_than_the_median(app):
    """Rank 1's cells sit above the median level (128), the others around it."""
    body = app.json(f"{ROUTE}?width=800")
    cells = _cells(body)
    assert body["bins"] == 36 and body["per_bin"] == 1  # 6 min of 10-s windows, one a bucket
    assert (cells[1] > 180).all()
    others = cells[[0, 2, 3]].astype(int)
    assert (abs(others - 128) < 24).all()  # 5% jitter either way
    assert body["scale"]["colors"] and body["extent"][1] - body["extent"][0] == 360


def test_markers_come_from_the_timelines_attempts(app):
    """The job's restart, its failure and its first rendezvous are marked, with state colours."""
    kinds = {m["kind"] for m in app.json(ROUTE)["markers"]}
    assert kinds == {"rendezvous", "restart", "failure"}
    assert all(m["color"].startswith("#") for m in app.json(ROUTE)["markers"])


def test_a_poll_with_nothing_new_is_answered_unchanged(app):
    """A request naming the current generation gets a two-field answer, not the cells again."""
    generation = app.json(ROUTE)["generation"]
    assert app.json(f"{ROUTE}?generation={generation}") == {
        "generation": generation,
        "unchanged": True,
    }
    assert "cells" in app.json(f"{ROUTE}?generation={generation + 1}")


@pytest.mark.parametrize(
    "query",
    ["width=0", "width=abc", "start=x", "start=5&end=1", "end=inf", "width=٣", "generation=-1"],
)
def test_bad_arguments_are_400(app, query):
    """A malformed window or width is a 400 naming the argument."""
    assert "error" in app.json(f"{ROUTE}?{query}", status=400)


def test_lod_buckets_add_up_to_the_windows(tmp_path):
    """Bucketed to a narrow width: each bucket is the mean of its windows, every window counted."""
    generate_rank_windows(tmp_path, 8, 1.0, slow_ranks=[5], seed=3)
    snap = _store(tmp_path).snapshot()
    assert snap.compute.shape == (8, 360)
    payload = ranks.ranks_payload(snap, RankQuery(width=40))
    per_bin = payload["per_bin"]
    assert (
        payload["bins"] <= 20 and payload["bins"] * per_bin >= 360 > (payload["bins"] - 1) * per_bin
    )
    assert payload["bin_s"] == per_bin * 10.0
    cells = _cells(payload)
    for b in range(payload["bins"]):
        window = snap.relative[:, b * per_bin : (b + 1) * per_bin].astype(np.float64)
        np.testing.assert_array_equal(cells[:, b], ranks.levels(window.mean(axis=1)))
    # The same grid zoomed into 10 minutes: one window a bucket.
    lo = payload["extent"][0]
    zoomed = ranks.ranks_payload(snap, RankQuery(start=lo + 600, end=lo + 1200, width=1000))
    assert zoomed["per_bin"] == 1 and zoomed["bins"] == 60 and zoomed["t0"] == lo + 600


def test_relative_scores_match_the_analysis(tmp_path):
    """The plugin's grid and scores are tb_monitor.analysis.stragglers' own."""
    pd = pytest.importorskip("pandas")
    from tb_monitor.analysis.stragglers import stragglers

    generate_rank_windows(tmp_path, 6, 0.2, slow_ranks=[2, 4], slow_factor=1.4, seed=1)
    snap = _store(tmp_path).snapshot()
    np.testing.assert_allclose(snap.relative, relative_scores(snap.compute), rtol=1e-6)
    expected = stragglers(tmp_path).set_index("rank")
    for score in snap.scores:
        row = expected.loc[score["rank"]]
        assert score["flagged"] == bool(row["flagged"])
        assert score["relative"] == pytest.approx(row["relative"], rel=1e-5)
    assert isinstance(expected, pd.DataFrame)


def test_longest_over_counts_consecutive_windows_a_rank_recorded():
    """Runs over the threshold per rank: a window not recorded neither breaks nor counts (as in
    the pandas analysis, and where TensorBoard kept a sample), a window not over breaks."""
    scores = np.array([[1.5, 1.5, np.nan, 1.5, 1.5, 1.5], [1.0, 1.3, 1.3, 1.0, 1.3, 1.0]])
    assert longest_over(scores, 1.2, present=~np.isnan(scores)).tolist() == [5, 2]
    assert longest_over(scores, 1.2).tolist() == [3, 2]  # every cell present: NaN breaks


def _beat(writer, when, steps, entered, left, inside, since):
    writer.add_scalars(rank_heartbeat_scalars(steps, entered, left, inside, since), wall_time=when)


def test_stall_names_the_rank_the_others_wait_for_and_refreshes_live(tmp_path):
    """Ranks 0-2 inside collective 7, rank 3 never entered it: rank 3 is waited for, and a later
    refresh picks up new windows and heartbeats (only the newest heartbeat counts)."""
    writers = [AsyncWriter(tmp_path / "job" / f"rank-{r}") for r in range(4)]
    for writer in writers:
        for i in range(3):
            writer.add_scalars(rank_window_scalars(0.1, 0.01, 50), wall_time=DEFAULT_START + 10 * i)
        _beat(writer, DEFAULT_START + 25, 150, 150, 150, 0.0, 0.05)
        writer.flush()
    provider = local_provider(tmp_path)
    store = ranks.RankStore(provider)
    ctx = tb_context.RequestContext()
    store.refresh(ctx, force=True)
    assert store.snapshot().stalls == [] and store.snapshot().compute.shape == (4, 3)
    for r, writer in enumerate(writers):
        writer.add_scalars(rank_window_scalars(0.1, 0.01, 20), wall_time=DEFAULT_START + 30)
        hung = r == 3
        _beat(writer, DEFAULT_START + 80, 170, 170 if hung else 171, 170, 0 if hung else 45, 46)
        writer.close()
    # What TensorBoard's reload thread does, then the store's next refresh.
    provider._multiplexer.Reload()
    store.refresh(ctx, force=True)
    snap = store.snapshot()
    assert snap.compute.shape == (4, 4)
    waited = [s["rank"] for s in snap.stalls if s["waited_for"]]
    assert waited == [3] and {s["rank"] for s in snap.stalls} == {0, 1, 2, 3}
    assert snap.stalls[0]["rank"] == 3 and snap.stalls[0]["run"] == "job/rank-3"
    # The new window was scored on its own; the result is the whole grid's.
    np.testing.assert_allclose(snap.relative, relative_scores(snap.compute), rtol=1e-6)
    # Then only heartbeats: every rank stepped again. The grid stands; the stalls are gone.
    for r in range(4):
        with AsyncWriter(tmp_path / "job" / f"rank-{r}") as writer:
            _beat(writer, DEFAULT_START + 90, 180, 180, 180, 0.0, 0.05)
    provider._multiplexer.Reload()
    store.refresh(ctx, force=True)
    later = store.snapshot()
    assert later.generation > snap.generation and later.stalls == []
    assert later.compute is snap.compute


def test_stall_names_the_rank_behind_in_the_flight_recorder(tmp_path):
    """A DDP job (no collective from Python) stalled: the rank behind the others in torch's
    Flight Recorder is the one waited for, and each stall carries its ``fr_seq``."""
    for r in range(4):
        with AsyncWriter(tmp_path / "job" / f"rank-{r}") as writer:
            for i in range(3):
                writer.add_scalars(
                    rank_window_scalars(0.1, 0.01, 50), wall_time=DEFAULT_START + 10 * i
                )
            beat = rank_heartbeat_scalars(150, 0, 0, 0.0, 46, fr_seq=300 if r == 3 else 301)
            writer.add_scalars(beat, wall_time=DEFAULT_START + 80)
    store = ranks.RankStore(local_provider(tmp_path))
    store.refresh(tb_context.RequestContext(), force=True)
    stalls = store.snapshot().stalls
    assert [s["rank"] for s in stalls if s["waited_for"]] == [3]
    assert sorted((s["rank"], s["fr_seq"]) for s in stalls) == [
        (0, 301),
        (1, 301),
        (2, 301),
        (3, 300),
    ]


def test_no_rank_data_is_an_empty_view(tmp_path):
    """A logdir with timeline records but no rank health answers with no ranks, not an error."""
    small_job(tmp_path, nodes=1, workers_per_node=1, restarts=0)
    body = App(tmp_path).json(ROUTE)
    assert body["ranks"] == [] and body["bins"] == 0 and body["stragglers"] == []


def test_once_everything_is_read_a_request_answers_at_once(slow_job, monkeypatch):
    """Before the first full read a request waits a little for it; after it, a request answers
    from the store at once and leaves the next refresh to run behind it."""
    waits = []
    original = Refresher.request

    def request(self, ctx, wait_s=ANSWER_WAIT_S):
        waits.append(wait_s)
        return original(self, ctx, wait_s)

    monkeypatch.setattr(Refresher, "request", request)
    provider = local_provider(slow_job.logdir)
    stores = Refreshers(lambda eid: ranks.RankStore(provider, eid))
    ctx = tb_context.RequestContext()
    first = stores.store("", ctx, behind=True)
    assert waits == [ANSWER_WAIT_S]
    first.refresh(ctx, force=True)  # what the first request's round does
    assert stores.store("", ctx, behind=True).has_read_all()
    assert waits == [ANSWER_WAIT_S, 0.0]


# -- the step-time curves under the heatmap ------------------------------------------------------


@pytest.fixture(scope="module")
def quantile_job(tmp_path_factory):
    """8 ranks x 120 10-s windows recording their step times' median and p95; rank 2 a long tail."""
    logdir = tmp_path_factory.mktemp("quantiles")
    write_step_quantiles(logdir, 8, 120, start=DEFAULT_START)
    return logdir


def _floats(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded), dtype="<f4")


def _curves(payload: dict, key: str) -> np.ndarray:
    return np.array([_floats(row) for row in payload["step_times"][key]])


def test_step_times_are_each_ranks_median_and_p95_in_seconds(quantile_job):
    """One window a bucket: each rank's curves are its windows' recorded median and p95, row for
    row with the heatmap, and the median rank's are the median of them."""
    snap = _store(quantile_job).snapshot()
    payload = ranks.ranks_payload(snap, RankQuery(width=1000))
    assert payload["per_bin"] == 1 and payload["bins"] == 120
    assert payload["step_times"]["recorded"] is True
    np.testing.assert_allclose(_curves(payload, "p50"), snap.grid.step_p50, rtol=1e-6)
    np.testing.assert_allclose(_curves(payload, "p95"), snap.grid.step_p95, rtol=1e-6)
    expected50 = np.array([[median_of(r, i) for i in range(120)] for r in payload["ranks"]])
    expected95 = np.array([[p95_of(r, i) for i in range(120)] for r in payload["ranks"]])
    np.testing.assert_allclose(_curves(payload, "p50"), expected50, rtol=1e-6)
    np.testing.assert_allclose(_curves(payload, "p95"), expected95, rtol=1e-6)
    typical = _floats(payload["step_times"]["typical_p50"])
    np.testing.assert_allclose(typical, np.median(expected50, axis=0), rtol=1e-6)
    tail = _curves(payload, "p95")[TAIL_RANK] / _curves(payload, "p50")[TAIL_RANK]
    assert (tail > 2.5).all()  # the long tail reads as such


def test_step_times_share_the_heatmaps_buckets(quantile_job):
    """Bucketed to a narrow plot, as many buckets as the heatmap: a rank's median is the
    step-weighted mean of its windows' medians, its p95 the largest of theirs (never averaged
    away)."""
    payload = ranks.ranks_payload(_store(quantile_job).snapshot(), RankQuery(width=40))
    per, bins = payload["per_bin"], payload["bins"]
    assert per > 1 and bins == -(-120 // per)
    p50, p95 = _curves(payload, "p50"), _curves(payload, "p95")
    assert p50.shape == p95.shape == (8, bins)
    for row, rank in enumerate(payload["ranks"]):
        for b in range(bins):
            windows = range(b * per, min(120, (b + 1) * per))
            mean = np.mean([median_of(rank, i) for i in windows])  # equal steps in each
            assert p50[row, b] == pytest.approx(mean, rel=1e-5)
            assert p95[row, b] == pytest.approx(max(p95_of(rank, i) for i in windows), rel=1e-6)


def test_zoomed_step_times_start_at_the_zoomed_bucket(quantile_job):
    """A request for 10 minutes in the middle gets those 60 windows' curves, no others."""
    snap = _store(quantile_job).snapshot()
    lo = snap.extent[0]
    zoomed = ranks.ranks_payload(snap, RankQuery(start=lo + 300, end=lo + 900, width=1000))
    assert zoomed["t0"] == lo + 300 and zoomed["bins"] == 60
    expected = [[median_of(r, i) for i in range(30, 90)] for r in zoomed["ranks"]]
    np.testing.assert_allclose(_curves(zoomed, "p50"), expected, rtol=1e-6)


def test_step_times_without_quantiles_are_the_window_means(slow_job):
    """A logdir recorded without quantiles: the curves are each window's mean step time, with no
    p95, and say so."""
    snap = _store(slow_job.logdir).snapshot()
    payload = ranks.ranks_payload(snap, RankQuery(width=800))
    assert payload["step_times"]["recorded"] is False
    np.testing.assert_allclose(_curves(payload, "p50"), snap.grid.step_s, rtol=1e-6)
    assert np.isnan(_curves(payload, "p95")).all()
