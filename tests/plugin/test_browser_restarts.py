"""Acceptance (issue 12): the Timeline in a real Chromium says why a real torchrun job restarted.

The job is ``tests/torchrun_jobs.py``'s ``restarted`` (rank 2 raises a ValueError at step 3 of the
first attempt; two agents x two workers), served by a real ``tensorboard --logdir``.
"""

from __future__ import annotations

import pytest
from plugin_helpers import start_tensorboard, stop

from tb_monitor import contract

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.torch]


@pytest.fixture(scope="module")
def frame(browser, restarted, tmp_path_factory):
    """The Timeline iframe showing the restarted job, once its attempts are listed."""
    assert restarted.returncodes == [0, 0], restarted.output
    server = start_tensorboard(restarted.logdir, tmp_path_factory.mktemp("tb"))
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 850})
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server.url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        content = iframe.content_frame()
        content.wait_for_selector(".tl-attempt", timeout=60_000)
        yield content
    finally:
        page.close()
        stop(server)
    assert errors == []


def _attempts(frame) -> list[dict]:
    return frame.evaluate("() => window.tbTimeline.data.attempts")


def test_attempt_headers_show_outcome_and_duration(frame):
    """Each attempt has a header line: its number, outcome and duration."""
    lines = frame.locator(".tl-attempt .tl-attempt-head").all_inner_texts()
    assert len(lines) == 2
    assert lines[0].startswith("Attempt 0 FAILED") and lines[0].endswith(" s")
    assert lines[1].startswith("Attempt 1 SUCCEEDED")


def test_root_cause_names_rank_2_and_its_exception(frame):
    """The first attempt's root cause reads rank 2 and the ValueError's last line."""
    text = frame.locator(".tl-root-cause").inner_text()
    assert text.startswith("root cause: rank 2")
    assert text.endswith("ValueError: injected failure on rank 2 at step 3")


def test_root_cause_mark_is_on_rank_2s_lane(frame):
    """The payload places the root cause's mark on the lane of rank 2."""
    cause = _attempts(frame)[0]["root_cause"]
    label = frame.evaluate("(i) => window.tbTimeline.data.lanes[i].label", cause["lane"])
    assert label == "rank 2"


def test_other_ranks_read_as_stopped_by_restart(frame):
    """Ranks 0, 1 and 3 are listed as stopped by the restart, and their first attempts are drawn
    in the STOPPED_BY_RESTART state (in the legend too), not as failures."""
    assert frame.locator(".tl-collateral").inner_text() == "stopped by restart: ranks 0, 1, 3"
    states = frame.evaluate(
        """() => {
          const d = window.tbTimeline.data, iv = d.intervals, out = {};
          for (let i = 0; i < iv.count; i++) {
            const lane = d.lanes[iv.lane[i]];
            if (lane.kind !== "worker") continue;
            (out[lane.label] = out[lane.label] || []).push([iv.t0[i], d.states[iv.state[i]]]);
          }
          for (const k in out) out[k] = out[k].sort((a, b) => a[0] - b[0]).map((x) => x[1]);
          return out;
        }"""
    )
    for rank in (0, 1, 3):
        assert states[f"rank {rank}"][0] == "STOPPED_BY_RESTART"
    assert states["rank 2"][0] == "FAILED"
    legend = frame.locator(".tl-legend").inner_text()
    assert "STOPPED_BY_RESTART" in legend


def test_clicking_the_root_cause_shows_its_traceback(frame):
    """Clicking the root cause opens its record: a root-cause banner and the traceback."""
    frame.locator(".tl-root-cause").click()
    frame.wait_for_selector(".tl-details:not([hidden]) .tl-cause-banner", timeout=20_000)
    banner = frame.locator(".tl-cause-banner").inner_text()
    assert banner.startswith("Root cause of attempt 0") and "rank 2" in banner
    trace = frame.locator(".tl-details pre.tl-error").inner_text()
    assert "Traceback (most recent call last)" in trace
    assert "ValueError: injected failure on rank 2 at step 3" in trace
