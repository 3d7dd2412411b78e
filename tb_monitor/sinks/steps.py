"""The writer's side of continuing steps across restarts (``tb_monitor.logdir.resume``).

A new ``AsyncWriter`` must not wait for its run to be read back: ``Resolving`` finds where the
steps left off on a thread of its own, started when the writer opens its first file, and the
writer encodes nothing until it is known (its records wait in the queue). ``StepsKeeper`` then
keeps the steps file of each event file the writer opens, so that the next process reads the
run in one small request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tb_monitor.logdir import resume
from tb_monitor.logdir.resume import Resumed, StepsFile

__all__ = ["Resolving", "StepsKeeper"]

_log = logging.getLogger(__name__)

#: Longest a close waits for an object store to take the steps file's last contents.
CLOSE_S = 5.0
#: Pauses between attempts to read a run that fails to answer, before starting from step 0.
_RETRY_S = (1.0, 2.0)


class Resolving:
    """``resolve`` on a thread of its own, started at once, so a new writer's caller never waits.

    A run that cannot be read is one warning and steps from 0 (telemetry never stops training).
    ``on_done`` is called once the result is there (the writer thread is woken with it).
    """

    def __init__(
        self, run_dir: str, header_bytes: int, own: str, on_done: Callable[[], Any]
    ) -> None:
        self._args = (run_dir, header_bytes, own)
        self._on_done = on_done
        self._done = threading.Event()
        self._result = Resumed()
        threading.Thread(target=self._run, name="tb_monitor-resume", daemon=True).start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float | None) -> Resumed | None:
        """What the run holds, or None when it is not known within ``timeout`` seconds."""
        return self._result if self._done.wait(timeout) else None

    def _run(self) -> None:
        try:
            for pause in (*_RETRY_S, None):
                try:
                    self._result = resume.resolve(*self._args)
                    return
                except Exception as exc:
                    if pause is None:
                        _log.warning(
                            "tb_monitor: cannot read back where the steps of %s left off "
                            "(%s: %s); its tags start again at step 0 in this process's file",
                            self._args[0],
                            type(exc).__name__,
                            exc,
                        )
                        return
                time.sleep(pause)  # a store that refused for a moment (a restart storm)
        finally:
            self._done.set()
            self._on_done()


class StepsKeeper:
    """One writer's steps across restarts: where its run's steps left off, and the steps file
    of each event file the writer opens (rewritten at most once per ``interval`` seconds)."""

    def __init__(self, run_dir: str, interval: float, on_known: Callable[[], Any]) -> None:
        self._run_dir = run_dir
        self._interval = interval
        self._on_known = on_known
        self._resolving: Resolving | None = None
        self._ends: dict[str, int] = {}  # event file name -> end of what the steps include
        self._name: str | None = None  # the writer's current event file
        self._file: StepsFile | None = None
        self._recorded: tuple[str, int] | None = None  # what the steps file says last
        self._due = 0.0  # when the steps file may be rewritten next

    def opened(self, path: str, header_bytes: int) -> None:
        """The writer opened the event file ``path``: the first one starts resolving."""
        self._name = name = resume.basename(path)
        self._ends[name] = header_bytes
        self._header_bytes = header_bytes
        upload_s = float(os.environ.get("TB_MONITOR_UPLOAD_SECS", 5.0))
        self._file, self._recorded = StepsFile(path, upload_s), None
        if self._resolving is None:
            self._resolving = Resolving(self._run_dir, header_bytes, name, self._on_known)

    def wrote(self, count: int) -> None:
        """``count`` bytes of whole records went to the current event file."""
        self._ends[self._name] += count  # type: ignore[index]  # a file is open

    def known(self, wait: bool) -> Resumed | None:
        """What the run held once it is known (waiting for it when ``wait``), else None."""
        resumed = self._resolving.result(None if wait else 0)  # type: ignore[union-attr]
        if resumed is None:
            return None
        self._ends = {**resumed.covers, **self._ends}
        return resumed

    def record(self, steps: dict[str, int], now: bool) -> None:
        """Tell the steps file that the records written so far give ``steps``: at most once an
        interval, unless ``now`` (a flush or a close). A steps file that lags costs the next
        writer a read of what came after it, nothing more."""
        if self._file is None or self._name is None:
            return
        mark = (self._name, self._ends[self._name])
        if mark == self._recorded or not now and time.monotonic() < self._due:
            return
        self._file.update(steps, self._ends)
        self._recorded = mark
        self._due = time.monotonic() + self._interval

    def close_file(self) -> None:
        """The writer closed its event file: the steps file's last contents go out."""
        file, self._file = self._file, None
        if file is not None:
            file.close(CLOSE_S)

    def discard_file(self) -> None:
        """The writer removed its event file before writing to it: it accounts for nothing."""
        self._ends.pop(self._name, None)  # type: ignore[arg-type]
        self._file = self._name = None

    def after_fork_in_child(self) -> None:
        """Let go of the parent's steps file; find the run's steps again if the parent had not
        yet (its thread is gone). What the parent's covered stays covered."""
        file, self._file, self._name = self._file, None, None
        if file is not None:
            file.abandon()
        resolving = self._resolving
        if resolving is not None and not resolving.done:
            self._resolving = Resolving(self._run_dir, self._header_bytes, "", self._on_known)
