"""What a rank reads of its own CPU wait (``rank/cpu_wait.py``): the kernel's run delay of its
threads, its cgroup's throttled time, and nothing at all where neither can be read."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
from datetime import timedelta

import pytest

from tb_monitor import contract
from tb_monitor.rank.cpu_wait import CpuWait, cgroup_throttled_s
from tb_monitor.rank.health import RankHealth
from tb_monitor.testing import capture

WAIT = contract.stat_tag(contract.RANK_CPU_WAIT, "sum")
RUN = contract.stat_tag(contract.RANK_CPU_RUN, "sum")
BUSY_S = 0.6


def _linux() -> None:
    if not os.path.isdir("/proc/self/task") or not hasattr(os, "sched_setaffinity"):
        pytest.skip("run delay is read from Linux's /proc/self/task")


def _two_busy_threads_on_one_cpu(answer) -> None:
    """In a child process: two threads hashing on one CPU (each waits while the other runs:
    hashing a large block releases the GIL), read after BUSY_S while they still spin (a
    thread that has ended is no longer listed); the reading through ``answer``."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    reader = CpuWait()
    done = threading.Event()
    block = bytes(1 << 20)

    def spin() -> None:
        while not done.is_set():
            hashlib.sha256(block).digest()

    threads = [threading.Thread(target=spin) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(BUSY_S)
    reading = reader.read()
    done.set()
    for thread in threads:
        thread.join()
    answer.send(reading)


def test_threads_made_to_wait_for_a_cpu_read_as_waiting():
    """Two busy threads pinned to one CPU each wait about half the time: the read says the
    process waited a good part of BUSY_S, and ran."""
    _linux()
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_two_busy_threads_on_one_cpu, args=(theirs,)
    )
    child.start()
    try:
        first = ours.recv() if ours.poll(60) else {}
    finally:
        child.join(30)
    assert first[WAIT] > BUSY_S / 8 and first[RUN] > BUSY_S / 8, first


def test_each_read_counts_only_what_came_since_the_last():
    """Right after a read, the next one finds (almost) nothing new: deltas, not totals (a
    spinning thread is runnable throughout: running or waiting)."""
    _linux()
    reader = CpuWait()
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
    first, second = reader.read(), reader.read()
    assert first[RUN] + first[WAIT] > 0.1 and second[RUN] + second[WAIT] < 0.05


def test_no_proc_means_no_reading_and_no_error(tmp_path):
    """Where ``/proc/self/task`` is missing (not Linux), a read answers ``{}``, quietly."""
    reader = CpuWait(tasks=str(tmp_path / "absent"))
    assert reader.read() == {} and reader.read() == {}


def test_after_a_fork_the_first_read_is_a_baseline():
    """A forked child's first read counts nothing: the parent's threads are not its own."""
    _linux()
    reader = CpuWait()
    reader.forget()
    assert reader.read() == {}
    assert WAIT in reader.read()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("usage_usec 10\nnr_throttled 2\nthrottled_usec 2500000\n", 2.5),  # cgroup v2
        ("nr_periods 9\nnr_throttled 2\nthrottled_time 1500000000\n", 1.5),  # v1's cpu
        ("usage_usec 10\nuser_usec 5\n", None),  # a root cgroup: no bandwidth control
    ],
)
def test_a_cgroups_throttled_time_is_read_in_seconds(tmp_path, text, seconds):
    """cpu.stat's throttled time, in either version's unit; None where it has none."""
    path = tmp_path / "cpu.stat"
    path.write_text(text)
    assert cgroup_throttled_s(str(path)) == seconds


def test_the_recorder_logs_its_cpu_wait_with_its_windows():
    """RankHealth logs each window's CPU wait and run time with its step window (the loop
    spins: running or waiting throughout)."""
    _linux()
    pytest.importorskip("torch")
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            pass
        recorder.close()
    tags = {scalar.tag: scalar.value for scalar in captured.scalars()}
    assert tags[RUN] + tags[WAIT] > 0.05
