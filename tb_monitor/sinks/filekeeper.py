"""The writer's event file under storage faults: which file is written, and what a failure does.

``AsyncWriter`` hands each encoded batch to ``FileKeeper.write`` on its thread. A failed write (a
full disk, a read-only or deleted directory) drops and counts that batch and logs one warning per
outage naming the file and the error; the next attempt, after a backoff (0.5 s doubling to 30 s,
not every batch), starts a new file, so writing resumes by itself. A deleted event file is
noticed before the next write and replaced. Each file opened brings its steps file
(``StepsKeeper``), so a restart continues from what this file holds.

Each new file is named after the last event file the writer knows of in its run (``follow``):
TensorBoard reads a run's files in name order, and two processes that start in the same second
are otherwise ordered by host and process id, not by which came first.
"""

from __future__ import annotations

import logging
import time

from tb_monitor.logdir import fs, resume
from tb_monitor.logdir.eventfile import EventFile
from tb_monitor.sinks import encoding
from tb_monitor.sinks.steps import StepsKeeper

__all__ = ["DROPPED_TAG", "FileKeeper", "with_path"]

#: Scalar tag under which a writer records how many records it dropped.
DROPPED_TAG = "tb_monitor/dropped_records"

_log = logging.getLogger(__name__)

_MIN_BACKOFF_S, _MAX_BACKOFF_S = 0.5, 30.0  # between write attempts while storage fails


def with_path(exc: OSError, message: str) -> OSError:
    """The same kind of OSError, with a message that names what we were doing and where."""
    if exc.errno is None:
        return OSError(f"{message}: {exc}")
    return type(exc)(exc.errno, f"{message}: {exc.strerror or exc}")


class FileKeeper:
    """One writer's current event file in ``run_dir``: opened, replaced after a fault, closed.

    Creating it opens the first file (an ``OSError`` when the directory cannot take one); from
    then on no storage fault raises: ``error`` tells the one in progress, ``dropped`` counts what
    it cost. ``filename_suffix`` ends every file name, as torch's ``SummaryWriter`` has it.
    """

    def __init__(self, run_dir: str, steps: StepsKeeper, filename_suffix: str = "") -> None:
        self._run_dir = run_dir
        self._steps = steps
        self._suffix = filename_suffix
        self.file: EventFile | None = None
        self.path: str | None = None
        #: The failure in progress, None while writing works.
        self.error: OSError | None = None
        self._dropped = 0  # records whose write failed, or was skipped while storage fails
        self._retry_at = 0.0
        self._backoff = _MIN_BACKOFF_S
        self._last = ""  # the last event file name known in the run: new names sort after it
        #: What storage may take besides on a sync or close (an object store's upload).
        self.wait_s = self._open().wait_s

    @property
    def dropped(self) -> int:
        """Records lost to storage: failed writes, and what the current file lost after taking
        them (an object store unreachable for longer than its upload buffer holds)."""
        file = self.file
        return self._dropped + (0 if file is None else file.dropped)

    @property
    def acknowledged(self) -> int:
        """Bytes the current file's storage has taken (a writer's close waits while it grows)."""
        file = self.file
        return 0 if file is None else file.acknowledged

    def write(self, data: bytearray, count: int) -> None:
        """Write the encoded ``data`` of ``count`` records (counted as dropped on error)."""
        if not data:
            return
        if self.error is not None and time.monotonic() < self._retry_at:
            self._dropped += count  # still failing: retried with backoff, not every batch
            return
        try:
            self._writable().write(data, count)
            self._steps.wrote(len(data))
        except OSError as exc:
            self._dropped += count
            self._failed(with_path(exc, f"writing {self.path or self._run_dir} failed"))
            return
        if self.error is not None:
            _log.warning("tb_monitor: writing %s works again", self.path)
            self.error = None
            self._backoff = _MIN_BACKOFF_S

    def sync(self) -> None:
        """Make what was written durable; a failure counts as an outage, no retry now."""
        if self.file is None or self.error is not None:
            return
        try:
            self.file.sync()
        except OSError as exc:
            self._failed(with_path(exc, f"flushing {self.path} failed"))

    def close(self) -> None:
        """Close the current file (the next write opens a new one) and its steps file."""
        file, self.file = self.file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self._failed(with_path(exc, f"closing {self.path} failed"))
        self._steps.close_file()

    def follow(self, last: str) -> None:
        """The run's last event file besides this writer's is ``last``: if it sorts after the
        file this writer opened (another process of the same second), start a file named after
        it instead. Called once the run is listed, before any record is written."""
        self._last = max(self._last, last)
        file = self.file
        if file is None or resume.basename(file.name) > last:
            return
        self.file = self.path = None
        try:
            file.discard()
        except OSError as exc:
            _log.debug("tb_monitor: cannot remove the unused %s (%s)", file.name, exc)
        self._steps.discard_file()
        try:
            self._open()
        except OSError as exc:
            self._failed(with_path(exc, f"creating an event file in {self._run_dir} failed"))

    def abandon(self) -> None:
        """Let go of the file without touching it (a forked child: the parent still writes it)."""
        file, self.file, self.path = self.file, None, None
        if file is not None:
            file.abandon()

    def _writable(self) -> EventFile:
        """The file to write: a new one when there is none, or it was deleted or broken."""
        file = self.file
        if file is not None and not file.closed and file.deleted():
            _log.warning("tb_monitor: %s was deleted; writing to a new file", self.path)
            self.close()
        if file is None or file.closed:
            file = self._open()
        return file

    def _open(self) -> EventFile:
        """Create this writer's own event file (never an existing one) and mark its version;
        its steps file comes with it."""
        header = encoding.version_record(time.time())
        self.file = file = fs.new_event_file(self._run_dir, header, self._suffix, self._last)
        self.path = file.name
        self._last = resume.basename(file.name)
        self._steps.opened(file.name, len(header))
        return file

    def _failed(self, error: OSError) -> None:
        """Warn once per outage and retry with backoff (the file already dropped what failed)."""
        if self.error is None:
            _log.warning(
                "tb_monitor: %s; dropping records (counted in %s) until writing works again",
                error,
                DROPPED_TAG,
            )
        self.error = error
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
