"""The plugin's routes, served by a real TensorBoard WSGI app over the real data provider."""

from __future__ import annotations

import json
import pathlib
import posixpath
import re
import threading

import numpy as np
import pytest
from plugin_helpers import (
    GatedProvider,
    column,
    expected_lanes,
    lanes,
    local_provider,
    small_job,
    wait_for,
)
from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client

import tb_plugin
from tb_monitor import contract, timeline
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin import query as query_module
from tb_plugin import store as store_module
from tb_plugin.plugin import RETRY_AFTER_S, TimelineLoader, TimelinePlugin
from tb_plugin.refresher import Refresher

PREFIX = f"/data/plugin/{contract.PLUGIN_NAME}"
STATIC_DIR = pathlib.Path(tb_plugin.__file__).parent / "static"
NODES, WORKERS = 4, 2


class App:
    """TensorBoard's WSGI app on a logdir, as `tensorboard --load_fast=false` builds it."""

    def __init__(self, logdir):
        loaders = [core_plugin.CorePluginLoader(), TimelineLoader()]
        tb = program.TensorBoard(plugins=loaders)
        tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--load_fast", "false"])
        self.ingester = data_ingester.LocalDataIngester(tb.flags)
        self.logdir = str(logdir)
        self.reload()
        wsgi = application.TensorBoardWSGIApp(
            tb.flags,
            tb.plugin_loaders,
            self.ingester.data_provider,
            tb.assets_zip_provider,
            self.ingester.deprecated_multiplexer,
        )
        self.client = Client(wsgi)

    def reload(self) -> None:
        """What TensorBoard's reload thread does: pick up new runs and new records."""
        multiplexer = self.ingester.deprecated_multiplexer
        multiplexer.AddRunsFromDirectory(self.logdir)
        multiplexer.Reload()

    def get(self, route: str):
        return self.client.get(route)

    def json(self, route: str, status: int = 200) -> dict:
        response = self.get(route)
        assert response.status_code == status, response.get_data(as_text=True)[:500]
        assert response.mimetype == "application/json"
        return json.loads(response.get_data(as_text=True))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A small synthetic job with one restart (one failed attempt)."""
    return small_job(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def app(job):
    """The app over the job's logdir, shared by read-only tests."""
    return App(job.logdir)


def test_tab_is_listed_and_active(app):
    """The plugin listing shows an enabled Timeline tab loaded as an iframe ES module."""
    entry = app.json("/data/plugins_listing")[contract.PLUGIN_NAME]
    assert entry["enabled"] is True
    assert entry["tab_name"] == "Timeline"
    assert entry["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": f"{PREFIX}/static/index.js",
    }


def test_plugin_entry_imports_the_module(app):
    """TensorBoard's iframe entry page imports the plugin's index.js relative to its base."""
    html = app.get(f"/data/plugin_entry.html?name={contract.PLUGIN_NAME}").get_data(as_text=True)
    assert f'<base href="plugin/{contract.PLUGIN_NAME}/" />' in html
    assert 'import("./static/index.js")' in html


@pytest.mark.parametrize(
    ("name", "mimetype"), [("index.js", "text/javascript"), ("style.css", "text/css")]
)
def test_static_files_have_their_types(app, name, mimetype):
    """The frontend's files are served with the types browsers require for modules and styles."""
    response = app.get(f"{PREFIX}/static/{name}")
    assert response.status_code == 200
    assert response.mimetype == mimetype
    assert len(response.get_data()) > 1000


def test_every_module_the_frontend_imports_is_served(app):
    """Each ES module import, panels/ included, resolves to a file the static route serves."""
    pending, seen = ["index.js"], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        response = app.get(f"{PREFIX}/static/{name}")
        assert response.status_code == 200, name
        assert response.mimetype == "text/javascript"
        folder = posixpath.dirname(name)
        for target in re.findall(
            r'^import .* from "(\.{1,2}/[^"]+)";$', response.get_data(as_text=True), re.M
        ):
            pending.append(posixpath.normpath(posixpath.join(folder, target)))
    assert "panels/details.js" in seen


