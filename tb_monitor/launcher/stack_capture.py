"""Every thread's stack of a worker, read from outside by py-spy, and both kinds of dump parsed.

``faulthandler`` (``rank.stacks``) needs the worker to run its signal handler: a stopped process
cannot, and it shows Python frames only. py-spy reads the process's memory from outside, so it
reads a stopped process too (``--nonblocking``: nothing is paused), and with ``--native``, which
pauses the process for a moment through ptrace, the native frames below and between the Python
ones (gloo, NCCL, a C extension, the kernel wait). It is an optional extra (``pip install
tb-monitor[stacks]``); where it is absent, or not permitted to read the process (ptrace rules),
``capture`` says so and the agent falls back to faulthandler. ``Dump`` says which was used.

Both readers' output becomes one shape: threads of frames, innermost first (``Thread``, each frame
a dict with ``name``, ``file``, ``line``, ``native``), so that the reading side groups ranks by
their main thread's frames whichever tool read them (``analysis.roll_call``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tb_monitor.analysis.roll_call import frame_line

__all__ = [
    "PY_SPY_TIMEOUT_S",
    "Dump",
    "Thread",
    "capture",
    "format_threads",
    "main_frames",
    "parse_faulthandler",
    "parse_py_spy",
    "py_spy_path",
]

#: The longest one py-spy run may take before its worker counts as not captured.
PY_SPY_TIMEOUT_S = 10.0
#: Process states py-spy must not pause (ptrace would wait on them): read without ``--native``.
_NO_PAUSE = frozenset({"T", "t", "D"})
_FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


@dataclass(frozen=True)
class Thread:
    """One thread's stack: its name or id, and its frames, innermost first."""

    name: str
    frames: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Dump:
    """A worker's stacks as captured: by which tool (``method``), as text, and its main thread's
    frames (innermost first) for grouping."""

    method: str  # "py-spy --native", "py-spy" (Python frames only), "faulthandler"
    text: str
    frames: tuple[dict[str, Any], ...]


def py_spy_path() -> str | None:
    """The py-spy executable: ``$TB_MONITOR_PY_SPY`` (``off`` for none), the one beside this
    interpreter (the extra installs it there), or the one on ``PATH``."""
    chosen = os.environ.get("TB_MONITOR_PY_SPY")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "0", "off", "none") else chosen
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def _frame(name: str, file: str, line: int, native: bool) -> dict[str, Any]:
    return {"name": name, "file": file, "line": line, "native": native}


def parse_py_spy(text: str) -> list[Thread]:
    """``py-spy dump --json``'s threads (a ValueError when it is not that)."""
    threads = []
    for thread in json.loads(text):
        name = thread.get("thread_name") or f"thread {thread.get('os_thread_id')}"
        frames = tuple(
            _frame(str(f["name"]), str(f["filename"]), int(f.get("line") or 0), bool(f["module"]))
            for f in thread.get("frames", ())
        )
        threads.append(Thread(str(name), frames))
    return threads


def parse_faulthandler(text: str) -> list[Thread]:
    """faulthandler's dump (``Thread 0x...`` / ``Current thread 0x...`` blocks of ``File "...",
    line N in NAME``, innermost first)."""
    threads: list[Thread] = []
    name, frames = None, []
    for line in text.splitlines():
        head = _FAULTHANDLER_THREAD.match(line)
        if head:
            if name is not None:
                threads.append(Thread(name, tuple(frames)))
            name, frames = f"{head.group(1)} {head.group(2)}", []
            continue
        frame = _FAULTHANDLER_FRAME.match(line)
        if frame and name is not None:
            frames.append(_frame(frame.group(3), frame.group(1), int(frame.group(2)), False))
    if name is not None:
        threads.append(Thread(name, tuple(frames)))
    return threads


def main_frames(threads: Iterable[Thread]) -> tuple[dict[str, Any], ...]:
    """The main thread's frames: py-spy's ``MainThread``, else the first thread that did not
    start in ``threading`` (the threads that did are helpers: ours, a DataLoader's, torch's)."""
    threads = list(threads)
    for thread in threads:
        if thread.name == "MainThread":
            return thread.frames
    for thread in threads:
        python = [f for f in thread.frames if not f["native"]]
        if python and not python[-1]["file"].endswith("threading.py"):
            return thread.frames
    return threads[0].frames if threads else ()


def format_threads(threads: Iterable[Thread], header: str) -> str:
    """The threads as py-spy prints them, one frame a line: ``name (file:line)``."""
    lines = [header]
    for thread in threads:
        lines.append(f"Thread {thread.name}:")
        lines.extend(f"    {frame_line(f)}" for f in thread.frames)
    return "\n".join(lines) + "\n"


def capture(
    workers: Iterable[tuple[int, str | None]],
    py_spy: str | None,
    timeout_s: float = PY_SPY_TIMEOUT_S,
) -> dict[int, Dump]:
    """Each of ``workers`` (pid, /proc state) read by py-spy, all at once; the pids it could not
    read (none without ``py_spy``, or not permitted) are absent. A running process is read with
    ``--native`` (paused for a moment), again without it where that failed; a stopped one, or one
    in the kernel, without."""
    if py_spy is None:
        return {}
    workers = list(workers)
    runs = {pid: _start(py_spy, pid, state not in _NO_PAUSE) for pid, state in workers}
    deadline = time.monotonic() + timeout_s
    out = {}
    for pid, state in workers:
        dump = _finish(runs[pid], deadline, native=state not in _NO_PAUSE)
        if dump is None and state not in _NO_PAUSE:
            dump = _finish(_start(py_spy, pid, False), deadline, native=False)
        if dump is not None:
            out[pid] = dump
    return out


def _start(py_spy: str, pid: int, native: bool) -> subprocess.Popen | None:
    command = [py_spy, "dump", "--pid", str(pid), "--json"]
    command.append("--native" if native else "--nonblocking")
    try:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
    except OSError:  # not there, or not executable
        return None


def _finish(run: subprocess.Popen | None, deadline: float, native: bool) -> Dump | None:
    """The dump ``run`` printed, or None where it failed or ran past ``deadline``."""
    if run is None:
        return None
    try:
        out, _ = run.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
        return None
    if run.returncode != 0:
        return None
    try:
        threads = parse_py_spy(out.decode("utf-8", "replace"))
    except (ValueError, KeyError, TypeError):
        return None
    method = "py-spy --native" if native else "py-spy"
    header = f"{method}: every thread, innermost frame first"
    return Dump(method, format_threads(threads, header), main_frames(threads))
