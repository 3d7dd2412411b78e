"""How a writer's flush or close waits for the drain, and the ledger of what it holds.

The drain runs on a helper thread, so that storage that never returns cannot hang the caller or
the process's exit; the caller waits for it for as long as it makes progress
(``tb_monitor._patience``: records encoded, writes returned, bytes acknowledged), however busy
the machine, and gives up only once nothing moved for the idle deadline. What it then leaves
behind is the ``Ledger``'s count, which a close that gives up records as dropped.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tb_monitor._patience import wait_while_progressing

if TYPE_CHECKING:
    from tb_monitor.sinks.batching import Batch
    from tb_monitor.sinks.encoding import RecordEncoder

__all__ = ["LeftBehind", "Ledger", "run_bounded"]

_log = logging.getLogger("tb_monitor.sinks.writer")


def run_bounded(
    what: str,
    steps: Sequence[Callable[[], None]],
    lock: AbstractContextManager[object],
    progress: Callable[[], Hashable],
    idle_s: float,
    done: threading.Event,
    where: str,
) -> bool:
    """Run ``steps`` under ``lock`` on a helper thread and wait for them while ``progress()``
    moves; True once they ran (``done`` is set then), False when the wait gave up."""

    def run() -> None:
        try:
            with lock:
                for step in steps:
                    step()
        except Exception:
            _log.exception("tb_monitor: %s of %s failed", what, where)
        finally:
            done.set()

    try:
        threading.Thread(target=run, name=f"tb_monitor-{what}", daemon=True).start()
    except RuntimeError:  # Python 3.12+ starts no thread during interpreter shutdown
        run()
        return True
    return wait_while_progressing(done.wait, progress, idle_s)


@dataclass(frozen=True)
class LeftBehind:
    """What a writer still held when a flush or close gave up on its drain."""

    queued: int  # records not yet encoded
    held: int  # timeline records waiting in their batches
    runs: int  # open keep-alive runs among those batches
    in_hand: int  # taken off the queue or out of their batches: being encoded or written

    @property
    def records(self) -> int:
        return self.queued + self.held + self.in_hand

    def __str__(self) -> str:
        runs = f"{self.runs} open keep-alive run{'' if self.runs == 1 else 's'}"
        return (
            f"{self.records} records ({self.queued} queued, {self.held} held in {runs}, "
            f"{self.in_hand} being written)"
        )


class Ledger:
    """What one writer holds and what it lost, counted under one lock (also the condition its
    callers wait on for room), so that a close that gives up counts each record exactly once:
    in the queue, in a batch, or in hand (taken off the queue, being encoded or written)."""

    def __init__(self) -> None:
        self.dropped = 0  # by the writer itself, its callers' own and what a close gave up on
        self.writes = 0  # handed to storage: the drain's progress
        self.new_lock()

    def new_lock(self) -> None:
        """A fresh lock (a forked child's), and nothing in hand: the parent's records are not
        the child's to write."""
        self.room = threading.Condition(threading.Lock())
        self.in_hand = 0
        self.abandoned = False  # a close gave up: what is left is counted, never written

    def drop(self, records: int) -> None:
        with self.room:
            self.dropped += records

    def take(self, queue: deque[tuple], count: int) -> list[tuple]:
        """``count`` records off the front of ``queue``, now in hand."""
        with self.room:
            self.in_hand += count
            return [queue.popleft() for _ in range(count)]

    def batched(self, records: int) -> None:
        """``records`` in hand went into their timeline batches instead."""
        with self.room:
            self.in_hand -= records

    def take_batches(self, encoder: RecordEncoder, seal: bool) -> list[Batch]:
        """The encoder's timeline batches that are ready, now in hand (none once abandoned)."""
        with self.room:
            batches = [] if self.abandoned else encoder.take_timeline(seal)
            self.in_hand += sum(len(batch.times) for batch in batches)
            return batches

    def written(self, records: int, taken: bool) -> None:
        """``records`` were handed to storage, which counts them itself if it failed;
        ``taken``: they were in hand."""
        with self.room:
            self.writes += 1
            if taken:
                self.in_hand -= records
                if self.abandoned:  # counted as lost when the close gave up, yet written
                    self.dropped -= records

    def abandon(self, queue: deque[tuple], encoder: RecordEncoder | None) -> LeftBehind:
        """A close gave up: what is left, counted as dropped, and never written."""
        with self.room:
            left = self.left(queue, encoder)
            self.abandoned = True
            self.dropped += left.records
            return left

    def left(self, queue: deque[tuple], encoder: RecordEncoder | None) -> LeftBehind:
        held, runs = (0, 0) if encoder is None else (encoder.held, encoder.open_runs)
        return LeftBehind(len(queue), held, runs, self.in_hand)

    def forget(self, queue: deque[tuple], encoder: RecordEncoder) -> None:
        """Clear what an abandoned writer still holds (counted when it was abandoned)."""
        with self.room:
            queue.clear()
            encoder.clear()
            self.in_hand = 0
