"""The one background thread of the process, shared by every ``AsyncWriter``.

It wakes every writer's flush interval (or early, when a queue passes its threshold or a caller
waits for room) and drains each live writer in turn. After ``fork()`` the child starts a thread
of its own for the writers it inherited.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Protocol

__all__ = ["Drainable", "service"]

_log = logging.getLogger(__name__)


class Drainable(Protocol):
    """What the service needs of a writer."""

    run_dir: str
    flush_secs: float

    def drain_now(self) -> None: ...

    def after_fork_in_child(self) -> None: ...


class _Service:
    """Drains every live writer of the process on one daemon thread."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self.wake = threading.Event()
        self._writers: list[Drainable] = []
        self._thread: threading.Thread | None = None

    def add(self, writer: Drainable) -> None:
        with self._lock:
            self._writers.append(writer)
            if self._thread is None or not self._thread.is_alive():
                self._start()
        self.wake.set()  # re-read the flush interval

    def remove(self, writer: Drainable) -> None:
        with self._lock:
            if writer in self._writers:
                self._writers.remove(writer)

    def is_current(self) -> bool:
        return self._thread is threading.current_thread()

    def is_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tb_monitor-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                writers = list(self._writers)
            interval = min((w.flush_secs for w in writers), default=None)
            self.wake.wait(interval)
            self.wake.clear()
            for writer in writers:
                try:
                    writer.drain_now()
                except Exception:  # a bug must not stop every writer of the process
                    _log.exception("tb_monitor writer for %s failed", writer.run_dir)

    def after_fork_in_child(self) -> None:
        """The child has no writer thread and copies of locks that may be held: start afresh."""
        writers = self._writers
        self._reset()
        for writer in writers:
            writer.after_fork_in_child()
        if writers:
            self._writers = writers
            self._start()


#: The process-wide service.
service = _Service()
os.register_at_fork(after_in_child=service.after_fork_in_child)
