"""What each rank's agent saw of its process, and the rank's stacks, from the timeline records.

A silent rank cannot say why; its agent can (``tb_monitor.launcher.rank_watch`` records
``contract.RANK_SEEN`` when what it sees of a worker's process changes, ``contract.RANK_STACKS``
with every thread's Python stack). ``agent_views(rows)`` gives per job and rank the newest view
and the stacks recorded since it changed; the report attaches them to the rank's stall as its
explanation. A view never makes a stall (a rank stopped from outside for part of each step still
steps); only a rank that recorded nothing at all is known from its view alone
(``RankGrid.stalls(seen_silent=)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tb_monitor import contract

__all__ = ["AgentView", "agent_views", "silent_runs"]

_NO_STACKS = {
    "stopped": "stopped: no stacks (a stopped process cannot dump them until it is continued)",
    "uninterruptible sleep": "in uninterruptible sleep: no stacks until it leaves the kernel",
}


@dataclass(frozen=True)
class AgentView:
    """One rank as its agent last saw it."""

    job: str  # the job's run directory (its run id)
    rank: int
    seen: str | None  # "stopped", "uninterruptible sleep", "alive but silent"; None: responding
    seen_at: float | None  # when the agent recorded that
    process_state: str | None  # /proc's one-letter state then
    pid: int | None
    host: str | None
    stacks: str | None  # every thread's Python stack, recorded since the view changed
    stacks_at: float | None
    stacks_reason: str | None  # "dumped after it went silent", "... before the agent stopped it"

    @property
    def silent(self) -> bool:
        return self.seen is not None

    @property
    def stacks_note(self) -> str | None:
        """Why there are no stacks, said honestly (None when there are)."""
        if self.stacks is not None:
            return None
        return _NO_STACKS.get(self.seen or "", "no stacks recorded")

    def to_json(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "seen_at": self.seen_at,
            "process_state": self.process_state,
            "pid": self.pid,
            "host": self.host,
            "stacks": self.stacks,
            "stacks_at": self.stacks_at,
            "stacks_reason": self.stacks_reason,
            "stacks_note": self.stacks_note,
        }


def _job(run: str) -> str:
    return run.split("/", 1)[0]


def agent_views(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], AgentView]:
    """Per (job, rank), the newest of its agent's views and the stacks recorded since; ranks
    whose agent recorded neither are absent."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    ours = (contract.RANK_SEEN, contract.RANK_STACKS)
    for row in sorted(
        (r for r in rows if r.get("name") in ours and r.get("rank") is not None),
        key=lambda r: r["wall_time"],
    ):
        meta = row.get("metadata") or {}
        view = found.setdefault((_job(row["run"]), int(row["rank"])), {"seen": None})
        view.update(pid=row.get("pid"), host=row.get("hostname"))
        if row["name"] == contract.RANK_SEEN:
            silent = row.get("state") == "SILENT"
            view.update(seen=meta.get("seen") if silent else None, seen_at=row["wall_time"])
            view.update(process_state=meta.get("process_state"), stacks=None)
        else:
            message = str(row.get("message") or "")
            view.update(stacks=meta.get("stacks"), stacks_at=row["wall_time"])
            view["stacks_reason"] = message.rpartition(", ")[2] or None
    return {
        key: AgentView(
            job=key[0],
            rank=key[1],
            seen=view["seen"],
            seen_at=view.get("seen_at"),
            process_state=view.get("process_state"),
            pid=view.get("pid"),
            host=view.get("host"),
            stacks=view.get("stacks"),
            stacks_at=view.get("stacks_at") if view.get("stacks") else None,
            stacks_reason=view.get("stacks_reason") if view.get("stacks") else None,
        )
        for key, view in found.items()
    }


def silent_runs(
    runs: Iterable[str], views: Mapping[tuple[str, int], AgentView]
) -> dict[str, float]:
    """The rank runs whose agent sees them silent now, each with when it saw that: those of
    ``runs`` (``job/rank-N``), and ``job/rank-N`` for a rank of a job of ``runs`` that recorded
    nothing at all (stopped before its first heartbeat: only its agent knows it exists, and
    ``RankGrid.stalls`` judges it from then)."""
    out: dict[str, float] = {}
    known, jobs = set(), set()
    for run in runs:
        rank = contract.rank_of(run)
        if rank is None:
            continue
        known.add((_job(run), rank))
        jobs.add(_job(run))
        view = views.get((_job(run), rank))
        if view is not None and view.silent:
            out[run] = view.seen_at or 0.0
    for (job, rank), view in views.items():
        if view.silent and job in jobs and (job, rank) not in known:
            out[f"{job}/rank-{rank}"] = view.seen_at or 0.0
    return out
