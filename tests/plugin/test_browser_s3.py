"""The Timeline tab in Chromium, under `tensorboard --logdir s3://...`, for a real torchrun job
whose logdir is in a bucket of a real S3 server (SeaweedFS)."""

from __future__ import annotations

import pytest
from plugin_helpers import start_tensorboard, stop

from tb_monitor import contract


@pytest.fixture(scope="module")
def frame(browser, restarted_on_s3, s3_server, tmp_path_factory):
    """The Timeline iframe of the s3:// job, once its two attempts are listed."""
    assert restarted_on_s3.returncodes == [0, 0], restarted_on_s3.output
    with pytest.MonkeyPatch.context() as env:  # TensorBoard's S3 reader takes these
        for name, value in s3_server.env.items():
            env.setenv(name, value)
        server = start_tensorboard(restarted_on_s3.logdir, tmp_path_factory.mktemp("tb-s3"))
    page = browser.new_page(viewport={"width": 1400, "height": 850})
    try:
        page.goto(f"{server.url}/#{contract.PLUGIN_NAME}")
        iframe = page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        content = iframe.content_frame()
        content.wait_for_function(
            "() => window.tbTimeline && window.tbTimeline.data"
            " && window.tbTimeline.data.attempts.length === 2",
            timeout=120_000,
        )
        yield content
    finally:
        page.close()
        stop(server)


@pytest.mark.slow
def test_every_lane_of_the_job_is_drawn(frame, restarted_on_s3):
    """Both agents, all four ranks and the rendezvous lanes are on the Timeline."""
    lanes = frame.evaluate("() => window.tbTimeline.data.lanes.map((l) => [l.kind, l.label])")
    kinds = [kind for kind, _ in lanes]
    assert (kinds.count("rendezvous"), kinds.count("agent"), kinds.count("worker")) == (2, 2, 4)
    assert {label for kind, label in lanes if kind == "worker"} == {f"rank {r}" for r in range(4)}


@pytest.mark.slow
def test_the_restart_and_its_root_cause_are_shown(frame):
    """Two attempt headers, the first FAILED with rank 2's ValueError as its root cause."""
    lines = frame.locator(".tl-attempt .tl-attempt-head").all_inner_texts()
    assert [line.split()[2] for line in lines] == ["FAILED", "SUCCEEDED"]
    cause = frame.locator(".tl-root-cause").inner_text()
    assert cause.startswith("root cause: rank 2") and "ValueError" in cause
