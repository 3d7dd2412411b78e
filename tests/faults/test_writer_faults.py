"""Storage faults under a live writer: the caller never raises or stalls, losses are counted.

Each test runs a real process on real files; the faults are the operating system's own (a file
size limit standing in for a full disk, a deleted or read-only directory), or, for a stalled
store, an event file whose write blocks (the writer's I/O boundary only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tb_monitor.logdir import fs, readers
from tb_monitor.sinks import DROPPED_TAG

#: Stalls and exits are timed against bounds of a few seconds: never beside another timed test.
pytestmark = pytest.mark.timed


def _run(source: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _points(logdir) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for point in readers.iter_scalars(logdir):
        found.setdefault(point.tag, []).append(point.value)
    return found


def test_a_full_disk_warns_once_counts_drops_and_resumes_when_space_returns(tmp_path):
    """With the disk full, adds neither raise nor block; one warning names the file and error;
    once space returns writing resumes by itself and the drops are recorded."""
    script = """
        import logging, resource, signal, sys, time
        from tb_monitor.sinks.writer import AsyncWriter
        logging.basicConfig()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        writer = AsyncWriter(sys.argv[1], flush_secs=0.05)
        writer.add_scalar("before", 1.0)
        writer.flush()
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))  # disk full
        slowest = 0.0
        for i in range(20000):
            start = time.perf_counter()
            writer.add_scalar("during", float(i))
            slowest = max(slowest, time.perf_counter() - start)
        writer.flush()
        print("error:", writer.error is not None, "dropped:", writer.dropped > 0)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)  # space again
        time.sleep(1.5)  # the retry backoff
        for i in range(100):
            writer.add_scalar("after", float(i))
        writer.close()
        print("slowest add under 0.5 s:", slowest < 0.5)  # never waits on the disk
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "error: True dropped: True" in result.stdout
    assert "slowest add under 0.5 s: True" in result.stdout
    assert result.stderr.count("until writing works again") == 1
    assert "File too large" in result.stderr and str(tmp_path / "run") in result.stderr
    points = _points(tmp_path)
    assert points["before"] == [1.0]
    assert points["after"] == [float(i) for i in range(100)]
    lost = 20000 - len(points.get("during", []))
    assert lost > 0 and points[DROPPED_TAG][-1] == float(lost)


