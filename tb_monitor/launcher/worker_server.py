"""torch's per-worker debug server on a unix socket: started in each worker, asked by its agent.

PyTorch serves a worker's stacks (``dump_traceback``), its Flight Recorder (``fr_trace_json``)
and its wait counters (``wait_counter_values``) from ``torch._C._distributed_c10d._WorkerServer``,
the server ``torch.distributed.elastic.control_plane.worker_main`` starts on
``$TORCH_WORKER_SERVER_SOCKET``. Under ``tb-monitor run`` the bootstrap starts it in every worker on ``worker-<pid>.sock`` in the agent's stacks directory
(no TCP port: only the agent on the same host reaches it), and the agent asks each of its
workers with ``ask``: HTTP over the unix socket, ``POST /handler/<name>?<params>``.

The N-second ``torch.profiler`` trace is ours (``PROFILE_HANDLER``), torch's ``torch_profile``
but for its wait, which ends when the worker exits: the server's ``shutdown`` at exit waits for
the handlers in flight while holding the GIL, and torch's sleeps its seconds out in Python, so a
worker that finished its script during a capture never exited (the fault campaign's heavy data
loading, twice: the job still "running" 150 s after its last step).

The server's threads are torch's own C++ threads: the training thread does nothing for it. A
worker whose script starts the server itself (``$TORCH_WORKER_SERVER_SOCKET`` set) keeps its
own; ours is not started and the agent finds no socket.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import os
import pathlib
import socket
import tempfile
import threading
import time
import urllib.parse
from typing import Any

__all__ = ["PROFILE_HANDLER", "ask", "socket_path", "start"]

_log = logging.getLogger("tb_monitor")
#: torch's variable for the socket ``worker_main`` serves on (``control_plane``).
TORCH_SOCKET_ENV = "TORCH_WORKER_SERVER_SOCKET"
_server: Any = None  # the running server of this worker: kept alive until exit
#: The handler of a capture's profile (``_profile``), asked with ``duration`` in seconds.
PROFILE_HANDLER = "tb_monitor_profile"
#: The longest a worker's exit waits for a profile in flight to be written, once ended.
EXIT_WAIT_S = 10.0
_exiting = threading.Event()  # set at exit: a profile in flight ends at once
_in_flight: set[int] = set()  # the server threads taking a profile (set.add is atomic)


def socket_path(directory: str, pid: int) -> str:
    """The socket the worker ``pid`` serves on, in the agent's stacks ``directory``."""
    return os.path.join(directory, f"worker-{pid}.sock")


def start(directory: str | None) -> bool:
    """Start torch's worker server on this worker's socket in ``directory``; whether it runs.
    A failure (an old torch, a path too long for a socket) is one warning, never an error."""
    global _server
    if not directory or _server is not None or os.environ.get(TORCH_SOCKET_ENV):
        return _server is not None
    try:
        from torch._C._distributed_c10d import _register_handler, _WorkerServer

        _register_handler(PROFILE_HANDLER, _profile)
        path = socket_path(directory, os.getpid())
        _server = _WorkerServer(path)
    except Exception as exc:  # torch without it, or the socket cannot be bound
        _log.warning("tb_monitor: torch's worker server is not started, no captures: %s", exc)
        return False
    atexit.register(_shutdown, path)
    return True


def _profile(request: Any, response: Any) -> None:
    """``duration`` seconds of ``torch.profiler`` on every thread, as a chrome trace; cut short
    when the worker exits."""
    from torch.profiler import _ExperimentalConfig, profile

    _in_flight.add(threading.get_ident())
    try:
        every_thread = _ExperimentalConfig(profile_all_threads=True)
        with profile(record_shapes=True, experimental_config=every_thread) as taken:
            _exiting.wait(float(request.get_param("duration")))
        with tempfile.TemporaryDirectory(prefix="tb_monitor-profile") as directory:
            trace = pathlib.Path(directory, "trace.json")
            taken.export_chrome_trace(str(trace))
            response.set_content(trace.read_bytes(), "application/json")
        response.set_status(200)
    finally:
        _in_flight.discard(threading.get_ident())


def _shutdown(path: str) -> None:
    """End a profile in flight, let it be written (``EXIT_WAIT_S`` at most: this thread
    sleeps, the handler needs the GIL), then stop the server."""
    global _server
    server, _server = _server, None
    _exiting.set()
    deadline = time.monotonic() + EXIT_WAIT_S
    while _in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        if server is not None:
            server.shutdown()
    except Exception:  # at exit: nothing left to tell
        pass
    with contextlib.suppress(OSError):
        os.remove(path)


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket (the worker server listens on one)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def ask(path: str, handler: str, timeout_s: float, **params: Any) -> bytes:
    """What the worker server on ``path`` answers to ``handler`` with ``params``; an OSError
    names the handler where it cannot be reached or does not answer 200."""
    query = urllib.parse.urlencode(params)
    connection = _UnixConnection(path, timeout_s)
    try:
        connection.request("POST", f"/handler/{handler}" + (f"?{query}" if query else ""), b"")
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise OSError(f"{handler}: {exc}") from None
    finally:
        connection.close()
    if response.status != 200:
        text = body[:200].decode("utf-8", "replace").strip()
        raise OSError(f"{handler}: HTTP {response.status} {text}")
    return body
