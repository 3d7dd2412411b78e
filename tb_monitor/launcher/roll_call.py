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

Before the first step a slow start (imports, rendezvous, a dataset loaded, a compilation) and a
hang look alike by time alone, but a rank hung there still has others waiting for it in a
collective (DDP's constructor broadcast, a first ``all_reduce``): so, with no worker stepped
yet, the roll-call is due once per attempt when every worker went ``START_FLOORS`` floors
without progress *and* one has waited in a collective that long. Stacks only: the restart
(``launcher.hung``) reads ``held``, which knows stepped workers alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tb_monitor import _env
from tb_monitor.analysis.scoring import DEFAULT_STALL_FLOOR_S, STALL_FACTOR, past_stall_rule
from tb_monitor.rank.stacks import Progress

__all__ = ["START_FLOORS", "StallTrigger", "stall_floor_s"]

#: Before the first step, the roll-call waits this many stall floors (the reading side's
#: ``STEP_STALL_FLOOR_S`` over ``STALL_FLOOR_S``): a start is slow more often than a loop.
START_FLOORS = 3


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
        does not count: a slow start (imports, rendezvous) is no stall of the loop; while none
        stepped, ``_start_due`` judges the start."""
        known = {pid: p for pid, p in progress.items() if p is not None and p.steps}
        if not known:
            return self._start_due(progress, now)
        if not self.stalled_for(progress, now):
            return False
        stall = tuple(sorted((pid, p.steps) for pid, p in known.items()))
        if stall == self._taken:
            return False
        self._taken = stall
        return True

    def stalled_for(self, progress: Mapping[int, Progress | None], now: float) -> float:
        """Seconds since the newest step while every worker that stepped is past the stall
        rule, else 0: the node's stall as the reading side would name it, for operators'
        alerts (``contract.NODE_STALLED``)."""
        known = [p for p in progress.values() if p is not None and p.steps]
        if not known or any(not self._stalled(p, now) for p in known):
            return 0.0
        return now - max(p.last_step for p in known)

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

    def _start_due(self, progress: Mapping[int, Progress | None], now: float) -> bool:
        """Before any step: every worker went ``START_FLOORS`` floors without progress while
        one waited in a collective as long (the others wait for a hung rank; a slow start
        waits in none so long), once per attempt (its workers' pids)."""
        known = {pid: p for pid, p in progress.items() if p is not None}
        limit = START_FLOORS * self.floor_s
        idle = all(now - max(p.last_step, p.last_progress or 0.0) > limit for p in known.values())
        waits = any(now - (p.in_collective_since or now) > limit for p in known.values())
        start = tuple(sorted((pid, 0) for pid in known))
        if not (known and idle and waits) or start == self._taken:
            return False
        self._taken = start
        return True
