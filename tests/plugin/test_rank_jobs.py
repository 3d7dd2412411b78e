"""Several jobs in one logdir in the plugin: the Ranks view scores one job's ranks at a time
(``job``, the newest by default), the Timeline draws each job on its own lanes, and past 128
ranks the step times send the band and the highlighted ranks' curves only."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from plugin_helpers import lanes
from tensorboard import context as tb_context
from test_routes import App
from two_jobs import HUNG_RANK, SLOW_RANK, write_two_jobs

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.testing import DEFAULT_START, generate_rank_windows
from tb_plugin import ranks, step_times
from tb_plugin.requests import RankQuery, RequestError
from tb_plugin.step_times import step_times_payload

RANKS_ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/ranks"
TIMELINE_ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/timeline"


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    """TensorBoard's app over two jobs sharing run id "none" (tests/plugin/two_jobs.py)."""
    return App(write_two_jobs(tmp_path_factory.mktemp("two-jobs")).logdir)


def test_the_payload_lists_the_jobs_and_shows_the_newest(two_jobs):
    """Both jobs are listed, oldest first, each with its 4 ranks; the newest is shown."""
    body = two_jobs.json(f"{RANKS_ROUTE}?width=800")
    jobs = body["jobs"]
    assert [j["job"].split("@")[0] for j in jobs] == ["none", "none"] and len(jobs) == 2
    assert jobs[0]["start"] < jobs[1]["start"] and [j["ranks"] for j in jobs] == [4, 4]
    assert body["job"] == jobs[1]["job"]


def test_the_second_jobs_stall_shows_and_the_first_jobs_straggler_does_not(two_jobs):
    """The running job's view names its stalled rank as the one waited for; rank 1, slow in the
    other job only, is no straggler here, and the markers are this job's alone."""
    body = two_jobs.json(f"{RANKS_ROUTE}?width=800")
    waited = [s["rank"] for s in body["stalls"] if s["waited_for"]]
    assert waited == [HUNG_RANK] and body["stragglers"] == []
    assert {m["label"].split(" · ")[0] for m in body["markers"]} == {body["job"]}


def test_the_job_parameter_shows_that_jobs_ranks_only(two_jobs):
    """?job=<the first>: its straggler scored among its own ranks, no stall (its ranks' last
    heartbeats are the other job's), and its own three minutes of windows."""
    first = two_jobs.json(RANKS_ROUTE)["jobs"][0]["job"]
    body = two_jobs.json(f"{RANKS_ROUTE}?width=800&job={first}")
    assert body["job"] == first and [s["rank"] for s in body["stragglers"]] == [SLOW_RANK]
    assert body["stalls"] == [] and body["extent"][1] - body["extent"][0] == 180
    assert body["recorded"] == 4 * 18


def test_an_unknown_job_is_a_400_naming_the_jobs(two_jobs):
    """A job the logdir does not hold: a 400 whose error names the value and the jobs there are."""
    error = two_jobs.json(f"{RANKS_ROUTE}?job=none@00:00:00", status=400)["error"]
    jobs = [j["job"] for j in two_jobs.json(RANKS_ROUTE)["jobs"]]
    assert "'none@00:00:00'" in error and all(job in error for job in jobs)


@pytest.mark.parametrize("raw", ["a\x00b", "x" * 301])
def test_a_job_that_is_no_job_id_is_refused_by_the_parser(raw):
    """A job id with control characters or over 300 characters is a RequestError naming it."""
    with pytest.raises(RequestError, match="job must be"):
        RankQuery.from_args({"job": raw})


def test_each_job_has_its_own_lanes(two_jobs):
    """The Timeline draws each job sharing run id "none" on its own lanes, named by the job:
    2 nodes' rendezvous and agent lanes and 4 ranks' two lanes each, per job."""
    body = two_jobs.json(f"{TIMELINE_ROUTE}?width=800")
    jobs = [j["job"] for j in two_jobs.json(RANKS_ROUTE)["jobs"]]
    groups = [lane["group"] for lane in lanes(body)]
    assert sorted(set(groups)) == jobs and [groups.count(job) for job in jobs] == [12, 12]
    assert body["facets"]["run_ids"] == ["none", *jobs]  # the run id picks both jobs


def test_a_run_id_filter_keeps_every_job_of_it(two_jobs):
    """?run_id=none shows both jobs' lanes; a job's own id shows its lanes only."""
    jobs = [j["job"] for j in two_jobs.json(RANKS_ROUTE)["jobs"]]
    both = two_jobs.json(f"{TIMELINE_ROUTE}?width=800&run_id=none")
    one = two_jobs.json(f"{TIMELINE_ROUTE}?width=800&run_id={jobs[0]}")
    assert {lane["group"] for lane in lanes(both)} == set(jobs)
    assert {lane["group"] for lane in lanes(one)} == {jobs[0]}
    assert [a["job"] for a in one["attempts"]] == [jobs[0]]


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory):
    """200 ranks (past the band threshold) x 60 windows, rank 7 computing 1.5x its peers."""
    logdir = tmp_path_factory.mktemp("many-ranks")
    generate_rank_windows(logdir, 200, 60 * 10 / 3600, slow_ranks=[7], start=DEFAULT_START)
    store = ranks.RankStore(_provider(logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    return store.snapshot()


def _provider(logdir):
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"scalars": 0})
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, str(logdir))


def _floats(encoded: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(encoded), dtype="<f4")


def test_past_128_ranks_only_the_band_and_the_highlighted_curves_are_sent(many_ranks):
    """200 ranks: the curves of the straggler and of the rank asked for come, every other rank's
    is null, and the band spans the ranks' medians bucket by bucket."""
    payload = ranks.ranks_payload(many_ranks, RankQuery(width=1000, rank=42))
    curves = payload["step_times"]
    sent = [payload["ranks"][row] for row, b in enumerate(curves["p50"]) if b is not None]
    assert sorted(sent) == [7, 42] and [s["rank"] for s in payload["stragglers"]] == [7]
    every = step_times_payload(many_ranks.grid, payload["per_bin"])  # every rank's curves
    medians = np.array([_floats(row) for row in every["p50"]])
    band = curves["band"]
    np.testing.assert_allclose(_floats(band["lo"]), medians.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(_floats(band["hi"]), medians.max(axis=0), rtol=1e-6)
    row = payload["ranks"].index(42)
    assert curves["p50"][row] == every["p50"][row] and curves["p95"][row] == every["p95"][row]
    assert curves["typical_p50"] == every["typical_p50"]


def test_the_band_payload_is_a_fraction_of_every_curve(many_ranks):
    """Past the threshold the step times weigh a few curves, not 200 ranks' two each."""
    payload = ranks.ranks_payload(many_ranks, RankQuery(width=1000))
    every = step_times_payload(many_ranks.grid, payload["per_bin"])
    assert len(json.dumps(payload["step_times"])) * 20 < len(json.dumps(every))


def test_up_to_128_ranks_every_curve_is_sent(many_ranks):
    """At the threshold (the first 128 of the ranks) every rank's curves come and no band:
    the view draws a line each."""
    grid, rows = many_ranks.grid, slice(0, step_times.BAND_RANKS)
    arrays = (grid.steps[rows], grid.step_s[rows], grid.collective_s[rows])
    part = RankGrid(grid.runs[rows], grid.window_s, grid.slot0, *arrays)
    curves = step_times_payload(part, 1, keep={7})
    assert "band" not in curves and None not in curves["p50"]
    assert len(curves["p50"]) == len(curves["p95"]) == step_times.BAND_RANKS
