"""Stacks read from outside by py-spy, faulthandler's dumps parsed, and the fallback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tb_monitor import contract
from tb_monitor.launcher import stack_capture
from tb_monitor.launcher.rank_watch import RankWatch, Worker
from tb_monitor.launcher.roll_call import StallTrigger
from tb_monitor.rank import stacks

PY_SPY_JSON = json.dumps(
    [
        {
            "thread_name": "Thread-1",
            "os_thread_id": 2,
            "frames": [{"name": "run", "filename": "/t/threading.py", "line": 9, "module": None}],
        },
        {
            "thread_name": "MainThread",
            "os_thread_id": 1,
            "frames": [
                {
                    "name": "__poll",
                    "filename": "/lib/libc.so.6",
                    "line": 0,
                    "module": "/lib/libc.so.6",
                },
                {"name": "inner", "filename": "/job/train.py", "line": 3, "module": None},
            ],
        },
    ]
)
FAULTHANDLER = textwrap.dedent(
    """\
    Thread 0x00007f0000000002 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 324 in wait
      File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

    Current thread 0x00007f0000000001 (most recent call first):
      File "/job/train.py", line 3 in inner
      File "/job/train.py", line 7 in <module>
    """
)
_WORKER = textwrap.dedent(
    """
    import sys, time
    from tb_monitor.rank import stacks
    stacks.install()
    stacks.progress_from(lambda: stacks.Progress(3, time.time() - 100.0, 0.1))
    def inner():
        print("ready", flush=True)
        time.sleep(60)
    inner()
    """
)


def test_py_spy_json_parsed_innermost_first_with_native_frames():
    """py-spy's JSON: each thread's frames innermost first, library frames marked native."""
    frames = stack_capture.main_frames(stack_capture.parse_py_spy(PY_SPY_JSON))
    assert [(f["name"], f["native"]) for f in frames] == [("__poll", True), ("inner", False)]


def test_faulthandler_dump_parsed_to_its_main_thread():
    """faulthandler's text: the thread that did not start in threading is the main one."""
    frames = stack_capture.main_frames(stack_capture.parse_faulthandler(FAULTHANDLER))
    assert [(f["name"], f["line"]) for f in frames] == [("inner", 3), ("<module>", 7)]


def test_no_py_spy_captures_nothing():
    """Without py-spy nothing is captured: the caller falls back to faulthandler."""
    assert stack_capture.capture([(os.getpid(), "R")], None) == {}


def test_py_spy_off_by_environment(monkeypatch):
    """``TB_MONITOR_PY_SPY=off`` turns py-spy off."""
    monkeypatch.setenv("TB_MONITOR_PY_SPY", "off")
    assert stack_capture.py_spy_path() is None


@pytest.fixture
def worker(tmp_path):
    env = {**os.environ, contract.STACKS_DIR_ENV: str(tmp_path), "TB_MONITOR_HEARTBEAT_S": "0.1"}
    proc = subprocess.Popen([sys.executable, "-c", _WORKER], env=env, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    yield proc
    os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait()


def _watching(tmp_path, proc, records: list, py_spy: str | None = None, **options) -> RankWatch:
    """A watch of ``proc`` (rank 1) recording into ``records``, its stall rule's floor 5 s."""
    watch = RankWatch(
        records.append,
        str(tmp_path),
        signum=stacks.stack_signal({}),
        interval_s=0.1,
        silent_after_s=30.0,
        trigger=StallTrigger(floor_s=5.0),
        py_spy=py_spy,
        **options,
    )
    watch.watch([Worker(proc.pid, rank=1, local_rank=0)])
    return watch


def _roll_call(tmp_path, proc, py_spy: str | None) -> list:
    records: list = []
    watch = _watching(tmp_path, proc, records, py_spy)
    for _ in range(50):
        watch.look()
        if any(r.metadata.get("roll_call") for r in records):
            break
        time.sleep(0.1)
    return [r.metadata for r in records if r.metadata.get("roll_call")]


def test_roll_call_falls_back_to_faulthandler_without_py_spy(tmp_path, worker):
    """Without py-spy the roll-call holds faulthandler's dump, its frames parsed, said so."""
    (meta,) = _roll_call(tmp_path, worker, None)
    assert meta["method"] == "faulthandler" and "in inner" in meta["stacks"]
    assert json.loads(meta["frames"])[0]["name"] == "inner"


@pytest.mark.skipif(stack_capture.py_spy_path() is None, reason="py-spy is not installed")
def test_roll_call_reads_a_stopped_worker_with_py_spy(tmp_path, worker):
    """A stopped worker's stacks are read by py-spy (Python frames, the process not paused)."""
    time.sleep(0.5)  # its pulse carries its progress first
    os.kill(worker.pid, signal.SIGSTOP)
    (meta,) = _roll_call(tmp_path, worker, stack_capture.py_spy_path())
    assert meta["method"] == "py-spy" and "inner" in meta["stacks"]


def test_the_watch_tells_how_long_its_workers_are_stalled(tmp_path, worker):
    """A worker whose last step was 100 s ago: each look tells ``on_stall`` about 100 s."""
    told: list[float] = []
    watch = _watching(tmp_path, worker, [], on_stall=told.append)
    for _ in range(50):
        watch.look()
        if told:
            break
        time.sleep(0.1)
    assert told and 99.0 < told[0] < 130.0
