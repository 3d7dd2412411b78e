"""Nothing accepted is lost when the machine is busy: a close waits while the writer moves on, and
gives up only on storage that stopped answering, saying what it lost.

Real processes on real files and a real S3 server (SeaweedFS); the CPU is kept busy by
busy-loop neighbours, as other jobs on a shared machine would. Neighbours and writers all run at
the lowest priority (``nice 19``): they starve each other, not the tests running beside them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tb_monitor import contract
from tb_monitor.logdir import readers
from tb_monitor.sinks import DROPPED_TAG, batching, writer
from tb_monitor.sinks.writer import AsyncWriter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugin"))
from busy_cpu import LOWEST, busy_neighbours  # noqa: E402
from keep_alive_writers import record_in_parallel  # noqa: E402
from plugin_helpers import refreshed_store  # noqa: E402

WRITERS, KEEP_ALIVES = 8, 128_000
#: On S3 an eighth as many: the scale is the local test's; here, that a busy close waits for
#: every upload (each recorder still fills two runs of RUN_EVENTS keep-alives).
S3_KEEP_ALIVES = 2 * batching.RUN_EVENTS


def _record_in_parallel(
    run_dirs: list[str], count: int = KEEP_ALIVES, env: dict[str, str] | None = None
) -> list[str]:
    """One recorder per run directory at once, at the lowest priority, as the busy neighbours."""
    return record_in_parallel(run_dirs, count, env, prefix=LOWEST)


@pytest.mark.slow
@pytest.mark.beside_timed  # niced, and as long as a third of the serial group
def test_busy_writers_lose_no_keep_alive_and_the_timeline_shows_them_all(tmp_path):
    """Eight processes on a saturated CPU each record 128k keep-alives and exit: every event is
    read back, and the Timeline holds every one."""
    logdir = tmp_path / "logs"
    with busy_neighbours():
        errors = _record_in_parallel([str(logdir / f"agent-{i}") for i in range(WRITERS)])
    assert not any("gave up" in error for error in errors), errors
    events = readers.read_events(logdir)
    assert len(events) == WRITERS * KEEP_ALIVES
    assert events.groupby("run").size().to_dict() == {
        f"agent-{i}": KEEP_ALIVES for i in range(WRITERS)
    }
    snapshot = refreshed_store(logdir).snapshot()
    assert len(snapshot.columns.t) == WRITERS * KEEP_ALIVES


@pytest.mark.slow
def test_busy_writers_on_s3_lose_no_keep_alive(s3_server, s3_bucket):
    """The same on a SeaweedFS bucket (16k keep-alives each): every keep-alive is in the
    bucket after the exits."""
    logdir = f"{s3_bucket}/busy"
    run_dirs = [f"{logdir}/agent-{i}" for i in range(WRITERS)]
    with busy_neighbours():
        errors = _record_in_parallel(run_dirs, S3_KEEP_ALIVES, env=s3_server.child_env())
    assert not any("gave up" in error for error in errors), errors
    assert len(readers.read_events(logdir)) == WRITERS * S3_KEEP_ALIVES


def _keep_alive(i: int) -> str:
    from tb_monitor.elastic.events.api import RdzvEvent

    name = "DynamicRendezvousHandler._keep_alive"
    return RdzvEvent(name, "job", f"beat {i}", "node-0", 4000, "RUNNING", local_id=0).serialize()


@pytest.mark.timed
def test_a_close_against_storage_that_stops_answering_gives_up_and_says_what_it_lost(
    tmp_path, monkeypatch, caplog
):
    """Storage that never returns from a write: the close gives up once nothing moved for its
    deadline, names how many records were lost and why, and counts them as dropped."""
    monkeypatch.setattr(writer, "CLOSE_TIMEOUT_S", 1.0)
    hung, answer = threading.Event(), threading.Event()
    async_writer = AsyncWriter(tmp_path / "run", flush_secs=60)
    async_writer.flush()  # the steps are known: the next drain writes at once
    async_writer.file.write = lambda data, records: (hung.set(), answer.wait())
    for i in range(10):
        async_writer.add_timeline(contract.RENDEZVOUS, _keep_alive(i), 1_700_000_000.0 + i)
    for i in range(100):
        async_writer.add_scalar("x", float(i))
    try:
        with caplog.at_level(logging.WARNING, logger="tb_monitor.sinks.writer"):
            start = time.monotonic()
            async_writer.close()
            took = time.monotonic() - start
        dropped = async_writer.dropped
    finally:
        answer.set()  # else the writer thread of this process stays stuck for later tests
    assert hung.is_set() and 1.0 <= took < 5.0
    [message] = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert "close of" in message and "with no progress (writing to storage)" in message
    assert "110 records (100 queued, 10 held in 1 open keep-alive run, 0 being written) lost" in (
        message
    ) or "110 records (0 queued, 10 held in 1 open keep-alive run, 100 being written) lost" in (
        message
    )
    assert f"counted in {DROPPED_TAG}" in message
    assert dropped == 110


@pytest.mark.timed
def test_a_flush_that_gives_up_keeps_the_records_for_later(tmp_path, monkeypatch, caplog):
    """A flush that gives up on stuck storage loses nothing: the records are written once
    storage answers again."""
    monkeypatch.setattr(writer, "CLOSE_TIMEOUT_S", 0.5)
    release = threading.Event()
    async_writer = AsyncWriter(tmp_path / "run", flush_secs=60)
    async_writer.flush()
    real_write = async_writer.file.write

    def stuck_write(data, records):
        release.wait()
        real_write(data, records)

    async_writer.file.write = stuck_write
    async_writer.add_scalar("x", 1.0)
    try:
        with caplog.at_level(logging.WARNING, logger="tb_monitor.sinks.writer"):
            async_writer.flush()
    finally:
        release.set()  # storage answers again (and no writer thread stays stuck for later tests)
    assert any("wait, written once it moves again" in r.getMessage() for r in caplog.records)
    async_writer.close()
    assert async_writer.dropped == 0
    assert [p.value for p in readers.iter_scalars(tmp_path / "run") if p.tag == "x"] == [1.0]


@pytest.mark.slow
def test_a_close_against_an_s3_server_that_stops_answering_gives_up(s3_server, s3_bucket):
    """An S3 server stopped (SIGSTOP) mid-job: the process still exits, its close giving up
    after the idle deadlines and naming what it lost."""
    script = """
        import sys, time
        from tb_monitor.logdir import eventfile
        from tb_monitor.sinks import writer
        writer.CLOSE_TIMEOUT_S = 1.0
        eventfile.FLUSH_TIMEOUT_S = eventfile.ObjectEventFile.wait_s = 2.0
        w = writer.AsyncWriter(sys.argv[1], flush_secs=60)
        w.add_scalar("before", 1.0)
        w.flush()
        print("flushed", flush=True)
        sys.stdin.readline()  # the server is stopped now
        for i in range(50):
            w.add_scalar("x", float(i))
        w.close()
        print("dropped", w.dropped, flush=True)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), f"{s3_bucket}/stuck"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=s3_server.child_env(),
    )
    server = s3_server.process
    try:
        assert proc.stdout.readline().strip() == "flushed"
        os.killpg(server.pid, signal.SIGSTOP)
        start = time.monotonic()
        out, err = proc.communicate("go\n", timeout=120)
        took = time.monotonic() - start
    finally:
        os.killpg(server.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert took < 60
    assert "did not take" in err or "gave up" in err
    assert "dropped" in out


def test_a_flood_of_distinct_keep_alives_is_written_in_bounded_runs():
    """Keep-alives that differ (a counter in the message) fill runs of at most RUN_EVENTS
    events, each written as it fills: what a close has left to encode stays bounded."""
    batcher = batching.TimelineBatcher(run_s=300.0, clock=lambda: 0.0, run_events=100)
    tag = contract.timeline_tag(contract.RENDEZVOUS)
    for i in range(250):
        batcher.add(tag, _keep_alive(i), 1_700_000_000.0 + i * 0.001)
    assert len(batcher) == 250
    assert [len(batch.times) for batch in batcher.take()] == [100, 100]
    assert [len(batch.times) for batch in batcher.take(seal=True)] == [50]


def test_a_run_is_written_once_its_distinct_payloads_reach_run_bytes():
    """A run of long distinct keep-alives is written once its payloads pass RUN_BYTES."""
    batcher = batching.TimelineBatcher(run_s=300.0, clock=lambda: 0.0, run_bytes=4096)
    tag = contract.timeline_tag(contract.RENDEZVOUS)
    sizes = []
    while not batcher.take():
        beat = _keep_alive(len(sizes))
        sizes.append(len(beat))
        batcher.add(tag, beat, 1_700_000_000.0 + len(sizes))
    assert sum(sizes) >= 4096 > sum(sizes[:-1])
    assert len(batcher) == 0
