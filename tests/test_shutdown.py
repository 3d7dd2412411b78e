"""SIGTERM and process exit: what tb_monitor flushes, closes and lets continue.

Each test runs a real process, since signal handlers and exit hooks are process-wide.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tb_monitor.logdir import readers

PRELUDE = """
    import atexit, os, signal, sys, threading, time
    from datetime import timedelta
    import tb_monitor
    from tb_monitor import Aggregation, Stat
    from tb_monitor.elastic import metrics
"""


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def scalars(logdir) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for point in readers.iter_scalars(logdir):
        found.setdefault(point.tag, []).append(point.value)
    return found


def test_sigterm_with_a_python_handler_flushes_and_keeps_recording(logdir):
    """A SIGTERM the user's handler survives flushes windows and writer but closes nothing."""
    done = run(
        """
        signal.signal(signal.SIGTERM, lambda signum, frame: print("user handler", flush=True))
        mon = tb_monitor.init(sys.argv[1])
        loss = Stat("loss", [Aggregation.SUM], timedelta(hours=1))
        loss.add(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        print("flushed:", sorted(tb_monitor.read_scalars(sys.argv[1]).tag), flush=True)
        loss.add(2.0)  # the loop finishes its step after the signal
        metrics.put_metric("after", 1, "g")
        print("closed:", loss.closed, mon.writer.closed, flush=True)
        """,
        str(logdir),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "user handler",
        "flushed: ['loss.sum']",
        "closed: False False",
    ]
    assert scalars(logdir) == {"loss.sum": [1.0, 2.0], "g/after": [1.0]}


