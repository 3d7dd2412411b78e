"""A silent rank in the Ranks view of a real Chromium in a real `tensorboard --logdir`: named with
what its agent saw, and its Python stacks shown on click."""

from __future__ import annotations

import pytest
from plugin_helpers import RanksTab, serving
from test_ranks_silent import _silent_job

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def silent_server(tmp_path_factory):
    """Four ranks; rank 3 went silent, its agent saw it stopped and recorded its stacks."""
    with serving(
        tmp_path_factory.mktemp("silent-browser"), lambda logs: _silent_job(logs, True)
    ) as server:
        yield server


def test_silent_rank_stacks_open_on_click(browser, silent_server):
    """The stalled list names rank 3 as its agent saw it; clicking 'Python stacks' shows them."""
    tab = RanksTab(browser, silent_server.url)
    try:
        link = tab.frame.locator(".tl-stalled .tl-rank-link")
        link.first.wait_for(timeout=20_000)
        text = link.first.inner_text()
        assert text.startswith("rank 3 · the job waits for it") and "stopped" in text
        stacks = tab.frame.locator(".tl-stalled .tl-rank-stacks pre")
        assert not stacks.is_visible()
        tab.frame.locator(".tl-stalled .tl-rank-stacks summary").click()
        stacks.wait_for(state="visible", timeout=5_000)
        assert "line 3 in f" in stacks.inner_text()
    finally:
        tab.close()
