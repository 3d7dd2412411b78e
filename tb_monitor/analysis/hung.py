"""Attempts an agent ended because they hung (``tb-monitor run --restart-hung-after``).

The agent records ``contract.AGENT_HUNG`` before it kills a hung attempt's workers
(``launcher.hung``); torchelastic then sees them fail (SIGKILL) as it would see a crash.
``hung_attempts`` reads such an attempt as what it was: outcome HUNG, its root cause the odd
one out of the roll-call its agents took in it (``analysis.roll_call``: the rank the others
wait for, and where it is; source "hung"), dated when the stall began (the last step), so the
time lost runs from the hang to the next attempt. Its ranks killed by the agent are collateral.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.jobs import job_of
from tb_monitor.analysis.roll_call import roll_calls
from tb_monitor.analysis.root_cause import RootCause

__all__ = ["HUNG", "Hang", "hangs", "hung_attempts"]

HUNG = "HUNG"
#: A hang record this long after an attempt's last record still belongs to it (the kill).
_SLACK_S = 5.0


@dataclass(frozen=True)
class Hang:
    """One agent's verdict on a hung attempt."""

    time: float
    action: str  # "restart" or "give up"
    stalled_since: float
    held_s: float
    host: str | None


def hangs(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Hang]]:
    """Per job, its agents' hung verdicts, oldest first."""
    found: dict[str, list[Hang]] = {}
    for row in rows:
        if row.get("name") != contract.AGENT_HUNG:
            continue
        meta = row.get("metadata") or {}
        try:
            since, held = float(meta["stalled_since"]), float(meta.get("held_s") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        host = meta.get("hostname")
        hang = Hang(float(row["wall_time"]), str(meta.get("action")), since, held, host)
        found.setdefault(job_of(row), []).append(hang)
    return {job: sorted(found_, key=lambda h: h.time) for job, found_ in found.items()}


def hung_attempts(
    rows: Sequence[Mapping[str, Any]], found: list[Any], next_starts: Mapping[Any, float]
) -> list[Any]:
    """``found`` (``attempts.Attempt``s: this module sits below it) with each attempt an agent
    ended as hung read as HUNG. ``next_starts``: per
    ``(job, attempt)``, when the next attempt started (absent: none followed)."""
    verdicts = hangs(rows)
    if not verdicts:
        return found
    out = []
    for attempt in found:
        ours = [
            h
            for h in verdicts.get(attempt.job, ())
            if attempt.start <= h.time <= attempt.end + _SLACK_S
        ]
        out.append(_hung(rows, attempt, ours[0], next_starts) if ours else attempt)
    return out


def _hung(rows: Sequence[Mapping[str, Any]], attempt: Any, hang: Hang, next_starts: Mapping) -> Any:
    window = [r for r in rows if attempt.start <= float(r["wall_time"]) <= hang.time + _SLACK_S]
    call = roll_calls(window).get(attempt.job)
    odd = call.groups[0] if call and call.groups else None
    ranks = odd.ranks if odd else attempt.ranks[:1]
    where = odd.words() if odd else "no roll-call recorded"
    if hang.action == "give up":
        then = "not restarted: it hung where the attempt before it hung"
    else:
        then = f"restarted after {hang.held_s:.0f} s without a step"
    cause = RootCause(
        rank=ranks[0] if ranks else -1,
        time=hang.stalled_since,
        reason=f"hung: {where}; {then}",
        host=hang.host,
        source="hung",
        ranks=tuple(ranks),
    )
    next_start = next_starts.get((attempt.job, attempt.attempt))
    return replace(
        attempt,
        outcome=HUNG,
        root_cause=cause,
        collateral_ranks=tuple(r for r in attempt.ranks if r not in ranks),
        time_lost_s=None if next_start is None else max(0.0, next_start - hang.stalled_since),
    )