def test_sigterm_survived_flushes_a_writer_made_without_init(logdir):
    """A handler given a logdir (no init) has its records on disk after a survived SIGTERM."""
    done = run(
        """
        from tb_monitor.sinks import TensorboardEventHandler
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        handler = TensorboardEventHandler(sys.argv[1])
        tb_monitor.register_event_handler(handler)
        loss = Stat("loss", [Aggregation.MAX], timedelta(hours=1))
        loss.add(3.0)
        os.kill(os.getpid(), signal.SIGTERM)
        print("flushed:", sorted(tb_monitor.read_scalars(sys.argv[1]).tag), flush=True)
        """,
        str(logdir),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["flushed: ['loss.max']"]


def test_sigterm_during_exit_hooks_waits_for_them_then_kills(logdir):
    """A SIGTERM while the exit hooks run lets them finish, then the process dies by it."""
    done = run(
        """
        mon = tb_monitor.init(sys.argv[1])
        a = Stat("a", [Aggregation.COUNT], timedelta(hours=1)); a.add(1)
        b = Stat("b", [Aggregation.COUNT], timedelta(hours=1)); b.add(1)
        def slow(event):  # a handler doing I/O while the exit hooks run
            if "a.count" in event.data or "b.count" in event.data:
                time.sleep(0.5)
        tb_monitor.register_event_handler(slow)
        def terminate_soon():
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=terminate_soon, daemon=True).start()
        """,
        str(logdir),
    )
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert scalars(logdir) == {"a.count": [1.0], "b.count": [1.0]}


@pytest.mark.parametrize("pure_python", ["0", "1"])
def test_adds_after_the_exit_hooks_are_discarded_quietly(logdir, pure_python):
    """A Stat closed by tb_monitor at exit ignores later adds instead of raising."""
    done = run(
        """
        def late():  # registered first, so it runs after tb_monitor's exit hooks
            loss.add(5.0)
            print("late add accepted", loss.closed, flush=True)
        atexit.register(late)
        tb_monitor.init(sys.argv[1])
        loss = Stat("loss", [Aggregation.SUM], timedelta(hours=1))
        loss.add(1.0)
        """,
        str(logdir),
        TB_MONITOR_PURE_PYTHON=pure_python,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["late add accepted False"]
    assert scalars(logdir) == {"loss.sum": [1.0]}


BLOCK_IN_C = """
    import ctypes
    def block_in_c():  # as a DDP all_reduce waiting for a stopped peer: no bytecode runs
        mutex = ctypes.create_string_buffer(64)  # zeroes: PTHREAD_MUTEX_INITIALIZER
        libc = ctypes.CDLL(None)
        libc.pthread_mutex_lock(mutex)
        print("blocking", flush=True)
        libc.pthread_mutex_lock(mutex)  # relocked: waits forever, without the GIL
"""


def start(script: str, *args: str) -> subprocess.Popen:
    source = textwrap.dedent(PRELUDE) + textwrap.dedent(BLOCK_IN_C) + textwrap.dedent(script)
    child = subprocess.Popen(
        [sys.executable, "-c", source, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "blocking\n", child.stderr.read()
    time.sleep(0.3)  # from the print to the second lock: microseconds of bytecode
    return child


def test_sigterm_ends_a_process_whose_main_thread_is_blocked_in_c(logdir):
    """A SIGTERM ends a process blocked in C at once, as without tb_monitor, its records written."""
    child = start(
        """
        tb_monitor.init(sys.argv[1])
        Stat("loss", [Aggregation.SUM], timedelta(hours=1)).add(1.0)
        block_in_c()
        """,
        str(logdir),
    )
    try:
        child.send_signal(signal.SIGTERM)
        returncode = child.wait(timeout=20)  # torchrun's grace is 30 s; before, it never ended
    finally:
        child.kill()
    assert returncode == -signal.SIGTERM, child.stderr.read()
    assert scalars(logdir) == {"loss.sum": [1.0]}


def test_sigterm_survived_flushes_while_the_main_thread_is_blocked_in_c(logdir):
    """With the user's own handler, a SIGTERM flushes without the main thread, which lives on."""
    child = start(
        """
        signal.signal(signal.SIGTERM, lambda signum, frame: print("user handler", flush=True))
        tb_monitor.init(sys.argv[1])
        Stat("loss", [Aggregation.SUM], timedelta(hours=1)).add(2.0)
        block_in_c()
        """,
        str(logdir),
    )
    try:
        child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while not scalars(logdir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None  # the user's handler decides; it runs once main is back
    finally:
        child.kill()
        child.wait()
    assert scalars(logdir) == {"loss.sum": [2.0]}


def test_an_asyncio_wakeup_fd_set_before_init_keeps_working(logdir):
    """asyncio's signal handlers, which read its wakeup fd, still fire after init."""
    done = run(
        """
        import asyncio
        loop = asyncio.new_event_loop()
        loop.add_signal_handler(signal.SIGUSR1, lambda: (print("asyncio got it"), loop.stop()))
        tb_monitor.init(sys.argv[1])
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        loop.run_forever()
        loop.close()
        """,
        str(logdir),
    )
    assert (done.returncode, done.stdout) == (0, "asyncio got it\n"), done.stderr


def test_a_handler_installed_after_init_decides_even_when_it_calls_ours(logdir):
    """A later handler that calls every callable earlier one (as Lightning's) keeps the process
    alive as it would without tb_monitor, with the records flushed."""
    done = run(
        """
        mon = tb_monitor.init(sys.argv[1])
        earlier = signal.getsignal(signal.SIGTERM)
        stop = []
        def composed(signum, frame):  # Lightning's _HandlersCompose: its own, then the earlier
            stop.append(signum)
            if callable(earlier):
                earlier(signum, frame)
        signal.signal(signal.SIGTERM, composed)
        loss = Stat("loss", [Aggregation.SUM], timedelta(hours=1))
        loss.add(1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        print("alive, stop requested:", stop == [signal.SIGTERM], flush=True)
        print("flushed:", sorted(tb_monitor.read_scalars(sys.argv[1]).tag), flush=True)
        loss.add(2.0)  # the loop finishes its step, then stops on its own
        """,
        str(logdir),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["alive, stop requested: True", "flushed: ['loss.sum']"]
    assert scalars(logdir) == {"loss.sum": [1.0, 2.0]}


def test_a_sigterm_to_a_forked_child_ends_the_child_only(logdir):
    """A forked child (a DataLoader worker) dies of its SIGTERM; the parent's watcher ignores it."""
    done = run(
        """
        mon = tb_monitor.init(sys.argv[1])
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(0.01)
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        time.sleep(0.2)  # time for a wrongly woken watcher to end this process
        print("child:", os.waitstatus_to_exitcode(status), "parent alive", flush=True)
        """,
        str(logdir),
    )
    assert (done.returncode, done.stdout) == (0, "child: -15 parent alive\n"), done.stderr