def test_frontend_defines_no_state_colours():
    """State colours reach the browser only in the payload: no colour literal in the JS files."""
    for path in STATIC_DIR.rglob("*.js"):
        assert not re.search(r"#[0-9a-fA-F]{6}\b", path.read_text()), path


@pytest.mark.parametrize(
    "path",
    [
        "../plugin.py",
        "%2e%2e/plugin.py",
        "%2E%2E%2Fplugin.py",
        "..%5cplugin.py",
        "..\\plugin.py",
        "static/../../plugin.py",
        "./index.js/../../store.py",
        "panels/../../plugin.py",
        "panels/%2e%2e/index.js",
        "panels/",
        "missing.js",
    ],
)
def test_static_route_refuses_anything_but_its_files(app, path):
    """Traversal attempts (.., %2e%2e, backslashes) and unknown names get a 404 JSON error."""
    response = app.get(f"{PREFIX}/static/{path}")
    assert response.status_code == 404
    body = response.get_data(as_text=True)
    assert "error" in json.loads(body)
    assert "import" not in body and "TimelinePlugin" not in body


def test_payload_colours_are_the_timeline_models(app):
    """Each state in the payload comes with its colour from tb_monitor.timeline.state_color."""
    data = app.json(f"{PREFIX}/timeline")
    assert data["states"][: len(timeline.STATES)] == [state.name for state in timeline.STATES]
    assert data["colors"] == [timeline.state_color(state) for state in data["states"]]


def test_timeline_holds_every_event(app, job):
    """With no flag, every record is served (TensorBoard's sampling is lifted for the plugin)."""
    data = app.json(f"{PREFIX}/timeline")
    assert data["total"] == job.total_events
    assert data["mode"] == "events"
    assert data["events"]["count"] == job.total_events
    assert len(lanes(data)) == expected_lanes(NODES, NODES * WORKERS)


def test_lanes_are_grouped_and_ordered(app, job):
    """Lanes come grouped by job, rendezvous then agents, workers and monitor, ranks in order."""
    shown = lanes(app.json(f"{PREFIX}/timeline"))
    kinds = [lane["kind"] for lane in shown]
    assert kinds == sorted(kinds, key=contract.KINDS.index)
    assert {lane["group"] for lane in shown} == {job.run_id}
    workers = [lane["label"] for lane in shown if lane["kind"] == contract.WORKER]
    assert workers == [f"rank {r}" for r in range(NODES * WORKERS)]
    nodes = [lane["label"] for lane in shown if lane["kind"] == contract.RENDEZVOUS]
    assert nodes[0].startswith("node-000 (pid ")


def test_events_are_sorted_by_lane_then_time(app):
    """The event columns come sorted by lane position, then by time within a lane."""
    data = app.json(f"{PREFIX}/timeline")
    lane = column(data, "events", "lane", "<u4")
    t = column(data, "events", "t", "<f8")
    order = np.lexsort((t, lane))
    assert (order == np.arange(len(t))).all()


def test_worker_attempts_and_rendezvous_rounds_are_intervals(app):
    """Each rank has one interval per attempt and each node one per rendezvous round."""
    data = app.json(f"{PREFIX}/timeline")
    labels = data["labels"]
    lane_of = column(data, "intervals", "lane", "<u4")
    names = [labels[i] for i in column(data, "intervals", "label", "<u4")]
    kinds = [lanes(data)[i]["kind"] for i in lane_of]
    attempts = [n for n, k in zip(names, kinds, strict=True) if k == contract.WORKER]
    rounds = [n for n, k in zip(names, kinds, strict=True) if k == contract.RENDEZVOUS]
    world = NODES * WORKERS
    assert len(attempts) == 2 * world
    assert sum(n == "attempt 1: SUCCEEDED" for n in attempts) == world
    assert sum(n.startswith("attempt 0: ") for n in attempts) == world
    assert sorted(set(rounds)) == ["round 0", "round 1"]


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("kind=worker", lambda j: sum(n for (_, k), n in j.counts.items() if k == "worker")),
        ("state=FAILED", lambda j: 1),
        ("q=outofmemoryerror", lambda j: 1),
        ("run_id=job", lambda j: j.total_events),
        ("run_id=other", lambda j: 0),
        ("run=job/rank-3", lambda j: j.counts[("job/rank-3", "monitor")]),
    ],
)
def test_filters_narrow_the_events(app, job, query, count):
    """Run, job, source, state and free-text filters count only the matching events."""
    data = app.json(f"{PREFIX}/timeline?{query}")
    assert data["total"] == count(job)
    assert data["events"]["count"] == count(job)