def test_a_deleted_logdir_is_recreated_and_writing_goes_on(tmp_path):
    """Deleting the run directory mid-run costs nothing after it: a new file takes the records."""
    script = """
        import logging, shutil, sys
        from tb_monitor.sinks.writer import AsyncWriter
        logging.basicConfig()
        writer = AsyncWriter(sys.argv[1])
        writer.add_scalar("x", 0.0)
        writer.flush()
        shutil.rmtree(sys.argv[1])
        for i in range(1, 11):
            writer.add_scalar("x", float(i))
        writer.close()
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "was deleted; writing to a new file" in result.stderr
    assert _points(tmp_path)["x"] == [float(i) for i in range(1, 11)]


def test_a_read_only_logdir_counts_drops_and_resumes_when_writable(tmp_path):
    """A run directory that is deleted and cannot be recreated (its parent made read-only) gives
    one warning and counted drops; once writable again, writing resumes and the drops land."""
    parent = tmp_path / "parent"
    parent.mkdir()
    script = """
        import logging, os, shutil, subprocess, sys, time
        from tb_monitor.sinks.writer import AsyncWriter
        logging.basicConfig()
        parent, run = sys.argv[1], sys.argv[1] + "/run"

        def read_only(on):
            if os.getuid() != 0:  # permissions suffice
                os.chmod(parent, 0o555 if on else 0o755)
            elif on:  # root ignores permissions: a read-only bind mount, in our own namespace
                subprocess.run(["mount", "--bind", parent, parent], check=True)
                subprocess.run(["mount", "-o", "remount,bind,ro", parent], check=True)
            else:
                subprocess.run(["umount", parent], check=True)

        writer = AsyncWriter(run, flush_secs=0.05)
        writer.add_scalar("x", 0.0)
        writer.flush()
        shutil.rmtree(run)
        read_only(True)
        for i in range(50):
            writer.add_scalar("lost", float(i))
        writer.flush()
        print("failing:", writer.error is not None)
        read_only(False)
        time.sleep(1.5)  # the retry backoff
        writer.add_scalar("x", 1.0)
        writer.close()
    """
    command = [sys.executable, "-c", textwrap.dedent(script), str(parent)]
    if os.getuid() == 0:
        command = ["unshare", "--mount", "--propagation", "private", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    assert "failing: True" in result.stdout
    assert result.stderr.count("until writing works again") == 1
    points = _points(parent)
    assert points["x"] == [1.0] and points[DROPPED_TAG] == [50.0]
    assert "lost" not in points


def test_a_stalled_store_costs_the_caller_nothing_and_loses_nothing_within_the_queue(tmp_path):
    """While the writer's write() blocks for 3 s, 20,000 adds return at once; all land after."""
    script = """
        import sys, threading, time
        from tb_monitor.sinks.writer import AsyncWriter
        writer = AsyncWriter(sys.argv[1], flush_secs=0.05)
        writer.add_scalar("x", -1.0)
        writer.flush()
        real_write, stall = writer.file.write, threading.Event()
        def slow_write(data, records):
            if not stall.is_set():
                stall.set()
                time.sleep(3)
            return real_write(data, records)
        writer.file.write = slow_write  # the I/O boundary only
        slowest = 0.0
        for i in range(20000):
            start = time.perf_counter()
            writer.add_scalar("x", float(i))
            slowest = max(slowest, time.perf_counter() - start)
        print("stalled:", stall.is_set(), "slowest add under 0.5 s:", slowest < 0.5)  # stall: 3 s
        writer.close()
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "stalled: True slowest add under 0.5 s: True" in result.stdout
    assert _points(tmp_path)["x"] == [-1.0] + [float(i) for i in range(20000)]


def test_a_stalled_store_bounds_memory_and_counts_what_it_drops(tmp_path):
    """With the store stalled and the queue full, callers wait at most STALL_S once, then
    drops are counted; the queue never holds more than max_queue records."""
    script = """
        import logging, sys, threading, time
        from tb_monitor.sinks import writer as module
        from tb_monitor.sinks.writer import AsyncWriter
        logging.basicConfig()
        writer = AsyncWriter(sys.argv[1], flush_secs=0.05, max_queue=1000)
        writer.add_scalar("x", -1.0)
        writer.flush()
        real_write, release = writer.file.write, threading.Event()
        writer.file.write = lambda data, records: (release.wait(), real_write(data, records))[1]
        longest, start_all = 0.0, time.perf_counter()
        for i in range(5000):
            start = time.perf_counter()
            writer.add_scalar("x", float(i))
            longest = max(longest, time.perf_counter() - start)
            assert len(writer._queue) <= 1000
        total = time.perf_counter() - start_all
        print("longest wait within STALL_S:", longest <= module.STALL_S + 0.5, total < 5)
        print("dropped:", writer.dropped)
        release.set()
        writer.close()
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "longest wait within STALL_S: True True" in result.stdout
    dropped = int(result.stdout.split("dropped:")[1].split()[0])
    assert dropped > 0 and result.stderr.count("has not caught up") == 1
    points = _points(tmp_path)
    assert len(points["x"]) + dropped == 5001
    assert points[DROPPED_TAG][-1] == float(dropped)


