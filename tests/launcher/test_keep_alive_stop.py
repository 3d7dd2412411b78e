"""An agent ended by a signal exits with its exit code, not by SIGABRT: its rendezvous
keep-alive thread is stopped before the interpreter finalizes (``agent_hooks.stop_keep_alives``).

A real c10d rendezvous (one node) and its handler's own keep-alive timer, in a child process;
the keep-alive is held inside the store (many calls in a row, as one caught in a slow store)
when the process exits.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import need
from ports import free_port

pytestmark = [pytest.mark.torch]

AGENT = """
    import sys, threading
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
    from tb_monitor.launcher import agent_hooks

    port, stop = int(sys.argv[1]), sys.argv[2] == "stop"
    params = RendezvousParameters(
        "c10d", f"127.0.0.1:{port}", "job", 1, 1, is_host=True, keep_alive_interval=1
    )
    backend, store = create_backend(params)
    handler = create_handler(store, backend, params)
    handler.next_rendezvous()  # its keep-alive timer now runs, a daemon thread
    in_store = threading.Event()

    def keep_alive():  # inside the store when the process exits
        in_store.set()
        for _ in range(5000):
            store.add("keep-alive", 1)

    handler._keep_alive = keep_alive
    assert in_store.wait(30)
    if stop:
        print("none in flight:", agent_hooks.stop_keep_alives([handler], wait_s=60), flush=True)
    sys.exit(1)  # as torchrun's agent ends on a signal: an uncaught exception
"""


def _agent_exit(stop: bool) -> subprocess.CompletedProcess:
    need("torch")
    args = [str(free_port()), "stop" if stop else "leave"]
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_keep_alive_left_in_the_store_aborts_the_exit():
    """Left running (as torchrun leaves it on a signal), the keep-alive thread caught in the
    store when the interpreter finalizes ends the process by SIGABRT: the race the stop ends."""
    done = _agent_exit(stop=False)
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stderr[-2000:])
    assert "terminate called without an active exception" in done.stderr


def test_stopped_keep_alives_let_the_agent_exit_with_its_code():
    """Stopped first, the keep-alive in flight finishes, and the process exits 1."""
    done = _agent_exit(stop=True)
    assert (done.returncode, done.stdout.strip()) == (1, "none in flight: True"), done.stderr