def test_zoomed_window_holds_only_its_events(app):
    """A start/end window returns only the events inside it, and the total of the filter."""
    full = app.json(f"{PREFIX}/timeline")
    lo, hi = full["extent"]
    start, end = lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.6
    data = app.json(f"{PREFIX}/timeline?start={start}&end={end}")
    t = column(data, "events", "t", "<f8")
    assert data["window"] == [start, end]
    assert data["total"] == full["total"]
    assert 0 < len(t) < full["total"]
    assert ((t >= start) & (t <= end)).all()


def test_too_many_events_are_bucketed(app, job, monkeypatch):
    """Above the detail limit a window comes as per-lane buckets that still count every event."""
    monkeypatch.setattr(query_module, "DETAIL_LIMIT", 50)
    data = app.json(f"{PREFIX}/timeline?width=400")
    assert data["mode"] == "buckets"
    buckets = data["buckets"]
    assert buckets["bins"] == 200
    assert int(column(data, "buckets", "n").sum()) == job.total_events
    assert column(data, "buckets", "bin").max() < 200
    states = [data["states"][s] for s in column(data, "buckets", "state")]
    assert "FAILED" in states


def test_event_details_have_every_field(app):
    """The event route returns every contract field, the error trace included, and the raw JSON."""
    data = app.json(f"{PREFIX}/timeline?state=FAILED")
    (event_id,) = column(data, "events", "id", "<u4")
    details = app.json(f"{PREFIX}/event?id={event_id}")
    assert set(details["fields"]) == set(contract.FIELDS)
    assert details["fields"]["state"] == "FAILED"
    assert "Traceback (most recent call last)" in details["fields"]["error_trace"]
    assert json.loads(details["raw"])["name"] == "torchelastic.worker.status.FAILED"


@pytest.mark.parametrize(
    ("query", "status", "names"),
    [
        ("timeline?start=abc", 400, "start"),
        ("timeline?end=nan", 400, "end"),
        ("timeline?start=5&end=1", 400, "start"),
        ("timeline?width=0", 400, "width"),
        ("timeline?width=1e3", 400, "width"),
        ("timeline?kind=bogus", 400, "kind"),
        ("timeline?state=%3Cscript%3E", 400, "state"),
        ("timeline?q=" + "x" * 600, 400, "q"),
        ("timeline?run=no/such/run", 404, "no/such/run"),
        ("event?id=abc", 400, "abc"),
        ("event?id=-1", 400, "-1"),
        ("event?id=99999999", 404, "99999999"),
        ("timeline?width=%C2%B2", 400, "width"),
        ("event?id=%C2%B2", 400, "id"),
        ("timeline?start=-1.7e308&end=1.7e308", 400, "too wide"),
    ],
)
def test_bad_parameters_get_a_json_error(app, query, status, names):
    """Malformed or unknown parameters get a 4xx JSON error naming them, never a traceback."""
    response = app.get(f"{PREFIX}/{query}")
    assert response.status_code == status
    body = response.get_data(as_text=True)
    assert names in json.loads(body)["error"]
    assert "Traceback" not in body


