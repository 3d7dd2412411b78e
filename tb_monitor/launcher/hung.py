"""When an agent ends a hung attempt (``tb-monitor run --restart-hung-after``), and when it stops.

A hang ends only at NCCL's (or gloo's) timeout, ten minutes and more of idle devices. With
``--restart-hung-after D`` the agent ends it sooner: once the stall its roll-call was taken for
(``launcher.roll_call``: every worker went past the stall rule's time without a step) has held
for ``D`` since the last step, it records why (``contract.AGENT_HUNG``) and kills its workers;
torchelastic sees them fail and restarts the attempt, within ``--max-restarts``. Each agent
decides alone, from its own workers, as it takes its roll-call alone: in a hang every rank
stops, so every agent comes to the same verdict within a look or two.

Never while the attempt makes progress: a worker that steps (a slow but stepping rank) holds
the stall rule back, and a worker whose torch wait counters moved since the roll-call (a unit
of work done: a checkpoint save guarded by ``_WaitCounter`` reports its writes that way) holds
the restart back, and the stall is judged again from then on.

Restarting cannot help a job that hangs at the same place every time: when an attempt hangs
where the agent's previous hung attempt hung (its workers' innermost frames, as the roll-call
read them), the verdict is "give up". The agent then lets torchelastic restart no more, ends
the attempt, and ``tb-monitor run`` exits with ``HUNG_EXIT_CODE``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["GIVE_UP", "HUNG_EXIT_CODE", "RESTART", "HungPolicy", "HungVerdict", "parse_duration"]

RESTART, GIVE_UP = "restart", "give up"
#: ``tb-monitor run``'s exit code when it gave up on a job that hung at the same place again.
HUNG_EXIT_CODE = 3
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from ``60``, ``60s``, ``1.5m``, ``2h`` or ``500ms`` (a ValueError otherwise)."""
    raw = text.strip().lower()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :] or "s"
    if unit not in _UNITS:
        raise ValueError(f"not a duration: {text!r} (say 60s, 2m, 1h)")
    seconds = float(number) * _UNITS[unit]
    if not seconds > 0:
        raise ValueError(f"not a positive duration: {text!r}")
    return seconds


@dataclass(frozen=True)
class HungVerdict:
    """What the agent does with a hung attempt, and why."""

    action: str  # RESTART or GIVE_UP
    stalled_since: float  # the last step any of its workers took
    held_s: float  # how long the stall had held when ended
    where: tuple[str, ...]  # each worker's innermost frames, by local rank


class HungPolicy:
    """``decide(stall, since, where, now, busy)``: a ``HungVerdict`` once per stall held for
    ``after_s``, else None. ``now`` is wall time, as ``since`` is."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._ended: Hashable | None = None  # the stall last ended
        self._previous: tuple[str, ...] | None = None  # where the last hung attempt hung
        self._busy_at: float | None = None  # when a worker last showed progress in this stall

    def decide(
        self,
        stall: Hashable | None,
        since: float | None,
        where: tuple[str, ...],
        now: float,
        busy: bool = False,
    ) -> HungVerdict | None:
        """``stall``: the stall whose roll-call was taken (None while steps go on); ``since``:
        its last step; ``where``: its workers' frames; ``busy``: a worker reported progress
        other than a step since the roll-call (its wait counters moved)."""
        if stall is None or since is None or stall == self._ended:
            self._busy_at = None if stall is None else self._busy_at
            return None
        if busy:
            self._busy_at = now
        held_from = max(since, self._busy_at or since)
        if now - held_from < self.after_s:
            return None
        self._ended, self._busy_at = stall, None
        action = GIVE_UP if where and where == self._previous else RESTART
        self._previous = where
        return HungVerdict(action, since, now - since, where)
