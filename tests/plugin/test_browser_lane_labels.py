"""A lane whose host name holds a bidi override (U+202E), in a real Chromium: the host name is
isolated on its own wherever the label shows (the lane's row and title, the tooltip, the
details panel), so the "(pid 4242)" after it reads in order, never "(2424 dip)"."""

from __future__ import annotations

import os
import re

import pytest
from plugin_helpers import VISUAL_ORDER, small_job, start_tensorboard, stop

from tb_monitor import contract
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HOST = "evil\u202ehost"  # an override: shown raw, it turns everything after it around
PID = "(pid 4242)"
TOKEN = "hostilelane"  # the hostile event's message, searched for


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small job plus one rendezvous event from host ``HOST``, pid 4242, served by
    `tensorboard`."""
    root = tmp_path_factory.mktemp("lane-labels")
    job = small_job(root / "logs", nodes=2, workers_per_node=1, events=100)
    hostile = RdzvEvent("x._keep_alive", job.run_id, TOKEN, HOST, 4242, "RUNNING", local_id=0)
    with AsyncWriter(os.path.join(job.logdir, job.runs[0])) as writer:
        writer.add_timeline(contract.RENDEZVOUS, hostile.serialize(), job.end - 30)
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    yield server
    stop(server)


@pytest.fixture(scope="module")
def frame(browser, served):
    """The Timeline's frame, searched down to the hostile event (one event on one lane)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{served.url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        frame = iframe.content_frame()
        frame.wait_for_selector(".tl-summary:has-text('events')", timeout=60_000)
        frame.get_by_label("Search events").fill(TOKEN)
        summary = frame.locator(".tl-summary", has_text=re.compile(r"^1 event, 1 lane$"))
        summary.wait_for(timeout=30_000)
        yield page, frame
    finally:
        page.close()
    assert errors == []


def _row(frame):
    return frame.locator(".tl-row", has_text="evil")


def _event_spot(frame) -> dict:
    """Where the one event shown is drawn, relative to the page."""
    spot = frame.evaluate(
        """() => {
            const tl = window.tbTimeline, e = tl.data.events;
            const row = tl.rows[tl.rowOfLane[e.lane[0]]];
            return {x: tl.x(e.t[0]), y: row.y - tl.scroll.scrollTop + row.h / 2};
        }"""
    )
    box = frame.locator(".tl-plot canvas").bounding_box()
    return {"x": box["x"] + spot["x"], "y": box["y"] + spot["y"]}


def test_the_lane_s_row_reads_the_pid_after_the_host_name_in_order(frame):
    """The row shows the host name in a <bdi> of its own: "(pid 4242)" is drawn in order."""
    _, frame = frame
    row = _row(frame)
    shown = row.evaluate(VISUAL_ORDER)
    assert PID in shown, shown
    assert row.locator("bdi").evaluate("(el) => el.textContent").startswith(HOST)


def test_the_lane_s_title_isolates_the_host_name_alone(frame):
    """The row's title holds the host name between FSI and PDI, "(pid 4242)" after them."""
    _, frame = frame
    title = _row(frame).get_attribute("title")
    assert f"\u2068{HOST}\u202c\u2069 {PID}" in title, ascii(title)


def test_the_tooltip_over_the_lane_s_event_reads_the_pid_in_order(frame):
    """Hovering the event, the tooltip's line naming its lane draws "(pid 4242)" in order."""
    page, frame = frame
    spot = _event_spot(frame)
    page.mouse.move(spot["x"], spot["y"])
    line = frame.locator(".tl-tooltip span", has_text="4242")
    line.wait_for(timeout=10_000)
    shown = line.evaluate(VISUAL_ORDER)
    assert PID in shown, shown


def test_the_details_panel_reads_the_lane_s_pid_in_order(frame):
    """The details panel's lane field draws "(pid 4242)" after the host name, in order."""
    page, frame = frame
    spot = _event_spot(frame)
    page.mouse.click(spot["x"], spot["y"])
    lane = frame.locator(".tl-details dd.tl-lane")
    lane.wait_for(timeout=30_000)
    shown = lane.evaluate(VISUAL_ORDER)
    assert PID in shown, shown
