"""A job too big to draw event by event, in a real Chromium inside a real `tensorboard --logdir`:
its level-of-detail buckets (narrowed columns) decoded, drawn and hovered."""

from __future__ import annotations

import pytest
from plugin_helpers import start_tensorboard, stop

from tb_monitor import contract
from tb_monitor.testing import generate_job
from tb_plugin.query import DETAIL_LIMIT

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A job of more events than a payload sends one by one, served by `tensorboard`."""
    root = tmp_path_factory.mktemp("buckets")
    job = generate_job(root / "logs", nodes=8, workers_per_node=2, events=DETAIL_LIMIT + 30_000)
    server = start_tensorboard(job.logdir, root)
    yield server, job
    stop(server)


@pytest.fixture
def frame(browser, served, tmp_path):
    """The Timeline's frame in a fresh page, once it shows every event; fails the test on a
    console error."""
    server, job = served
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        page.goto(f"{server.url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        frame = iframe.content_frame()
        frame.locator(".tl-summary", has_text=f"{job.total_events:,} events").wait_for(
            timeout=60_000
        )
        yield page, frame
        page.screenshot(path=str(tmp_path / "buckets.png"))
    finally:
        page.close()
    assert errors == [], errors


def test_buckets_decode_to_every_event_of_the_window(frame, served):
    """The whole job comes as buckets whose counts, read in the browser, add up to its events,
    each lane's buckets found from its first bucket's offset."""
    _, frame = frame
    _, job = served
    seen = frame.evaluate(
        """() => {
            const d = window.tbTimeline.data, b = d.buckets;
            let events = 0, ordered = true;
            for (let r = 0; r < d.lanes.length; r++)
                for (let i = d.laneStart[r] + 1; i < d.laneStart[r + 1]; i++)
                    ordered = ordered && b.bin[i - 1] < b.bin[i];
            for (const n of b.n) events += n;
            return {mode: d.mode, events, ordered, offsets: d.laneStart.length,
                    lanes: d.lanes.length, last: d.laneStart[d.lanes.length], count: b.count};
        }"""
    )
    assert seen["mode"] == "buckets" and seen["events"] == job.total_events
    assert seen["ordered"] and seen["offsets"] == seen["lanes"] + 1
    assert seen["last"] == seen["count"]


def test_hovering_a_bucket_says_how_many_events_it_holds(frame):
    """A node's bucket under the pointer shows its state, its count and that zooming in shows
    each event."""
    page, frame = frame
    spot = frame.evaluate(
        """() => {
            const tl = window.tbTimeline, d = tl.data, b = d.buckets;
            for (const row of tl.rows) {
                if (row.group || !d.lanes[row.lane].label.startsWith("node-")) continue;
                const i = d.laneStart[row.lane] + 10;
                if (i >= d.laneStart[row.lane + 1]) continue;
                const t = d.window[0] + (b.bin[i] + 0.5) * b.binWidth;
                const y = row.y - tl.scroll.scrollTop + row.h / 2;
                if (y < 0 || y > tl.height) continue;
                return {x: tl.x(t), y, n: b.n[i]};
            }
            return null;
        }"""
    )
    assert spot is not None, "no node lane's bucket drawn in the view"
    box = frame.locator(".tl-plot canvas").bounding_box()
    page.mouse.move(box["x"] + spot["x"], box["y"] + spot["y"])
    tooltip = frame.locator(".tl-tooltip")
    tooltip.get_by_text("Zoom in to see each event.").wait_for()
    assert f"{spot['n']:,} events" in tooltip.inner_text()
