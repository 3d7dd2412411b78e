"""A CPU kept busy, as other jobs on a shared machine keep it: one busy-loop process per core.

Shared by the busy-close tests and ``benchmarks/bench_busy_close.py``. Whatever runs beside the
loops to be starved by them starts with ``LOWEST`` too: then they starve each other, and not
the rest of the machine (the tests running beside them)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

#: The lowest priority, for the loops and what they should starve.
LOWEST = ["nice", "-n", "19"]


@contextlib.contextmanager
def busy_neighbours() -> Iterator[None]:
    """One busy-loop process per core while the block runs, stopped by pid afterwards."""
    loops = [
        subprocess.Popen([*LOWEST, sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
