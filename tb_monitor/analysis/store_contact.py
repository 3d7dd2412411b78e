"""The nodes cut off from the rendezvous store while another node still reaches it: a partition.

A node cut off by a network partition records nothing that says so. Its workers wait in a
collective with the ranks across the cut (every rank inside it, none behind), their heartbeats
go on, and its agent's keep-alives to the store stop: each one blocks in a send no one answers.
The agents on the store's side keep recording theirs every interval. torchelastic itself calls
a node dead after ``keep_alive_max_attempt`` (3) intervals (``keep_alive_interval``, 5 s)
without one. This module needs half that: a node whose agent recorded no keep-alive for one and
a half intervals while another agent of its job recorded one since is cut off, and its ranks
are the ones the others wait for once they all stall (``analysis.scoring.stalled_ranks``). The
stall is the other half of the evidence: no rank is named before every rank has gone the stall
rule's floor (10 s) without progress, and a partition is then named with the other hangs, not
after torchelastic's 15 s (the fault campaign's partitions were named after 13-18 s so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.jobs import is_agent_run, is_verdict

__all__ = ["KEEP_ALIVE_S", "QUIET_KEEP_ALIVES", "cut_off_ranks"]

#: torchelastic's default ``keep_alive_interval``.
KEEP_ALIVE_S = 5.0
#: A node is cut off after this many intervals without a keep-alive: a live agent's come every
#: interval, and half of one more allows for its records reaching the logdir a flush or two
#: later than another agent's.
QUIET_KEEP_ALIVES = 1.5


def cut_off_ranks(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], float]:
    """Per (job, rank) of a node cut off from the store (the job: its runs' top directory, as
    ``agent_views`` keys them), the time of its agent's last keep-alive: none for
    ``QUIET_KEEP_ALIVES`` keep-alive intervals while another agent of the job recorded one
    since, and no verdict of its own (an agent that ended is no cut)."""
    last: dict[str, dict[str, float]] = {}  # job -> agent run -> its newest keep-alive
    ranks: dict[str, set[int]] = {}  # agent run -> the ranks it started
    ended: set[str] = set()
    for row in rows:
        run = str(row.get("run") or "")
        if not is_agent_run(run):
            continue
        job = run.split("/", 1)[0]
        if contract.is_heartbeat(row):
            agents = last.setdefault(job, {})
            agents[run] = max(agents.get(run, 0.0), float(row["wall_time"]))
        elif row.get("kind") == contract.WORKER and row.get("state") == "START":
            if row.get("rank") is not None:
                ranks.setdefault(run, set()).add(int(row["rank"]))
        elif is_verdict(row):
            ended.add(run)
    quiet_s = QUIET_KEEP_ALIVES * KEEP_ALIVE_S
    cut: dict[tuple[str, int], float] = {}
    for job, agents in last.items():
        newest = max(agents.values())
        for run, at in agents.items():
            if newest - at > quiet_s and run not in ended:
                cut.update({(job, rank): at for rank in ranks.get(run, ())})
    return cut
