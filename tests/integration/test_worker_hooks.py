"""A torchelastic worker's own events: start, uncaught exception, SIGTERM, exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

from tb_monitor.elastic.events.api import Event
from tb_monitor.rank import worker

SCRIPT = Path(__file__).parent / "scripts" / "worker_hooks.py"
WORKER_ENV = {
    "TORCHELASTIC_RUN_ID": "job-7",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "1",
    "ROLE_NAME": "default",
    "TORCHELASTIC_RESTART_COUNT": "2",
}


def run_worker(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess, list]:
    """Run the fake worker in ``mode``; return the process and the lines it recorded."""
    out = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), mode],
        env={**os.environ, **WORKER_ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return proc, lines


def states(lines: list) -> list:
    """The state of each recorded event, and "flush" where a flush happened."""
    return [line if line == "flush" else line["metadata"]["state"] for line in lines]


def test_in_worker_needs_torchelastic_environment():
    """Only a process with torchelastic's run id and rank counts as a worker."""
    assert worker.in_worker(WORKER_ENV)
    assert not worker.in_worker({"RANK": "0"})
    assert not worker.in_worker({"TORCHELASTIC_RUN_ID": "job"})


def test_start_event_carries_the_worker_identity():
    """Installing records RUNNING with run id, ranks, role, restart count, host and pid."""
    recorded: list[Event] = []
    hooks = worker.install(recorded.append, lambda: None, environ=WORKER_ENV)
    hooks.close()
    event = recorded[0]
    assert event.name == "tb_monitor.worker.status.RUNNING"
    assert event.source.value == "WORKER" and event.timestamp > 0
    md = event.metadata
    assert (md["run_id"], md["global_rank"], md["local_rank"], md["group_rank"]) == (
        "job-7",
        3,
        1,
        1,
    )
    assert (md["restart_count"], md["role"], md["pid"]) == (2, "default", os.getpid())
    assert md["state"] == "RUNNING" and md["hostname"]


def test_close_records_success():
    """Closing the hooks normally records SUCCEEDED."""
    recorded: list[Event] = []
    worker.install(recorded.append, lambda: None, environ=WORKER_ENV).close()
    assert [e.metadata["state"] for e in recorded] == ["RUNNING", "SUCCEEDED"]


def test_close_during_an_exception_records_failure():
    """Closing the hooks while an exception propagates (a with block) records it as FAILED."""
    recorded: list[Event] = []
    hooks = worker.install(recorded.append, lambda: None, environ=WORKER_ENV)
    with pytest.raises(KeyError):
        try:
            raise KeyError("lost shard")
        finally:
            hooks.close()
    failed = recorded[-1].metadata
    assert failed["state"] == "FAILED" and "KeyError: 'lost shard'" in failed["raw_error"]


def test_close_restores_excepthook():
    """close() puts back the excepthook that was there before."""
    before = sys.excepthook
    worker.install(lambda e: None, lambda: None, environ=WORKER_ENV).close()
    assert sys.excepthook is before


def test_normal_exit_records_succeeded(tmp_path):
    """A worker that returns normally records RUNNING then SUCCEEDED."""
    proc, lines = run_worker(tmp_path, "exit")
    assert proc.returncode == 0, proc.stderr
    assert states(lines) == ["RUNNING", "SUCCEEDED"]


def test_uncaught_exception_is_recorded_and_flushed(tmp_path):
    """An uncaught exception is recorded FAILED with its traceback, flushed, then printed as usual."""
    proc, lines = run_worker(tmp_path, "raise")
    assert proc.returncode == 1
    assert "RuntimeError: injected failure" in proc.stderr  # the previous excepthook still ran
    assert states(lines) == ["RUNNING", "FAILED", "flush"]
    failed = lines[1]["metadata"]
    assert failed["message"] == "RuntimeError: injected failure"
    assert "Traceback" in failed["raw_error"] and "in main" in failed["raw_error"]
    assert (failed["global_rank"], failed["restart_count"]) == (3, 2)


def test_torchelastic_record_decorator_path(tmp_path):
    """A main wrapped in torchelastic's @record still records its exception, flushed."""
    need("torch")
    proc, lines = run_worker(tmp_path, "record")
    assert proc.returncode == 1
    assert states(lines) == ["RUNNING", "FAILED", "flush"]
    assert "injected failure" in lines[1]["metadata"]["raw_error"]


def test_sigterm_records_terminated_and_dies_by_the_signal(tmp_path):
    """SIGTERM (the agent stopping its workers) records TERMINATED; the process dies by SIGTERM."""
    proc, lines = run_worker(tmp_path, "sigterm")
    assert proc.returncode == -signal.SIGTERM
    assert states(lines) == ["RUNNING", "flush", "TERMINATED"]


def test_sigterm_while_blocked_in_c_records_terminated_and_dies_by_the_signal(tmp_path):
    """A worker whose main thread is blocked in C records TERMINATED and dies by SIGTERM."""
    proc, lines = run_worker(tmp_path, "sigterm-blocked")
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert states(lines) == ["RUNNING", "TERMINATED"]


def test_sys_exit_with_a_non_zero_code_records_failed(tmp_path):
    """sys.exit(3) is recorded as FAILED with exit code 3 and the stack that called it."""
    proc, lines = run_worker(tmp_path, "sys-exit-3")
    assert proc.returncode == 3, proc.stderr
    assert states(lines) == ["RUNNING", "FAILED"]
    failed = lines[1]["metadata"]
    assert failed["message"] == "SystemExit: 3" and failed["exit_code"] == 3
    assert "in main" in failed["raw_error"] and failed["raw_error"].endswith("SystemExit: 3")


def test_sys_exit_zero_records_succeeded(tmp_path):
    """sys.exit(0) is a clean end: SUCCEEDED."""
    proc, lines = run_worker(tmp_path, "sys-exit-0")
    assert proc.returncode == 0, proc.stderr
    assert states(lines) == ["RUNNING", "SUCCEEDED"]


def test_close_restores_sys_exit():
    """close() puts back the sys.exit that was there before."""
    before = sys.exit
    worker.install(lambda e: None, lambda: None, environ=WORKER_ENV).close()
    assert sys.exit is before


def test_sigterm_names_the_signal(tmp_path):
    """The TERMINATED record names the signal that ended the worker."""
    _, lines = run_worker(tmp_path, "sigterm")
    assert lines[-1]["metadata"]["signal"] == "SIGTERM"
