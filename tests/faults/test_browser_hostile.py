"""Hostile event text in a real Chromium: HTML, control characters and a 1 MB message show as
text in the Timeline's details panel, run nothing, and do not freeze the page."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from tb_monitor import contract
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))
from plugin_helpers import chromium, small_job, start_tensorboard, stop  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HTML = (
    "hostilehtml <b>bold</b><script>window.__pwned = 1</script>"
    "<img src=x onerror=\"window.__pwned = 2; alert(1)\"><a href='javascript:alert(2)'>a</a>"
)
CONTROL = "hostilectrl a\x00b\x07c\x08d\x1b[31mred\x1b[0m\u202eevil\u200b\ufeff\r\n\tend"
BIG = "hostilebig " + ("0123456789abcdef" * 65536)  # 1 MiB and a bit
#: A page.evaluate round trip after selecting an event must come back within this (seconds).
RESPONSIVE_S = 2.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A small synthetic job plus three hostile rendezvous events, served by `tensorboard`."""
    root = tmp_path_factory.mktemp("hostile")
    job = small_job(root / "logs", nodes=2, workers_per_node=2, events=200)
    with AsyncWriter(os.path.join(job.logdir, job.runs[0])) as writer:
        for i, message in enumerate((HTML, CONTROL, BIG)):
            event = RdzvEvent(
                f"hostile.event{i}", job.run_id, message, "node-000", 4000, "RUNNING", local_id=0
            )
            writer.add_timeline(contract.RENDEZVOUS, event.serialize(), job.end - 30 + i)
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    yield server
    stop(server)


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium driven by Playwright, for the module."""
    with chromium() as launched:
        yield launched


class Tab:
    """The Timeline tab of a fresh page, recording dialogs and page errors."""

    def __init__(self, page, url: str) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.goto(f"{url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        self.frame = iframe.content_frame()
        self.frame.wait_for_selector(".tl-summary:has-text('events')", timeout=60_000)

    def select(self, token: str):
        """Search for ``token`` (one event), click its mark; the details panel, once shown."""
        self.frame.get_by_label("Search events").fill(token)
        self.frame.locator(".tl-summary", has_text=re.compile(r"^1 event, 1 lane$")).wait_for(
            timeout=30_000
        )
        spot = self.frame.evaluate(
            """() => {
                const tl = window.tbTimeline, e = tl.data.events;
                for (let i = 0; i < e.count; i++) {
                    const row = tl.rows[tl.rowOfLane[e.lane[i]]];
                    const x = tl.x(e.t[i]), y = row.y - tl.scroll.scrollTop + row.h / 2;
                    if (x >= 5 && x <= tl.width - 5 && y >= 0 && y <= tl.height) return {x, y};
                }
                return null;
            }"""
        )
        assert spot is not None, "the event is not drawn"
        box = self.frame.locator(".tl-plot canvas").bounding_box()
        self.page.mouse.click(box["x"] + spot["x"], box["y"] + spot["y"])
        details = self.frame.locator(".tl-details")
        details.wait_for(state="visible", timeout=30_000)
        return details

    def round_trip_s(self) -> float:
        """Seconds for one evaluate round trip into the frame: the page's responsiveness."""
        started = time.perf_counter()
        assert self.frame.evaluate("() => 1 + 1") == 2
        return time.perf_counter() - started

    def pwned(self):
        return self.frame.evaluate("() => window.__pwned ?? null")


@pytest.fixture
def tab(browser, served):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    tab = Tab(page, served.url)
    yield tab
    page.close()
    assert tab.dialogs == [], tab.dialogs


def _details_text(details) -> str:
    return details.evaluate("(el) => el.textContent")


def test_html_in_a_message_shows_as_text_and_runs_nothing(tab):
    """A message holding script, img and javascript: link markup is shown literally; nothing runs."""
    details = tab.select("hostilehtml")
    details.get_by_text(HTML, exact=True).wait_for(timeout=10_000)
    assert tab.frame.locator(".tl-details script, .tl-details img, .tl-details a").count() == 0
    assert tab.frame.locator("img").count() == 0
    assert tab.pwned() is None
    assert tab.dialogs == [] and tab.errors == []


def test_control_characters_in_a_message_show_as_text(tab):
    """NUL, BEL, ANSI escapes, bidi overrides and zero-width characters arrive as text, intact."""
    details = tab.select("hostilectrl")
    # Every character of the message reaches the DOM as text (the browser draws what it can).
    assert CONTROL.replace("\r\n", "\n") in _details_text(details).replace("\r\n", "\n")
    assert tab.round_trip_s() < RESPONSIVE_S
    assert tab.errors == []


def test_a_one_megabyte_message_shows_and_the_page_stays_responsive(tab):
    """Selecting an event with a 1 MB message shows it as text; the page answers within 2 s."""
    started = time.perf_counter()
    details = tab.select("hostilebig")
    shown_s = time.perf_counter() - started
    round_trip = tab.round_trip_s()
    assert round_trip < RESPONSIVE_S, f"round trip {round_trip:.2f} s"
    text = _details_text(details)
    assert "hostilebig 0123456789abcdef" in text
    assert shown_s < 30, f"details took {shown_s:.1f} s"
    # Scrolling the panel and moving the mouse over the plot stay responsive too.
    details.evaluate("(el) => el.scrollTo(0, el.scrollHeight)")
    tab.page.mouse.move(300, 300)
    assert tab.round_trip_s() < RESPONSIVE_S
    assert tab.errors == []
