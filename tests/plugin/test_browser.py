"""The Timeline tab in a real Chromium, inside a real `tensorboard --logdir`."""

from __future__ import annotations

import os
import re

import pytest
from plugin_helpers import (
    expected_lanes,
    small_job,
    start_tensorboard,
    stop,
    wait_for,
)

from tb_monitor import contract
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NODES, WORKERS = 4, 2
XSS = "<img src=x onerror=alert(1)>"


def _write(run_dir: str, events: list[tuple[RdzvEvent, float]]) -> None:
    with AsyncWriter(run_dir) as writer:
        for event, when in events:
            writer.add_timeline(contract.RENDEZVOUS, event.serialize(), when)


def _job_with_xss(logdir):
    job = small_job(logdir, nodes=NODES, workers_per_node=WORKERS)
    hostile = RdzvEvent("hostile.event", job.run_id, XSS, "node-000", 4000, "RUNNING", local_id=0)
    _write(os.path.join(job.logdir, job.runs[0]), [(hostile, job.end - 30)])
    return job, job.total_events + 1


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A synthetic job (plus one hostile message) served by `tensorboard` for the module."""
    root = tmp_path_factory.mktemp("browser")
    job, total = _job_with_xss(root / "logs")
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    yield server, job, total
    stop(server)


class Tab:
    """The TensorBoard page with the Timeline iframe, and what the page reported."""

    def __init__(self, page, url: str):
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.goto(f"{url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        self.frame = iframe.content_frame()
        self.frame.wait_for_selector(".tl-summary:has-text('events')", timeout=60_000)

    def reload(self) -> None:
        """The Timeline's iframe loaded anew (TensorBoard's page, the costly part, is kept), in
        TensorBoard's light theme, with nothing reported yet: a fresh tab for the next test."""
        self.dialogs.clear()
        self.errors.clear()
        self.page.evaluate("document.body.classList.remove('dark-mode')")
        self.frame.goto(self.frame.url)
        self.frame.wait_for_selector(".tl-summary:has-text('events')", timeout=60_000)

    @property
    def summary(self) -> str:
        return self.frame.locator(".tl-summary").inner_text()

    def wait_summary(self, text: str) -> None:
        self.frame.locator(".tl-summary", has_text=re.compile(f"^{re.escape(text)}$")).wait_for(
            timeout=30_000
        )

    def view(self) -> dict:
        return self.frame.evaluate("() => ({...window.tbTimeline.view})")

    def click_event(self, nth: int = 0) -> int:
        """Click the nth event drawn in the current view on its mark; return its id."""
        spot = self.frame.evaluate(
            """(nth) => {
                const tl = window.tbTimeline, e = tl.data.events;
                for (let i = 0; i < e.count; i++) {
                    const row = tl.rows[tl.rowOfLane[e.lane[i]]];
                    const x = tl.x(e.t[i]), y = row.y - tl.scroll.scrollTop + row.h / 2;
                    if (x < 5 || x > tl.width - 5 || y < 0 || y > tl.height) continue;
                    if (nth-- === 0) return {x, y, id: e.id[i]};
                }
                return null;
            }""",
            nth,
        )
        assert spot is not None, "no event drawn in the view"
        box = self.frame.locator(".tl-plot canvas").bounding_box()
        self.page.mouse.click(box["x"] + spot["x"], box["y"] + spot["y"])
        return spot["id"]


@pytest.fixture(scope="module")
def opened(browser, served):
    """A 1280x800 page on the Timeline tab of the module's TensorBoard."""
    server, _, _ = served
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    yield Tab(page, server.url)
    page.close()


@pytest.fixture
def tab(opened, tmp_path):
    """The Timeline tab with its iframe loaded anew for the test; fails the test on dialogs or
    console errors."""
    opened.reload()
    yield opened
    opened.page.screenshot(path=str(tmp_path / "timeline.png"))
    assert opened.dialogs == [], opened.dialogs
    assert opened.errors == [], opened.errors


def test_lanes_are_dom_text(tab):
    """Every lane label is real DOM text: nodes, agents, ranks and the workers' runs."""
    labels = tab.frame.locator(".tl-row").all_inner_texts()
    assert len(labels) == expected_lanes(NODES, NODES * WORKERS)
    assert "node-000 (pid 4000)" in labels
    assert "agent-node-003-4291" in labels
    assert [f"rank {r}" for r in range(NODES * WORKERS)] == [
        x for x in labels if x.startswith("rank ")
    ]
    headings = tab.frame.locator(".tl-group").all_inner_texts()
    assert headings == ["job · Rendezvous", "job · Agents", "job · Workers", "job · Monitor events"]


def test_header_counts_events_and_lanes(tab, served):
    """The header reads "N events, M lanes" for the whole job."""
    _, _, total = served
    tab.wait_summary(f"{total:,} events, {expected_lanes(NODES, NODES * WORKERS)} lanes")


@pytest.mark.parametrize(
    ("control", "value", "summary"),
    [
        ("Source", "worker", lambda j: f"{_count(j, 'worker')} events, {NODES * WORKERS} lanes"),
        ("State", "FAILED", lambda j: "1 event, 1 lane"),
        ("Run", "job/rank-3", lambda j: f"{j.counts[('job/rank-3', 'monitor')]} events, 1 lane"),
        ("Job", "job", lambda j: None),
    ],
)
def test_select_filters_update_the_header(tab, served, control, value, summary):
    """Choosing a source, state, run or job narrows the events and lanes the header counts."""
    _, job, total = served
    tab.frame.get_by_label(control, exact=True).select_option(value)
    expected = summary(job) or f"{total:,} events, {expected_lanes(NODES, NODES * WORKERS)} lanes"
    tab.wait_summary(expected)


