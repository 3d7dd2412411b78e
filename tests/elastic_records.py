"""Hand-made torchelastic records as decoded timeline rows (``readers.decode_timeline``'s
dicts), for the analysis tests that need an exact sequence no synthetic job writes: a SIGKILL,
a lost peer, a node killed with its agent. Every record is of the run id ``job``."""

from __future__ import annotations

from typing import Any

from tb_monitor import contract

__all__ = ["agent", "joined", "own", "rec", "rendezvous", "verdict"]


def rec(t: float, run: str, kind: str, name: str, state: str | None = None, **fields: Any) -> dict:
    """One record of ``run`` at ``t``; ``fields`` set the others (``metadata`` defaults to {})."""
    row = dict.fromkeys(contract.FIELDS)
    row.update(run=run, kind=kind, wall_time=t, name=name, state=state, run_id="job")
    row["metadata"] = fields.pop("metadata", {})
    row.update(fields)
    return row


def rendezvous(
    t: float, node: str, pid: int, state: str, message: str, method: str = "h.next_rendezvous"
) -> dict:
    """A rendezvous record of the agent ``pid`` on ``node``."""
    return rec(
        t,
        f"job/agent-{node}-{pid}",
        contract.RENDEZVOUS,
        method,
        state,
        message=message,
        hostname=node,
        pid=pid,
    )


def joined(t: float, node: str, pid: int, number: int = 0) -> dict:
    """The agent ``pid`` on ``node`` joined rendezvous round ``number``."""
    message = (
        f"The node '{node}_{pid}_0' has joined round {number} of the rendezvous 'job' as rank 0"
    )
    return rendezvous(t, node, pid, "RUNNING", message)


def agent(
    t: float,
    node: str,
    pid: int,
    state: str,
    rank: int,
    exit_code: int | None = None,
    raw: str | None = None,
) -> dict:
    """The agent's record of its worker ``rank`` (``raw``: torchelastic's error file)."""
    return rec(
        t,
        f"job/agent-{node}-{pid}",
        contract.WORKER,
        f"torchelastic.worker.status.{state}",
        state,
        rank=rank,
        hostname=node,
        error_trace=raw,
        metadata={"exit_code": exit_code, "agent_restarts": 0},
        source="WORKER",
    )


def verdict(t: float, node: str, pid: int, state: str) -> dict:
    """The agent's final record of its whole run (source AGENT): SUCCEEDED, FAILED."""
    return rec(
        t,
        f"job/agent-{node}-{pid}",
        contract.AGENT,
        f"torchelastic.worker.status.{state}",
        state,
        hostname=node,
        source="AGENT",
    )


def own(
    t: float,
    rank: int,
    state: str,
    message: str | None = None,
    trace: str | None = None,
    host: str = "x",
) -> dict:
    """The worker's own record (``tb_monitor.rank.worker``) of ``rank``."""
    return rec(
        t,
        f"job/rank-{rank}",
        contract.WORKER,
        f"tb_monitor.worker.status.{state}",
        state,
        rank=rank,
        hostname=host,
        message=message,
        error_trace=trace,
        metadata={"restart_count": 0},
        source="WORKER",
    )
