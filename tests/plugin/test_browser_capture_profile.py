"""A capture's profile opened from the Ranks view of a real Chromium in a real `tensorboard
--logdir`: the link the user clicks serves the chrome trace, and the new tab shows it."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import RanksTab, serving

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event, EventSource
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import DEFAULT_START, rank_window_scalars

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CAPTURE = "20260101-000000-abc123"
OP = "aten::addmm"


def _captured_job(logdir) -> None:
    """Two ranks' windows and one capture of both: each rank's profile (a chrome trace) and
    stacks on disk, and the agent's record naming them."""
    for rank in range(2):
        with AsyncWriter(logdir / "job" / f"rank-{rank}") as writer:
            for i in range(3):
                writer.add_scalars(rank_window_scalars(0.1, 0.01, 50), DEFAULT_START + 10 * i)
    with AsyncWriter(logdir / "job" / "agent-a-1") as writer:
        for rank in range(2):
            files = {}
            for kind, name, text in (
                ("profile", "profile.json", json.dumps({"traceEvents": [{"name": OP, "ph": "X"}]})),
                ("stacks", "stacks.txt", "Thread 0x1 (most recent call first):\n"),
            ):
                files[kind] = f"job/captures/{CAPTURE}/rank-{rank}/{name}"
                (logdir / files[kind]).parent.mkdir(parents=True, exist_ok=True)
                (logdir / files[kind]).write_text(text)
            meta = {"run_id": "job", "global_rank": rank, "pid": 70 + rank, "state": "CAPTURE"}
            meta.update(capture=CAPTURE, reason="on request", seconds=2.0)
            meta.update(files=json.dumps(files), errors="{}", message="captured")
            when = DEFAULT_START + 25
            record = Event(contract.RANK_CAPTURE, EventSource.WORKER, int(when * 1000), meta)
            writer.add_timeline(contract.WORKER, record.serialize(), when)


@pytest.fixture(scope="module")
def captured_server(tmp_path_factory):
    """TensorBoard over a logdir holding one capture of two ranks."""
    with serving(tmp_path_factory.mktemp("capture-browser"), _captured_job) as server:
        yield server


def test_a_captures_profile_opens_from_the_ranks_view(browser, captured_server):
    """Clicking rank 1's 'profile' link opens a tab showing its chrome trace, served as JSON."""
    tab = RanksTab(browser, captured_server.url)
    try:
        link = tab.frame.locator(
            ".tl-capture li[data-rank='1'] a.tl-capture-file", has_text="profile"
        )
        link.wait_for(timeout=20_000)
        with (
            tab.page.context.expect_page() as opened,
            tab.page.context.expect_event("response", lambda r: "capture?path=" in r.url) as served,
        ):
            link.click()
        profile = opened.value
        profile.wait_for_load_state()
        assert served.value.headers["content-type"].startswith("application/json")
        trace = json.loads(profile.locator("body").inner_text())
        assert trace["traceEvents"][0]["name"] == OP
        profile.close()
    finally:
        tab.close()