def _count(job, kind: str) -> int:
    return sum(n for (_, k), n in job.counts.items() if k == kind)


def test_free_text_search_filters(tab):
    """Typing in the search box keeps only the events whose text matches."""
    tab.frame.get_by_label("Search events").fill("OutOfMemoryError")
    tab.wait_summary("1 event, 1 lane")
    (lane,) = tab.frame.locator(".tl-row").all_inner_texts()
    assert lane.startswith("rank ")


def test_click_shows_every_field_and_the_error_trace(tab):
    """Clicking an event opens a details panel with every field and the trace in a <pre>."""
    tab.frame.get_by_label("State", exact=True).select_option("FAILED")
    tab.wait_summary("1 event, 1 lane")
    tab.click_event(0)
    details = tab.frame.locator(".tl-details")
    details.wait_for(state="visible")
    terms = details.locator("dt").all_inner_texts()
    for field in contract.FIELDS:
        if field not in ("error_trace", "metadata"):
            assert field in terms
    trace = details.locator("pre.tl-error")
    assert "Traceback (most recent call last)" in trace.inner_text()
    assert "torchelastic.worker.status.FAILED" in details.locator("h2").inner_text()


def test_hostile_message_is_shown_as_text(tab):
    """A message holding HTML shows literally in the tooltip and details, and runs nothing."""
    tab.frame.get_by_label("Search events").fill("onerror")
    tab.wait_summary("1 event, 1 lane")
    tab.click_event(0)
    details = tab.frame.locator(".tl-details")
    details.get_by_text(XSS, exact=True).wait_for()
    assert tab.frame.locator(".tl-tooltip").inner_text().count(XSS) == 1
    assert tab.frame.locator("img").count() == 0
    assert tab.dialogs == []


def test_keyboard_zooms_and_pans(tab):
    """+ zooms in around the centre, arrows pan, 0 resets to the whole job."""
    home = tab.view()
    tab.frame.locator(".tl-scroll").focus()
    tab.page.keyboard.press("+")
    zoomed = tab.view()
    assert zoomed["end"] - zoomed["start"] < (home["end"] - home["start"]) * 0.9
    tab.page.keyboard.press("ArrowRight")
    panned = tab.view()
    assert panned["start"] > zoomed["start"]
    tab.page.keyboard.press("0")
    wait_for(lambda: tab.view() == home, timeout=30, what="the reset view")


def test_wheel_zooms_around_the_cursor(tab):
    """The wheel zooms in, keeping the time under the pointer in place."""
    box = tab.frame.locator(".tl-plot canvas").bounding_box()
    x = box["x"] + box["width"] * 0.25
    tab.page.mouse.move(x, box["y"] + 40)
    before = tab.view()
    at = before["start"] + 0.25 * (before["end"] - before["start"])
    tab.page.mouse.wheel(0, -300)
    after = wait_for(lambda: (v := tab.view()) != before and v, what="a zoom")
    assert after["end"] - after["start"] < before["end"] - before["start"]
    kept = after["start"] + 0.25 * (after["end"] - after["start"])
    assert abs(kept - at) < (before["end"] - before["start"]) * 0.01


def test_follows_tensorboards_dark_mode(tab):
    """Toggling TensorBoard's dark mode switches the plugin's theme."""
    tab.page.evaluate("document.body.classList.add('dark-mode')")
    wait_for(
        lambda: tab.frame.evaluate("document.documentElement.classList.contains('dark')"),
        what="the dark theme",
    )


def test_reload_shows_new_events_keeping_zoom_and_selection(browser, tmp_path):
    """Events appended to the logdir appear on their own; zoom and the selection stay."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1)
    server = start_tensorboard(job.logdir, tmp_path, "--reload_interval=1")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        tab = Tab(page, server.url)
        tab.wait_summary(f"{job.total_events:,} events, {expected_lanes(2, 2)} lanes")
        tab.frame.locator(".tl-scroll").focus()
        tab.page.keyboard.press("+")
        view = tab.view()
        selected = tab.click_event(3)
        tab.frame.locator(".tl-details").wait_for(state="visible")
        late = RdzvEvent(
            "late.event", job.run_id, "arrived late", "node-000", 4000, "RUNNING", local_id=0
        )
        _write(os.path.join(job.logdir, job.runs[0]), [(late, job.end + i) for i in range(5)])
        tab.wait_summary(f"{job.total_events + 5:,} events, {expected_lanes(2, 2)} lanes")
        assert tab.view() == view
        assert tab.frame.evaluate("window.tbTimeline.selected") == selected
        assert tab.frame.locator(".tl-details").is_visible()
        page.screenshot(path=str(tmp_path / "timeline-reloaded.png"))
        assert tab.errors == [] and tab.dialogs == []
    finally:
        page.close()
        stop(server)


def test_a_tab_opened_before_any_event_fits_the_first_ones_when_they_come(browser, tmp_path):
    """On an empty logdir the tab keeps looking, and fits the view to a job once it arrives."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    server = start_tensorboard(logdir, tmp_path, "--reload_interval=1")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        tab = Tab(page, server.url)
        tab.wait_summary("0 events, 0 lanes")
        job = small_job(logdir, nodes=2, workers_per_node=1)
        tab.wait_summary(f"{job.total_events:,} events, {expected_lanes(2, 2)} lanes")
        view = wait_for(
            lambda: (v := tab.view())["start"] <= job.start and v["end"] >= job.end and v,
            timeout=30,
            what="the view to fit the job",
        )
        assert view["end"] - view["start"] < 2 * (job.end - job.start)
        assert tab.errors == [] and tab.dialogs == []
    finally:
        page.close()
        stop(server)
