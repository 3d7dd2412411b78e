"""When an agent takes the roll-call of its workers' stacks: once per stall, decided alone.

In a hang every rank stops stepping, so each agent can tell a stall from its own workers, with
no word from the other nodes: when none of them has stepped for the stall rule's time
(``analysis.scoring``: ``STALL_FACTOR`` typical steps, at least ``$TB_MONITOR_STALL_FLOOR_S``),
it captures every one's stacks (``launcher.stack_capture``), once for that stall. Each worker's
pulse carries its progress (``rank.stacks.Progress``): a stopped worker's stays as it was, so
it counts as not stepping, as the stall rule counts it. The reading side puts the agents'
captures of one stall together (``analysis.roll_call``).

Never while steps go on: one worker that stepped within its time (a slow but stepping rank)
holds the capture back. A stall is known by its workers' step counts: captured once, it is
captured again only after some worker stepped and all stopped again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tb_monitor import _env
from tb_monitor.analysis.scoring import DEFAULT_STALL_FLOOR_S, STALL_FACTOR, past_stall_rule
from tb_monitor.rank.stacks import Progress

__all__ = ["StallTrigger", "stall_floor_s"]


def stall_floor_s() -> float:
    """The stall rule's floor where this agent runs (``$TB_MONITOR_STALL_FLOOR_S``, by default
    the reading side's), read now: ``STALL_FLOOR_S`` is read when it is imported."""
    return _env.seconds("TB_MONITOR_STALL_FLOOR_S", DEFAULT_STALL_FLOOR_S)


class StallTrigger:
    """Says when a roll-call is due: ``due(progress, now)``, once per stall; ``now`` is wall
    time, as the pulses' ``last_step`` is."""

    def __init__(self, floor_s: float, factor: float = STALL_FACTOR) -> None:
        self.floor_s, self.factor = floor_s, factor
        self._taken: tuple[tuple[int, int], ...] | None = None  # the stall last captured

    def stalled_since(self, progress: Mapping[int, Progress | None]) -> float | None:
        """When the newest step of ``progress`` was taken (None: no progress known)."""
        return max((p.last_step for p in progress.values() if p is not None), default=None)

    def due(self, progress: Mapping[int, Progress | None], now: float) -> bool:
        """Whether to capture now: every worker that stepped (by pid) went past the stall
        rule's time without a step, and this stall was not captured yet. A worker yet to step
        does not count: a slow start (imports, rendezvous) is no stall of the loop."""
        known = {pid: p for pid, p in progress.items() if p is not None and p.steps}
        if not known or any(not self._stalled(p, now) for p in known.values()):
            return False
        stall = tuple(sorted((pid, p.steps) for pid, p in known.items()))
        if stall == self._taken:
            return False
        self._taken = stall
        return True

    def held(self, progress: Mapping[int, Progress | None]) -> tuple | None:
        """The stall last captured while it still holds (no worker stepped since), else None."""
        known = {pid: p for pid, p in progress.items() if p is not None and p.steps}
        stall = tuple(sorted((pid, p.steps) for pid, p in known.items()))
        return stall if stall and stall == self._taken else None

    def _stalled(self, progress: Progress, now: float) -> bool:
        """The reading side's rule (``analysis.scoring.past_stall_rule``), from the pulse."""
        idle = math.inf if progress.last_progress is None else now - progress.last_progress
        limit = self.factor * progress.typical_s
        return past_stall_rule(now - progress.last_step, idle, limit, self.floor_s)
