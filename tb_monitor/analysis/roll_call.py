"""The roll-call of a hung job: every rank's stacks, grouped, the odd one out first.

In a hang the ranks that wait for one rank all wait in the same place; the rank they wait for is
somewhere else. Each agent captures its workers' stacks once per stall (``launcher.rank_watch``:
``contract.RANK_STACKS`` records with ``roll_call``, ``method`` and the main thread's ``frames``);
``roll_calls(rows)`` puts one job's captures of its newest stall together, whichever agent took
them, and groups its ranks by where their main thread is: the innermost Python function and the
innermost frame of the user's own code (not of the standard library, site-packages or
tb_monitor), and by whether the process was held when it was read (stopped, or in
uninterruptible sleep, by ``/proc``): a rank SIGSTOPped inside ``loss.backward()`` has the very
Python frames of the ranks that wait in the backward's all-reduce for its gradients, and only
its state sets it apart. The smallest group comes first, a held one before others as large:
"rank 1 in `sleep_a_while` at train.py:40; ranks 0, 2, 3 in `all_reduce` at train.py:42".

A capture belongs to the newest stall when it was taken after that stall began (the newest
capture's ``stalled_since``, the last step its agent saw): an older one was taken in an earlier
stall, before steps resumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tb_monitor import contract

__all__ = ["RollCall", "RollGroup", "frame_line", "group_ranks", "innermost", "roll_calls"]

#: Path parts of frames that are not the user's code.
_NOT_USERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/tb_monitor/", "<frozen")


def frame_line(frame: Mapping[str, Any]) -> str:
    """One frame as py-spy prints it: ``name (file:line)``, a native one without its line."""
    where = frame.get("file") if frame.get("native") else f"{frame.get('file')}:{frame.get('line')}"
    return f"{frame.get('name')} ({where})"


@dataclass(frozen=True)
class RollGroup:
    """Ranks whose main thread is in the same place, and one of their stacks."""

    ranks: tuple[int, ...]
    function: str | None  # the innermost Python function ("all_reduce")
    where: str | None  # the innermost frame of the user's code ("train.py:42")
    stack: str  # the first rank's stacks, every thread, as captured
    method: str  # how it was captured: "py-spy --native", "py-spy", "faulthandler"
    frames: tuple[Mapping[str, Any], ...] = ()  # the first rank's main thread, innermost first
    held: str | None = None  # "stopped", "uninterruptible sleep": how /proc held them

    def main_stack(self) -> list[str]:
        """The first rank's main thread, a frame a line: ``name (file:line)``."""
        return [frame_line(f) for f in self.frames]

    def words(self) -> str:
        """``ranks 0, 2, 3 in `all_reduce` at train.py:42``; ``rank 1 (stopped) in ...``."""
        who = ("rank " if len(self.ranks) == 1 else "ranks ") + ", ".join(map(str, self.ranks))
        who += f" ({self.held})" if self.held else ""
        what = f" in `{self.function}`" if self.function else ""
        return f"{who}{what}" + (f" at {self.where}" if self.where else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks),
            "function": self.function,
            "where": self.where,
            "method": self.method,
            "held": self.held,
            "main_thread": [dict(f) for f in self.frames],
            "stack": self.stack,
        }


@dataclass(frozen=True)
class RollCall:
    """One job's roll-call: its groups, the odd one out first."""

    job: str
    at: float  # when the newest capture was taken
    stalled_since: float | None
    groups: tuple[RollGroup, ...]

    def words(self) -> str:
        """One line: each group's words, the odd one out first."""
        return "; ".join(group.words() for group in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "stalled_since": self.stalled_since,
            "summary": self.words(),
            "groups": [group.to_json() for group in self.groups],
        }


def innermost(frames: Iterable[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """The innermost Python function of ``frames`` (innermost first) and the innermost frame of
    the user's own code as ``file:line`` (its base name)."""
    python = [f for f in frames if not f.get("native")]
    function = str(python[0]["name"]) if python else None
    for frame in python:
        path = str(frame.get("file", "")).replace("\\", "/")
        if not any(part in path for part in _NOT_USERS):
            return function, f"{path.rsplit('/', 1)[-1]}:{frame.get('line')}"
    return function, None


def group_ranks(captures: Mapping[int, Mapping[str, Any]]) -> tuple[RollGroup, ...]:
    """The ranks of ``captures`` (rank: ``frames``, ``stacks``, ``method``, ``process_state``)
    grouped by where their main thread is and whether it was held there, the smallest group
    first, a held one before others as large (then the lowest rank)."""
    found: dict[tuple[str | None, str | None, str | None], list[int]] = {}
    for rank in sorted(captures):
        capture = captures[rank]
        held = contract.HELD_STATES.get(str(capture.get("process_state")))
        found.setdefault((*innermost(capture.get("frames") or ()), held), []).append(rank)
    groups = [
        RollGroup(
            tuple(ranks),
            function,
            where,
            str(captures[ranks[0]].get("stacks") or ""),
            str(captures[ranks[0]].get("method") or "faulthandler"),
            tuple(captures[ranks[0]].get("frames") or ()),
            held,
        )
        for (function, where, held), ranks in found.items()
    ]
    return tuple(sorted(groups, key=lambda g: (len(g.ranks), g.held is None, g.ranks)))


def _frames(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    try:
        frames = json.loads(meta.get("frames") or "[]")
    except (TypeError, ValueError):
        return []
    return [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []


def roll_calls(rows: Iterable[Mapping[str, Any]]) -> dict[str, RollCall]:
    """Per job (its run directory), the roll-call of its newest stall, from the timeline records
    ``rows``; jobs without one are absent."""
    newest: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        meta = row.get("metadata") or {}
        if row.get("name") != contract.RANK_STACKS or not meta.get("roll_call"):
            continue
        if row.get("rank") is None:
            continue
        ranks = newest.setdefault(str(row["run"]).split("/", 1)[0], {})
        capture = {
            "at": float(row["wall_time"]),
            "since": meta.get("stalled_since"),
            "frames": _frames(meta),
            "stacks": meta.get("stacks"),
            "method": meta.get("method"),
            "process_state": meta.get("process_state"),
        }
        rank = int(row["rank"])
        if rank not in ranks or ranks[rank]["at"] < capture["at"]:
            ranks[rank] = capture
    return {job: _of_newest_stall(job, ranks) for job, ranks in newest.items()}


def _of_newest_stall(job: str, ranks: Mapping[int, dict[str, Any]]) -> RollCall:
    """The captures taken after the newest capture's stall began, grouped."""
    last = max(ranks.values(), key=lambda c: c["at"])
    since = last["since"]
    current = {rank: c for rank, c in ranks.items() if since is None or c["at"] >= float(since)}
    return RollCall(job, last["at"], since, group_ranks(current))
