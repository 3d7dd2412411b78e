"""Queries: request parameters validated, the store's columns filtered, windows encoded or bucketed."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from plugin_helpers import bucket_lanes, column, lanes, local_provider, small_job
from tensorboard import context as tb_context

from tb_monitor import contract, timeline
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin import query as query_module
from tb_plugin.payloads import BUCKET_PX
from tb_plugin.plugin import _Payloads
from tb_plugin.query import UnknownRunError, timeline_payload
from tb_plugin.requests import Query, RequestError
from tb_plugin.store import TimelineStore

CUSTOM = "CUSTOM_STATE"  # a state outside timeline.STATES
CUSTOM_EVENTS = 3


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A small synthetic job, plus a few events of a state the timeline model does not list."""
    job = small_job(tmp_path_factory.mktemp("logs"))
    event = RdzvEvent("custom.event", job.run_id, "custom", "node-x", 9999, "INIT", local_id=0)
    record = {**json.loads(event.serialize()), "node_state": CUSTOM}  # torch's enum has no such
    with AsyncWriter(f"{job.logdir}/{job.runs[0]}") as writer:
        for i in range(CUSTOM_EVENTS):
            writer.add_timeline(contract.RENDEZVOUS, json.dumps(record), job.end - 20 + i)
    return job


@pytest.fixture(scope="module")
def snap(job):
    """A snapshot of every record of the job."""
    store = TimelineStore(local_provider(job.logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    return store.snapshot()


def _total(job) -> int:
    return job.total_events + CUSTOM_EVENTS


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ({"start": "abc"}, "start"),
        ({"end": "inf"}, "end"),
        ({"start": "5", "end": "1"}, "start"),
        ({"start": "-1.7e308", "end": "1.7e308"}, "too wide"),
        ({"width": "0"}, "width"),
        ({"width": "20001"}, "width"),
        ({"width": "1e3"}, "width"),
        ({"kind": "bogus"}, "kind"),
        ({"state": "<script>"}, "state"),
        ({"q": "x" * 501}, "q"),
    ],
)
def test_parse_errors_name_the_parameter(args, name):
    """Each malformed request argument raises a RequestError whose message names it."""
    with pytest.raises(RequestError, match=name):
        Query.from_args(args)


def test_empty_arguments_are_absent():
    """Empty strings, as a browser's form sends them, mean no filter and the default window."""
    blank = {"start": "", "end": "", "run": "", "run_id": "", "kind": "", "state": "", "q": ""}
    assert Query.from_args(blank) == Query()


def test_arguments_are_parsed():
    """Numbers become floats and ints; filters keep their text."""
    args = {"start": "1.5", "end": "3", "width": "640", "kind": "worker", "state": "FAILED"}
    assert Query.from_args({**args, "q": "oom", "run": "job/r", "run_id": "job"}) == Query(
        1.5, 3.0, 640, "job/r", "job", "worker", "FAILED", "oom"
    )


def test_state_filter_keeps_only_that_state(snap):
    """state= keeps only the events in that state, whatever the letter case."""
    for state in ("FAILED", "failed"):
        data = timeline_payload(snap, Query(state=state))
        states = {data["states"][s] for s in column(data, "events", "state", "<u2")}
        assert states == {"FAILED"}
        assert data["total"] == 1


def test_unknown_state_filter_matches_nothing(snap):
    """A well-formed state name no record carries gives an empty timeline, not an error."""
    data = timeline_payload(snap, Query(state="NO_SUCH_STATE"))
    assert data["total"] == 0 and lanes(data) == [] and data["extent"] is None


def test_colours_line_up_with_states(snap):
    """colors[i] is timeline.state_color(states[i]), a state outside STATES included."""
    data = timeline_payload(snap, Query())
    assert CUSTOM in data["states"]
    assert data["colors"] == [timeline.state_color(s) for s in data["states"]]


def test_unknown_run_raises_unless_loading(snap):
    """A run filter naming no run is an error, except while records are still being read."""
    with pytest.raises(UnknownRunError, match="no/such/run"):
        timeline_payload(snap, Query(run="no/such/run"))
    loading = dataclasses.replace(snap, loading={"done": 1, "expected": 2})
    assert timeline_payload(loading, Query(run="no/such/run"))["total"] == 0


def test_default_window_pads_the_extent(snap, job):
    """Without start and end, the window is the filtered events' extent padded by 2%."""
    data = timeline_payload(snap, Query())
    lo, hi = data["extent"]
    pad = max((hi - lo) * 0.02, 0.5)
    assert data["window"] == [lo - pad, hi + pad]
    assert data["in_window"] == data["total"] == _total(job)


def test_the_extent_is_the_first_and_last_shown_event_s_time(snap):
    """Unfiltered, the extent is every event's first and last time; filtered, the kept ones'."""
    t = snap.columns.t
    assert tuple(timeline_payload(snap, Query())["extent"]) == (t.min(), t.max())
    kind = contract.KINDS.index(contract.WORKER)
    workers = t[snap.columns.kind == kind]
    filtered = timeline_payload(snap, Query(kind=contract.WORKER))["extent"]
    assert tuple(filtered) == (workers.min(), workers.max()) != (t.min(), t.max())


