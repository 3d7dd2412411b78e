"""SIGTERM and process exit: what tb_monitor flushes, closes and lets continue.

Each test runs a real process, since signal handlers and exit hooks are process-wide.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

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
