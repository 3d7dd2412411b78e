"""A progress line on stderr for long reads and writes (exports of large logdirs).

Drawn when stderr is a terminal, or for large jobs (``LARGE`` records and more) so that a CI log
shows a long export is alive; redrawn at most ten times a second (every two seconds off a TTY).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

__all__ = ["LARGE", "progress"]

#: From this many records on, a progress bar is shown even when stderr is not a terminal.
LARGE = 50_000


class _Bar:
    """A progress line on stderr, redrawn at most ten times a second."""

    def __init__(self, label: str, total: int | None, stream: IO[str]) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.done = 0
        self.tty = stream.isatty()
        self.next_draw = 0.0

    def advance(self) -> None:
        self.done += 1
        if self.done & 0x3FF == 0 and time.monotonic() >= self.next_draw:
            self.next_draw = time.monotonic() + (0.1 if self.tty else 2.0)
            self.draw()

    def draw(self, final: bool = False) -> None:
        if self.total:
            filled = 30 * self.done // self.total
            text = f"{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            text = f"{self.label}: {self.done}"
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()


@contextmanager
def progress(label: str, total: int | None, enabled: bool | None) -> Iterator[Any]:
    """Yield an ``advance()`` callable; draws a bar when enabled (None: TTY or large)."""
    stream = sys.stderr
    if enabled is None:
        enabled = stream.isatty() or (total or 0) >= LARGE
    if not enabled:
        yield _noop
        return
    bar = _Bar(label, total, stream)
    yield bar.advance
    if bar.done:
        bar.draw(final=True)


def _noop() -> None:
    pass