def test_bucket_counts_add_up_to_the_events_in_the_window(snap, monkeypatch):
    """In level-of-detail mode the buckets' counts sum to the events inside the window."""
    full = timeline_payload(snap, Query())
    lo, hi = full["extent"]
    window = Query(start=lo + (hi - lo) * 0.3, end=lo + (hi - lo) * 0.7, width=300)
    events = timeline_payload(snap, window)
    assert events["mode"] == "events" and 0 < events["in_window"] < full["total"]
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 10)
    data = timeline_payload(snap, window)
    assert data["mode"] == "buckets"
    assert data["buckets"]["bins"] == 300 // BUCKET_PX
    assert int(column(data, "buckets", "n").sum()) == data["in_window"]
    assert data["in_window"] == events["in_window"]


def test_a_bucket_takes_its_most_severe_state(snap, monkeypatch):
    """A bucket shows its most alarming state; a state outside STATES ranks as RUNNING."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 0)
    data = timeline_payload(snap, Query(width=2))  # one bucket per lane
    shown, states = lanes(data), [data["states"][s] for s in column(data, "buckets", "state")]
    by_lane = {
        shown[lane]["label"]: state for lane, state in zip(bucket_lanes(data), states, strict=True)
    }
    assert by_lane["rank 6"] == "FAILED"
    assert by_lane["node-x (pid 9999)"] == "RUNNING"


@pytest.mark.parametrize("width", [2, 7, 300, 20000])
def test_per_lane_buckets_are_the_buckets_of_a_pass_over_every_event(snap, width):
    """Unfiltered buckets found by a binary search per lane and edge equal, to the event, the
    buckets of a pass over every event, windows ending on event times included."""
    cols = snap.columns
    t = np.sort(cols.t)
    lane_ids = np.unique(cols.rec_lane[cols.rec_count > 0])
    lane_ids = lane_ids[np.argsort(cols.lane_rank[lane_ids])]
    position = np.full(len(snap.lanes), -1, dtype=np.int64)
    position[lane_ids] = np.arange(len(lane_ids))
    windows = [(t[0], t[-1]), (t[len(t) // 3], t[2 * len(t) // 3]), (t[5] - 0.5, t[5] + 1e-6)]
    for start, end in windows:
        start, end = float(start), float(end)
        inside = (cols.t >= start) & (cols.t <= end)
        passed = query_module._buckets(
            cols, cols.t[inside], cols.rec[inside], position, start, end, width
        )
        searched = query_module._lane_buckets(cols, lane_ids, start, end, width)
        assert searched == passed
        assert searched["count"] > 0


def test_an_unfiltered_window_sends_exactly_the_events_inside_it(snap):
    """Found lane by lane by bisection, a window's events are those a pass over every event
    keeps (windows starting and ending on event times included), in the same order."""
    cols = snap.columns
    t = np.sort(cols.t)
    for start, end in [(t[0], t[-1]), (t[len(t) // 3], t[len(t) // 3 + 40]), (t[7], t[7])]:
        start, end = float(start), float(np.nextafter(end, np.inf) if start == end else end)
        data = timeline_payload(snap, Query(start=start, end=end))
        inside = (cols.t >= start) & (cols.t <= end)
        assert data["in_window"] == int(inside.sum()) > 0
        assert column(data, "events", "id", "<u4").tolist() == cols.ids[inside].tolist()


def test_intervals_outside_the_window_are_left_out(snap):
    """Only intervals overlapping the window are sent."""
    full = timeline_payload(snap, Query())
    t0 = column(full, "intervals", "t0", "<f8")
    start = float(np.sort(t0)[-1]) + 1e-3  # after the last interval has begun
    data = timeline_payload(snap, Query(start=start, end=start + 1))
    t1 = column(data, "intervals", "t1", "<f8")
    assert data["intervals"]["count"] < full["intervals"]["count"]
    assert (t1 >= start).all()


def _served(payloads, snap, query: Query) -> dict:
    return json.loads(payloads.get(snap, query))


def _expected(snap, query: Query) -> dict:
    return json.loads(json.dumps({**timeline_payload(snap, query), "loading": snap.loading}))


def test_a_served_window_is_its_payload_with_the_frame_of_an_earlier_one(snap):
    """The plugin's JSON for a window, its lanes, facets and attempts kept from an earlier
    window of the same filters, is that window's payload."""
    payloads = _Payloads()
    lo, hi = snap.columns.extent
    _served(payloads, snap, Query())
    zoomed = Query(start=lo + (hi - lo) * 0.4, end=lo + (hi - lo) * 0.5, width=700)
    assert _served(payloads, snap, zoomed) == _expected(snap, zoomed)


def test_a_served_window_of_other_filters_has_their_frame(snap):
    """After a window without filters, one filtered by state has its own lanes and facets."""
    payloads = _Payloads()
    whole = _served(payloads, snap, Query())
    failed = Query(state="FAILED")
    served = _served(payloads, snap, failed)
    assert served == _expected(snap, failed)
    assert served["lanes"]["count"] < whole["lanes"]["count"]
