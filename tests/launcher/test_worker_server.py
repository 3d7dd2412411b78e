"""A worker's debug server: a capture's profile answers as a chrome trace, and a worker that
finishes its script while a profile is in flight still exits (torch's own profile handler
kept the server's shutdown, and so the worker, waiting forever)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import need

from tb_monitor.launcher import worker_server

pytestmark = [pytest.mark.torch, pytest.mark.slow]

#: A worker that starts the server, says so, and ends its script ``argv[2]`` seconds later.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    from tb_monitor.launcher import worker_server

    assert worker_server.start(sys.argv[1])
    print(worker_server.socket_path(sys.argv[1], os.getpid()), flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def _profile_of_a_worker(tmp_path, seconds: float, end_after_s: float) -> tuple[int, bytes]:
    """The worker's exit code and the profile of ``seconds`` asked of it as it started."""
    need("torch")
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path), str(end_after_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        path = worker.stdout.readline().strip()
        answer = worker_server.ask(path, worker_server.PROFILE_HANDLER, 60, duration=seconds)
        return worker.wait(timeout=60), answer
    finally:
        worker.kill()
        worker.wait()


def test_a_profile_answers_as_a_chrome_trace(tmp_path):
    """One second of profile asked: the answer is chrome-trace JSON."""
    code, answer = _profile_of_a_worker(tmp_path, 1.0, 3.0)
    assert code == 0
    assert "traceEvents" in json.loads(answer)


def test_a_worker_that_ends_during_a_profile_exits(tmp_path):
    """A 60-s profile asked, the script ends a second later: the profile is cut short and
    answered, and the worker exits (with torch's handler it waited forever)."""
    started = time.monotonic()
    code, answer = _profile_of_a_worker(tmp_path, 60.0, 1.0)
    assert code == 0 and "traceEvents" in json.loads(answer)
    assert time.monotonic() - started < 60.0
