"""The loader lifts TensorBoard's sampling for timeline records, on both of TensorBoard's loaders."""

from __future__ import annotations

import argparse

import pytest
from plugin_helpers import small_job, tensorboard_server, wait_for

from tb_monitor import contract
from tb_plugin.plugin import TimelineLoader


def _flags(samples_per_plugin) -> argparse.Namespace:
    return argparse.Namespace(samples_per_plugin=samples_per_plugin)


__all__ = ["tensorboard_server"]  # the fixture, imported for pytest


def test_fix_flags_keeps_every_timeline_record_by_default():
    """With nothing set, samples_per_plugin gains tb_monitor_timeline=0 (keep all)."""
    flags = _flags({"images": 3})
    TimelineLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"images": 3, contract.PLUGIN_NAME: 0}


def test_fix_flags_respects_the_users_choice():
    """A number the user gave for the plugin is kept."""
    flags = _flags({contract.PLUGIN_NAME: 50})
    TimelineLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {contract.PLUGIN_NAME: 50}


def test_fix_flags_parses_a_programmatic_string():
    """samples_per_plugin set as a string (TensorBoard.configure kwargs) is parsed, then lifted."""
    flags = _flags("scalars=100, images=2")
    TimelineLoader().fix_flags(flags)
    assert flags.samples_per_plugin == {"scalars": 100, "images": 2, contract.PLUGIN_NAME: 0}


@pytest.mark.slow
@pytest.mark.parametrize("load_fast", ["false", "true"])
def test_a_real_tensorboard_serves_every_record(tmp_path, tensorboard_server, load_fast):
    """`tensorboard --load_fast=false|true` keeps every record, far above its 10/100 default."""
    job = small_job(tmp_path / "logs", nodes=2, workers_per_node=1, events=1500)
    biggest = max(job.counts.values())
    assert biggest > 500  # one tag far above both loaders' default reservoir
    server = tensorboard_server(job.logdir, f"--load_fast={load_fast}", "--reload_interval=1")
    route = f"/data/plugin/{contract.PLUGIN_NAME}/timeline"
    data = wait_for(
        lambda: (d := server.get_json(route))["total"] == job.total_events and d,
        timeout=90,
        what=f"all {job.total_events} records with --load_fast={load_fast}",
    )
    assert data["events"]["count"] == job.total_events


def test_an_s3_logdir_gives_tensorboards_s3_reader_our_deadline(monkeypatch):
    """With an ``s3://`` logdir, boto3's default session gets TB_MONITOR_REMOTE_TIMEOUT_S."""
    boto3 = pytest.importorskip("boto3")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    monkeypatch.setenv("TB_MONITOR_REMOTE_TIMEOUT_S", "3.5")
    flags = argparse.Namespace(samples_per_plugin={}, logdir="s3://bucket/job", logdir_spec="")
    TimelineLoader().fix_flags(flags)
    config = boto3.DEFAULT_SESSION._session.get_default_client_config()
    assert (config.connect_timeout, config.read_timeout) == (3.5, 3.5)
