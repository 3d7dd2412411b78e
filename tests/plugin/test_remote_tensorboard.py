"""A real TensorBoard on an s3:// logdir written by tb-monitor: Scalars and Timeline, live."""

from __future__ import annotations

import time

import pytest
from plugin_helpers import tensorboard_server, wait_for

from tb_monitor import contract
from tb_monitor.sinks import AsyncWriter
from tb_monitor.testing import generate_job

__all__ = ["tensorboard_server"]  # the fixture, imported for pytest


@pytest.mark.slow
def test_tensorboard_serves_scalars_and_every_timeline_record_from_s3(
    s3_bucket, tensorboard_server
):
    """`tensorboard --logdir s3://...` lists our scalars and the Timeline route serves every record,
    and records written while it runs appear on reload."""
    logdir = f"{s3_bucket}/jobs/exp7"
    job = generate_job(logdir, nodes=2, workers_per_node=2, restarts=1, scalars=True)
    server = tensorboard_server(logdir, "--load_fast=false", "--reload_interval=1")
    route = f"/data/plugin/{contract.PLUGIN_NAME}/timeline"
    wait_for(
        lambda: server.get_json(route)["total"] == job.total_events,
        timeout=90,
        what=f"all {job.total_events} records over s3",
    )
    tags = wait_for(lambda: server.get_json("/data/plugin/scalars/tags"), what="scalar tags")
    assert any("train/loss" in run_tags for run_tags in tags.values())

    with AsyncWriter(f"{logdir}/late") as writer:  # a new run while TensorBoard runs
        writer.add_timeline(contract.MONITOR, '{"name": "late", "timestamp": 1.0, "data": {}}', 1.0)
    wait_for(
        lambda: server.get_json(route)["total"] == job.total_events + 1,
        timeout=90,
        what="the record written after TensorBoard started",
    )


@pytest.mark.slow
def test_tensorboard_follows_a_live_run_across_sealed_segments(
    s3_bucket, tensorboard_server, monkeypatch
):
    """While a writer uploads deltas and seals them into segments (deleting the deltas),
    TensorBoard's reload keeps up with the segments: every record is served, none twice."""
    monkeypatch.setenv("TB_MONITOR_UPLOAD_SECS", "0.3")
    monkeypatch.setenv("TB_MONITOR_SEGMENT_DELTAS", "2")
    logdir = f"{s3_bucket}/live"
    route = f"/data/plugin/{contract.PLUGIN_NAME}/timeline"
    payload = '{{"name": "tick{}", "timestamp": {}.0, "data": {{}}}}'
    with AsyncWriter(f"{logdir}/rank-0", flush_secs=0.1) as writer:
        for n in range(2):  # two deltas: the first segment is sealed
            writer.add_timeline(contract.MONITOR, payload.format(n, n + 1), n + 1.0)
            writer.flush()
        server = tensorboard_server(logdir, "--load_fast=false", "--reload_interval=1")
        wait_for(lambda: server.get_json(route)["total"] == 2, timeout=90, what="the first segment")
        for n in range(2, 13):
            writer.add_timeline(contract.MONITOR, payload.format(n, n + 1), n + 1.0)
            writer.flush()  # one delta each; every second one seals a segment
            time.sleep(0.5)
    wait_for(
        lambda: server.get_json(route)["total"] == 13,
        timeout=90,
        what="all 13 records after segments replaced their deltas",
    )
    time.sleep(3)  # a few more reloads: nothing is read twice
    assert server.get_json(route)["total"] == 13
