"""Run names: one run directory per process role and rank."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

__all__ = ["agent_run_name", "rank_of", "run_name_from_env"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: object) -> str:
    return _UNSAFE.sub("_", str(part)) or "_"


def run_name_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Run (relative directory) for this process, from torchelastic's worker environment.

    A torchelastic worker writes to ``<run id>/rank-<RANK>`` (``<run id>/<role>-rank-<RANK>`` for
    a role other than ``default``); any other process writes to the logdir itself (``""``).
    A restarted worker keeps its run: the writer continues each tag's steps from what the run
    already holds (see ``docs/DESIGN.md``), so attempts follow each other on one curve.
    """
    env = os.environ if environ is None else environ
    run_id, rank = env.get("TORCHELASTIC_RUN_ID"), env.get("RANK")
    if not run_id or rank is None:
        return ""
    role = env.get("ROLE_NAME", "default")
    worker = f"rank-{_safe(rank)}" if role == "default" else f"{_safe(role)}-rank-{_safe(rank)}"
    return f"{_safe(run_id)}/{worker}"


def agent_run_name(run_id: str, hostname: str | None = None, pid: int | None = None) -> str:
    """Run of a torchelastic agent: ``<run id>/agent-<host>-<pid>``.

    The agent is named by host and pid, not group rank: its group rank is only known after the
    first rendezvous and may change at every restart, while the process lives for the whole job.
    """
    host = hostname or socket.gethostname()
    return f"{_safe(run_id)}/agent-{_safe(host)}-{os.getpid() if pid is None else pid}"


_RANK_RUN = re.compile(r"(?:^|/)(?:[\w.-]+-)?rank-(\d+)$")


def rank_of(run: str) -> int | None:
    """The rank a worker's run holds (``job/rank-3``, ``job/trainer-rank-3``), or None."""
    match = _RANK_RUN.search(run)
    return int(match.group(1)) if match else None