@pytest.mark.parametrize("query", ["start=abc", "width=0", "start=5&end=1", "end=inf"])
def test_both_views_answer_a_bad_window_with_the_same_error(app, query):
    """The timeline and ranks routes share one request parser and error path: the same 400."""
    timeline_error = app.json(f"{PREFIX}/timeline?{query}", status=400)
    assert app.json(f"{PREFIX}/ranks?{query}", status=400) == timeline_error


def test_new_records_are_appended_incrementally(tmp_path):
    """After a reload, new records appear with a new generation and old event ids unchanged."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1, events=0)
    app = App(job.logdir)
    before = app.json(f"{PREFIX}/timeline")
    run = f"{job.logdir}/{job.runs[0]}"
    event = RdzvEvent("late.event", job.run_id, "arrived later", "node-000", 4000, "RUNNING")
    with AsyncWriter(run) as writer:
        for i in range(3):
            writer.add_timeline(contract.RENDEZVOUS, event.serialize(), job.end + 10 + i)
    app.reload()
    after = wait_for(
        lambda: (d := app.json(f"{PREFIX}/timeline"))["total"] == job.total_events + 3 and d,
        timeout=30,
        what="the appended records",
    )
    assert after["generation"] > before["generation"]
    old_ids = set(column(before, "events", "id", "<u4").tolist())
    new_ids = set(column(after, "events", "id", "<u4").tolist())
    assert old_ids < new_ids
    assert new_ids - old_ids == {job.total_events, job.total_events + 1, job.total_events + 2}


def test_status_reports_the_generation(app):
    """The status route answers the generation the timeline route serves."""
    assert (
        app.json(f"{PREFIX}/status")["generation"] == app.json(f"{PREFIX}/timeline")["generation"]
    )


def test_stray_experiment_ids_do_not_pile_up_background_threads(app):
    """Requests naming many experiment ids keep at most a few decoding threads alive."""
    before = threading.active_count()
    for i in range(20):
        response = app.get(f"/experiment/x{i}{PREFIX}/status")
        assert response.status_code == 200
    # A dropped experiment's thread is told to stop; give it a moment to finish.
    wait_for(lambda: threading.active_count() - before <= 8, timeout=30, what="threads to stop")


def test_an_event_not_read_yet_is_loading_then_found(job, monkeypatch):
    """Mid-load, an existing event's id is a 503 with Retry-After; once read, the event itself."""
    monkeypatch.setattr(store_module, "CHUNK_RECORDS", 1)  # one run per read: the 2nd waits
    monkeypatch.setattr(Refresher.request, "__defaults__", (0.05,))  # requests wait 50 ms
    provider = GatedProvider(local_provider(job.logdir))
    plugin = TimelinePlugin(base_plugin.TBContext(data_provider=provider))
    event = Client(plugin.get_plugin_apps()["/event"])
    last = job.total_events - 1
    try:
        event.get(f"/event?id={last}")  # asks for a read rather than wait for the next poll
        wait_for(lambda: provider.reads > 1, what="the read to stall")
        response = event.get(f"/event?id={last}")
        assert response.status_code == 503, response.get_data(as_text=True)
        assert response.headers["Retry-After"] == str(RETRY_AFTER_S)
        assert "loading" in response.get_json()["error"]
    finally:
        provider.gate.set()
    found = wait_for(
        lambda: (r := event.get(f"/event?id={last}")).status_code == 200 and r, interval=0.05
    )
    assert found.get_json()["id"] == last


def test_an_unknown_event_is_a_404_once_loading_is_done(job, monkeypatch):
    """After the first read, an id past every event read is "not found", not "loading"."""
    monkeypatch.setattr(Refresher.request, "__defaults__", (0.05,))
    plugin = TimelinePlugin(base_plugin.TBContext(data_provider=local_provider(job.logdir)))
    event = Client(plugin.get_plugin_apps()["/event"])
    wait_for(
        lambda: event.get("/event?id=0").status_code == 200, what="the first read", interval=0.05
    )
    response = event.get(f"/event?id={job.total_events}")
    assert response.status_code == 404
    assert str(job.total_events) in response.get_json()["error"]
