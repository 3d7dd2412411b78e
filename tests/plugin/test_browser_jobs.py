"""Several jobs in one logdir, in a real Chromium inside a real `tensorboard --logdir`: the
Ranks view shows the newest job (its stall named) and a picker switches to the other; past 128
ranks a hovered rank's own step times are fetched when it is hovered; a last attempt's
collateral ranks read "stopped when the job ended"."""

from __future__ import annotations

import pytest
from plugin_helpers import (
    RanksTab,
    rank_windows_server,
    small_job,
    start_tensorboard,
    stop,
)
from two_jobs import HUNG_RANK, SLOW_RANK, write_two_jobs

from tb_monitor import contract

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_jobs_server(tmp_path_factory):
    """TensorBoard over two jobs sharing run id "none" (tests/plugin/two_jobs.py)."""
    root = tmp_path_factory.mktemp("jobs-browser")
    jobs = write_two_jobs(root / "logs")
    server = start_tensorboard(jobs.logdir, root, "--reload_interval=1")
    yield server
    stop(server)


def test_the_job_picker_shows_the_second_jobs_stall_and_switches_jobs(browser, two_jobs_server):
    """Two jobs: the picker lists both, the newest is shown with rank 3 named as the one the
    job waits for; picking the first job shows its straggler, rank 1, and no stall."""
    tab = RanksTab(browser, two_jobs_server.url)
    try:
        waited = tab.frame.locator(".tl-stalled li[data-waited-for='true'] .tl-rank-link")
        waited.first.wait_for(timeout=20_000)
        assert waited.first.inner_text().startswith(f"rank {HUNG_RANK} · the job waits for it")
        picker = tab.frame.locator("select.tl-ranks-job")
        assert picker.is_visible()
        options = picker.locator("option").all_inner_texts()
        assert len(options) == 2 and all(o.startswith("none@") for o in options)
        first = picker.locator("option").first.get_attribute("value")
        assert picker.input_value() == picker.locator("option").nth(1).get_attribute("value")
        picker.select_option(first)
        tab.frame.wait_for_function(
            "(job) => window.tbRanks.data && window.tbRanks.data.job === job", arg=first
        )
        stragglers = tab.frame.locator(".tl-stragglers .tl-rank-link")
        stragglers.first.wait_for(timeout=10_000)
        assert [t.split(" ×")[0] for t in stragglers.all_inner_texts()] == [f"rank {SLOW_RANK}"]
        assert tab.frame.locator(".tl-stalled li").count() == 0
        assert picker.input_value() == first
    finally:
        tab.close()


@pytest.fixture(scope="module")
def many_ranks_server(tmp_path_factory):
    """A small job's timeline with 200 ranks' windows (past the band threshold), rank 7 slow."""
    with rank_windows_server(tmp_path_factory.mktemp("band-browser"), 200, 0.05, [7]) as server:
        yield server


def test_past_128_ranks_a_hovered_ranks_curves_are_fetched(browser, many_ranks_server):
    """200 ranks: the band and the straggler's curves come first, no other rank's; hovering
    rank 42's row fetches its curves and draws them highlighted."""
    tab = RanksTab(browser, many_ranks_server.url)
    try:
        # The straggler is known once the job's windows are all read (a busy machine: seconds).
        tab.frame.wait_for_function(
            "() => { const v = window.tbRanks; return v?.steps?.drawn?.band &&"
            " v.steps.drawn.highlighted === 7; }",
            timeout=30_000,
        )
        first = tab.frame.evaluate(
            "() => { const v = window.tbRanks, r = v.data.ranks;"
            " return {slow: v.steps.has(r.indexOf(7)), other: v.steps.has(r.indexOf(42)),"
            " drawn: v.steps.drawn.highlighted}; }"
        )
        assert first == {"slow": True, "other": False, "drawn": 7}
        spot = tab.frame.evaluate(
            "() => { const v = window.tbRanks, row = v.data.ranks.indexOf(42); v.drawNow();"
            " return {x: v.w - 40, y: 22 + row * v.rowH() + v.rowH() / 2 - v.scroll.scrollTop}; }"
        )
        box = tab.frame.locator(".tl-ranks-scroll canvas").bounding_box()
        tab.page.mouse.move(box["x"] + spot["x"], box["y"] + spot["y"])
        tab.frame.wait_for_function(
            "() => window.tbRanks.steps.drawn.highlighted === 42 &&"
            " window.tbRanks.steps.has(window.tbRanks.data.ranks.indexOf(42))",
            timeout=10_000,
        )
    finally:
        tab.close()


@pytest.fixture(scope="module")
def failed_job_server(tmp_path_factory):
    """A 2 nodes x 2 workers job whose restart failed too: collateral ranks in both attempts."""
    root = tmp_path_factory.mktemp("failed-browser")
    job = small_job(root / "logs", nodes=2, workers_per_node=2, fail_last=True)
    server = start_tensorboard(job.logdir, root)
    yield server
    stop(server)


def test_the_last_attempts_collateral_ranks_stopped_when_the_job_ended(browser, failed_job_server):
    """The first attempt's collateral ranks read "stopped by restart", the last attempt's (no
    restart followed) "stopped when the job ended"."""
    page = browser.new_page(viewport={"width": 1400, "height": 850})
    try:
        page.goto(f"{failed_job_server.url}/#{contract.PLUGIN_NAME}")
        frame = page.wait_for_selector("iframe[src*='plugin_entry.html']").content_frame()
        frame.wait_for_selector(".tl-attempt .tl-collateral", timeout=60_000)
        lines = frame.locator(".tl-collateral").all_inner_texts()
        assert [line.split(":")[0] for line in lines] == [
            "stopped by restart",
            "stopped when the job ended",
        ]
    finally:
        page.close()
