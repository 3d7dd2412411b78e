"""Waiting for work that makes progress: a deadline that counts only the time nothing moved.

A close must not give up on a writer that is busy encoding on a loaded machine, and must not
hang on storage that stopped answering. So the deadline is an idle one: it starts over each time
the work's progress mark changes (a batch encoded, a write returned, bytes acknowledged).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

__all__ = ["POLL_S", "wait_while_progressing"]

#: How often the progress mark is looked at while waiting.
POLL_S = 0.05


def wait_while_progressing(
    done: Callable[[float], bool],
    progress: Callable[[], Hashable],
    idle_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until ``done(timeout)`` (which waits at most ``timeout`` seconds) says the work is
    done, for as long as ``progress()`` keeps changing; give up once it has not changed for
    ``idle_s``. True when the work is done."""
    mark, moved_at = progress(), clock()
    while not done(POLL_S):
        now, new = clock(), progress()
        if new != mark:
            mark, moved_at = new, now
        elif now - moved_at >= idle_s:
            return done(0)
    return True
