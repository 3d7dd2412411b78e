"""The plugin's routes under hostile query strings: never a 5xx, never a traceback in the body.

Requests go through TensorBoard's real WSGI app (as ``tensorboard --load_fast=false`` builds it)
over a small synthetic job, without a server; hypothesis draws the query strings.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

import pytest
from conftest import need
from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client

from tb_monitor import contract
from tb_plugin.plugin import TimelineLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))
from plugin_helpers import small_job  # noqa: E402

try:
    need("hypothesis")  # fails in CI when missing
except pytest.skip.Exception as skipped:
    pytest.skip(str(skipped), allow_module_level=True)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PREFIX = f"/data/plugin/{contract.PLUGIN_NAME}"
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KEYS = ["start", "end", "width", "run", "run_id", "kind", "state", "q", "id", "x", ""]
HUGE = [
    "9" * 5000,
    "-" + "9" * 5000,
    "1e309",
    "-1e309",
    "1e-400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "0x10",
    "1_000",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: isdecimal, and int() accepts it
    "\uff11\uff10",  # fullwidth "10"
    "4294967296",
    "18446744073709551616",
    "-0",
    "1e308",
    "-1e308",
    " 5 ",
    "",
]
values = st.one_of(
    st.sampled_from(HUGE),
    st.text(max_size=60),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(list(contract.KINDS) + ["FAILED", "RUNNING", "rank-0", "<script>"]),
)
params = st.lists(st.tuples(st.sampled_from(KEYS) | st.text(max_size=10), values), max_size=8)


class App:
    """TensorBoard's WSGI app with the Timeline plugin on a logdir."""

    def __init__(self, logdir) -> None:
        tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), TimelineLoader()])
        tb.configure(argv=["tensorboard", "--logdir", str(logdir), "--load_fast", "false"])
        ingester = data_ingester.LocalDataIngester(tb.flags)
        multiplexer = ingester.deprecated_multiplexer
        multiplexer.AddRunsFromDirectory(str(logdir))
        multiplexer.Reload()
        wsgi = application.TensorBoardWSGIApp(
            tb.flags,
            tb.plugin_loaders,
            ingester.data_provider,
            tb.assets_zip_provider,
            multiplexer,
        )
        self.client = Client(wsgi)

    def get(self, path: str, pairs: list[tuple[str, str]] | None = None):
        """GET ``path`` with the query ``pairs`` (repeats kept, percent-encoded as UTF-8)."""
        query = urllib.parse.urlencode(pairs or [], quote_via=urllib.parse.quote)
        return self.client.get(path + ("?" + query if query else ""))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return App(small_job(tmp_path_factory.mktemp("logs"), events=300).logdir)


def _loading(response) -> bool:
    """The one 5xx a route may answer: a 503 "still loading", with when to ask again."""
    return response.status_code == 503 and "Retry-After" in response.headers


def _check(response) -> None:
    body = response.get_data(as_text=True)
    assert response.status_code < 500 or _loading(response), body[:500]
    assert "Traceback" not in body, body[:500]
    if response.mimetype == "application/json":
        json.loads(body)


@FUZZ
@given(pairs=params)
def test_timeline_route_never_fails(app, pairs):
    """Any query string on the timeline route gets a 2xx or a 4xx JSON error, never a 5xx."""
    _check(app.get(f"{PREFIX}/timeline", pairs))


@FUZZ
@given(pairs=params)
def test_event_route_never_fails(app, pairs):
    """Any query string on the event route gets a 2xx or a 4xx JSON error (or the 503 "loading"
    with Retry-After), never another 5xx."""
    _check(app.get(f"{PREFIX}/event", pairs))


@FUZZ
@given(pairs=params)
def test_status_route_never_fails(app, pairs):
    """Any query string on the status route answers 200."""
    response = app.get(f"{PREFIX}/status", pairs)
    _check(response)
    assert response.status_code == 200


@FUZZ
@given(pairs=params)
def test_ranks_route_never_fails(app, pairs):
    """Any query string on the ranks route (where the plugin has one) never gets a 5xx."""
    response = app.get(f"{PREFIX}/ranks", pairs)
    _check(response)


@FUZZ
@given(path=st.text(max_size=80))
def test_static_route_never_fails(app, path):
    """Any path below static/ (traversal, unicode, NUL) gets a file or a 404, never a 5xx."""
    response = app.get(f"{PREFIX}/static/" + urllib.parse.quote(path, safe="/"))
    _check(response)
    assert response.status_code in (200, 404)


@FUZZ
@given(eid=st.text(min_size=1, max_size=40), pairs=params)
def test_any_experiment_id_never_fails(app, eid, pairs):
    """Any experiment id in the URL, with any query, never makes the timeline route fail."""
    quoted = urllib.parse.quote(eid, safe="")
    _check(app.get(f"/experiment/{quoted}{PREFIX}/timeline", pairs))


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("key", ["start", "end", "width"])
def test_huge_and_odd_numbers_are_a_400_or_accepted(app, key, value):
    """Huge, non-finite or odd numerals in a window parameter are accepted or a 400 naming it."""
    response = app.get(f"{PREFIX}/timeline", [(key, value)])
    _check(response)
    if response.status_code != 200:
        assert response.status_code == 400
        assert key in json.loads(response.get_data(as_text=True))["error"]


@pytest.mark.parametrize("value", HUGE)
def test_huge_and_odd_event_ids_are_a_400_or_404(app, value):
    """A huge or odd event id is a 400 naming ``id`` or a 404 (a 503 while loading), never
    another 5xx."""
    response = app.get(f"{PREFIX}/event", [("id", value)])
    _check(response)
    assert response.status_code in (400, 404) or _loading(response)


def test_repeated_parameters_use_the_first(app):
    """A parameter given twice is read once (the first), not an error."""
    once = app.get(f"{PREFIX}/timeline", [("kind", "worker")])
    twice = app.get(f"{PREFIX}/timeline", [("kind", "worker"), ("kind", "<bad>")])
    assert once.status_code == twice.status_code == 200
    assert json.loads(once.get_data())["total"] == json.loads(twice.get_data())["total"]


def test_error_messages_are_bounded(app):
    """A 1 MB parameter is answered with a short error, not echoed back whole."""
    response = app.get(f"{PREFIX}/timeline", [("state", "x" * 1_000_000)])
    _check(response)
    assert response.status_code == 400
    assert len(response.get_data()) < 2000