def test_exit_is_bounded_when_storage_hangs(tmp_path):
    """A process whose storage never returns from write() still exits, within CLOSE_TIMEOUT_S."""
    script = """
        import sys, threading
        from tb_monitor.sinks.writer import AsyncWriter
        writer = AsyncWriter(sys.argv[1], flush_secs=0.05)
        writer.file.write = lambda data, records: threading.Event().wait()  # hangs forever
        writer.add_scalar("x", 1.0)
        print("exiting", flush=True)
    """
    start = time.monotonic()
    result = _run(script, str(tmp_path / "run"), timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 30
    assert "gave up after" in result.stderr


def test_sigint_flushes_what_was_accepted(tmp_path):
    """Ctrl-C (KeyboardInterrupt) in the training loop still writes every accepted record."""
    script = """
        import os, signal, sys
        import tb_monitor
        from tb_monitor.elastic.metrics import put_metric
        # Ctrl-C as a terminal delivers it, even where the suite runs in the background (its
        # children then start with SIGINT ignored, and Python installs no handler).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        tb_monitor.init(sys.argv[1])
        for i in range(1000):
            put_metric("x", i, "g")
        os.kill(os.getpid(), signal.SIGINT)
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode != 0 and "KeyboardInterrupt" in result.stderr
    assert _points(tmp_path)["g/x"] == [float(i) for i in range(1000)]


def test_os_exit_loses_at_most_what_was_not_flushed(tmp_path):
    """os._exit skips every exit hook: what was flushed is on disk, nothing is corrupted."""
    script = """
        import os, sys
        from tb_monitor.sinks.writer import AsyncWriter
        writer = AsyncWriter(sys.argv[1], flush_secs=3600)
        for i in range(100):
            writer.add_scalar("x", float(i))
        writer.flush()
        for i in range(100, 200):
            writer.add_scalar("x", float(i))
        os._exit(0)
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert _points(tmp_path)["x"][:100] == [float(i) for i in range(100)]


def test_an_uncaught_exception_in_another_thread_loses_nothing(tmp_path):
    """A worker thread dying of an exception does not stop the writer; all records land."""
    script = """
        import sys, threading
        import tb_monitor
        from tb_monitor.elastic.metrics import put_metric
        with tb_monitor.init(sys.argv[1]):
            def work():
                for i in range(100):
                    put_metric("x", i, "g")
                raise RuntimeError("thread dies")
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
            put_metric("y", 1, "g")
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "RuntimeError: thread dies" in result.stderr
    points = _points(tmp_path)
    assert points["g/x"] == [float(i) for i in range(100)] and points["g/y"] == [1.0]


def test_two_processes_sharing_a_run_directory_clobber_nothing(tmp_path):
    """Two processes given the same run directory write their own files; every record reads
    back (steps may repeat across them: give each process its own run, see docs/DESIGN.md)."""
    script = """
        import sys
        from tb_monitor.sinks.writer import AsyncWriter
        with AsyncWriter(sys.argv[1]) as writer:
            for i in range(5000):
                writer.add_scalar("x", float(i))
    """
    run = str(tmp_path / "run")
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), run]) for _ in range(2)
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    assert len(fs.event_files(run)) == 2
    assert sorted(_points(tmp_path)["x"]) == sorted([float(i) for i in range(5000)] * 2)


def test_a_sigterm_during_close_waits_for_the_records_on_their_way(tmp_path):
    """The race behind a lost final failure: SIGTERM arrives while the training code's close()
    is still writing (the agent tearing the group down); the process dies only after the write,
    so the record is on disk."""
    script = """
        import os, signal, sys, threading, time
        from tb_monitor.sinks.writer import AsyncWriter
        writer = AsyncWriter(sys.argv[1], flush_secs=3600)
        real_write = writer.file.write
        def slow_write(data, records):
            time.sleep(1.0)  # storage takes a while; the SIGTERM comes meanwhile
            return real_write(data, records)
        writer.file.write = slow_write
        writer.add_scalar("final_failure", 1.0)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        writer.close()
        time.sleep(5)  # the SIGTERM ends the process before this
    """
    result = _run(script, str(tmp_path / "run"))
    assert result.returncode == -15, result.stderr
    assert _points(tmp_path)["final_failure"] == [1.0]
