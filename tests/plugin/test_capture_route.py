"""The plugin's ``capture`` route: a capture's files served from the logdir, nothing else."""

from __future__ import annotations

import json

import pytest
from test_routes import PREFIX, App

from tb_plugin.plugin import _CAPTURE_PATH

PROFILE = "job-1/captures/20260101-000000-abc123/rank-1/profile.json"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """An app over a logdir holding one rank's capture."""
    logdir = tmp_path_factory.mktemp("captured")
    path = logdir / PROFILE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 1}]}))
    (logdir / "secret.json").write_text("{}")
    return App(logdir)


def test_a_capture_profile_is_served_as_json(app):
    """The profile comes back whole, as JSON a trace viewer loads."""
    trace = app.json(f"{PREFIX}/capture?path={PROFILE}")
    assert trace["traceEvents"][0]["name"] == "aten::mm"


@pytest.mark.parametrize(
    "path",
    [
        "secret.json",
        "job-1/captures/20260101-000000-abc123/rank-1/../../../../secret.json",
        "../etc/passwd",
        "job-1/captures/x/rank-1/other.json",
    ],
)
def test_nothing_but_capture_files_is_served(app, path):
    """A path of any other shape, a traversal included, is a 404."""
    assert app.get(f"{PREFIX}/capture?path={path}").status_code == 404


def test_the_guard_refuses_dot_components():
    """A component starting with a dot never names a capture."""
    assert not _CAPTURE_PATH.match("../captures/x/rank-1/profile.json")
