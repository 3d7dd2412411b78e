"""Logdirs on a real S3 server (SeaweedFS): writing, reading back live, outages, bad URLs."""

from __future__ import annotations

import logging
import re
import time

import pytest
from conftest import need

import tb_monitor
from tb_monitor.elastic import events
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.logdir import fs, readers
from tb_monitor.sinks import AsyncWriter

fsspec = need("fsspec")


@pytest.fixture
def fast_uploads(monkeypatch):
    """Uploads every 0.3 s, so a test sees live data without waiting 5 s."""
    monkeypatch.setenv("TB_MONITOR_UPLOAD_SECS", "0.3")


@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_init_writes_scalars_and_events_that_read_back_from_the_bucket(bucket, request):
    """Metrics and torchelastic events under init('s3://...') or init('gs://...') read back
    exactly."""
    need("pandas")
    logdir = f"{request.getfixturevalue(bucket)}/jobs/exp7"
    with tb_monitor.init(logdir):
        for i in range(500):
            put_metric("loss", i, "train")
        events.record(events.Event("job.started", events.EventSource.AGENT), "tensorboard")
    scalars = tb_monitor.read_scalars(logdir)
    assert scalars[scalars.tag == "train/loss"].value.tolist() == [float(i) for i in range(500)]
    assert tb_monitor.read_events(logdir).name.tolist() == ["job.started"]


def test_a_closed_writer_leaves_one_object(s3_bucket):
    """A short run's deltas are sealed into one segment object when the writer closes."""
    with AsyncWriter(f"{s3_bucket}/run") as writer:
        for i in range(100):
            writer.add_scalar("x", i)
            if i % 25 == 0:
                writer.flush()
    [path] = fs.event_files(f"{s3_bucket}/run")
    assert path.endswith(".s000000")


def test_data_is_visible_while_the_writer_is_open(s3_bucket, fast_uploads):
    """A scalar becomes readable from the bucket within seconds, before any flush or close."""
    with AsyncWriter(f"{s3_bucket}/live", flush_secs=0.2) as writer:
        writer.add_scalar("x", 1.0)
        deadline = time.monotonic() + 10
        seen = []
        while not seen and time.monotonic() < deadline:
            seen = list(readers.iter_scalars(s3_bucket))
            time.sleep(0.2)
        assert [(p.run, p.tag, p.value) for p in seen] == [("live", "x", 1.0)]


def test_steps_continue_across_restarts_on_the_bucket(s3_bucket):
    """A second writer on the same remote run continues each tag's steps."""
    run = f"{s3_bucket}/rank-0"
    for value in (1.0, 2.0):
        with AsyncWriter(run) as writer:
            writer.add_scalar("x", value)
    assert [(p.step, p.value) for p in readers.iter_scalars(run)] == [(0, 1.0), (1, 2.0)]


def test_a_restart_named_before_the_run_s_last_file_is_named_after_it_on_the_bucket(s3_bucket):
    """On a store too, a restart whose name would sort before the attempt it continues (a
    clock behind, a process id that wrapped) is named after it: its steps read in order."""
    run = f"{s3_bucket}/ahead"
    with AsyncWriter(run) as writer:
        writer.add_scalar("x", 1.0)
    filesystem, _ = fsspec.core.url_to_fs(run)
    for name in filesystem.ls(run):
        seconds = re.search(r"\.(\d{10})\.", name)[1]
        filesystem.mv(name, name.replace(seconds, str(int(seconds) + 60), 1))
    with AsyncWriter(run) as writer:
        writer.add_scalar("x", 2.0)
    assert fs.event_files(run)[-1].startswith(writer.path)
    assert [(p.step, p.value) for p in readers.iter_scalars(run)] == [(0, 1.0), (1, 2.0)]


def test_a_missing_bucket_fails_at_init_naming_it(s3_server, s3_bucket):
    """init() on a bucket that does not exist is one clear error naming the URL and bucket."""
    with pytest.raises(fs.LogdirError, match="s3://no-such-bucket-here/x.*'no-such-bucket-here'"):
        tb_monitor.init("s3://no-such-bucket-here/x")


def test_an_unknown_scheme_fails_at_init_naming_it():
    """A URL whose scheme no filesystem serves is an error naming the URL."""
    with pytest.raises(fs.LogdirError, match="nope://bucket/x.*'nope'"):
        tb_monitor.init("nope://bucket/x")


@pytest.mark.slow  # the S3 server stopped and started again: out of the fast lane
def test_an_outage_neither_blocks_the_caller_nor_loses_records(
    s3_server, s3_bucket, caplog, fast_uploads
):
    """With the store down, calls return at once; after it is back every record is there, and
    the outage was reported once."""
    caplog.set_level(logging.WARNING)
    writer = AsyncWriter(f"{s3_bucket}/outage", flush_secs=0.2)
    writer.add_scalar("x", 0)
    writer.flush()
    s3_server.stop()
    try:
        slowest = 0.0
        for i in range(1, 2001):
            start = time.perf_counter()
            writer.add_scalar("x", i)
            slowest = max(slowest, time.perf_counter() - start)
            if i % 200 == 0:
                time.sleep(0.5)  # the writer thread drains and tries to upload meanwhile
    finally:
        s3_server.start()
    writer.close()
    points = [p.value for p in readers.iter_scalars(f"{s3_bucket}/outage")]
    assert points == [float(i) for i in range(2001)]
    assert slowest < 0.5
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 1 and s3_bucket in warnings[0].getMessage()
