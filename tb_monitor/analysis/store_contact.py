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

The proof can come after the stall: the store's side's keep-alive that passes the quiet span
is up to an interval later than the span itself. Until it comes, a keep-alive overdue by the
ranks' newest heartbeat (``now``) while another agent still records them is a cut not yet
confirmed, and no rank is named (the collective rules would name whichever rank the cut left
reading behind). A cut that healed (its agent's keep-alive came through at last) holds the
naming back the same for the stall it began, for as long as that stall lasts: after a heal the
ranks step again only once TCP retransmits what the cut dropped, and its backoff left the
campaign's healed DDP jobs stalled up to 20 s more (one such read named a rank of the store's
side, by the collective rules, once the heal was a quiet span old). A gap in every
agent's keep-alives at once is no cut: torchelastic stops them on every node while a restart's
rendezvous runs, and starts them an interval after it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.jobs import is_agent_run, is_verdict
from tb_monitor.analysis.scoring import Cut

__all__ = ["KEEP_ALIVE_S", "QUIET_KEEP_ALIVES", "RETRANSMIT_MAX_S", "cut_off_ranks"]

#: torchelastic's default ``keep_alive_interval``.
KEEP_ALIVE_S = 5.0
#: A node is cut off after this many intervals without a keep-alive: a live agent's come every
#: interval, and half of one more allows for its records reaching the logdir a flush or two
#: later than another agent's.
QUIET_KEEP_ALIVES = 1.5
#: Linux's ``TCP_RTO_MAX``: once a cut heals, a connection sends again within this at the
#: latest, so a stall that outlasts a heal by more is not the cut's.
RETRANSMIT_MAX_S = 120.0
_QUIET_S = QUIET_KEEP_ALIVES * KEEP_ALIVE_S


def cut_off_ranks(
    rows: Iterable[Mapping[str, Any]],
    now: float | None = None,
    last_step: float | None = None,
) -> dict[tuple[str, int], Cut]:
    """Per (job, rank) of a node cut off from the store (the job: its runs' top directory, as
    ``agent_views`` keys them), its newest cut: its agent recorded no keep-alive for
    ``QUIET_KEEP_ALIVES`` keep-alive intervals while another agent of the job recorded one
    since, or (healed) did so before its next one; unconfirmed where it is only overdue by
    ``now`` while another agent's keep-alives still come. An agent that recorded its verdict is
    no cut (it ended). ``now``: default the job's newest keep-alive (then none is overdue).
    ``last_step``: the oldest of the ranks' last steps (wall time); a cut healed since (and
    within ``RETRANSMIT_MAX_S``) may have begun a stall that still lasts. Without it, a cut
    healed within the quiet span may."""
    times: dict[str, dict[str, list[float]]] = {}  # job -> agent run -> its keep-alives
    ranks: dict[str, set[int]] = {}  # agent run -> the ranks it started
    ended: set[str] = set()
    for row in rows:
        run = str(row.get("run") or "")
        if not is_agent_run(run):
            continue
        if contract.is_heartbeat(row):
            times.setdefault(run.split("/", 1)[0], {}).setdefault(run, []).append(
                float(row["wall_time"])
            )
        elif row.get("kind") == contract.WORKER and row.get("state") == "START":
            if row.get("rank") is not None:
                ranks.setdefault(run, set()).add(int(row["rank"]))
        elif is_verdict(row):
            ended.add(run)
    cuts: dict[tuple[str, int], Cut] = {}
    for job, agents in times.items():
        for kept in agents.values():
            kept.sort()
        every = sorted(t for kept in agents.values() for t in kept)
        first, second = (
            sorted((kept[-1] for kept in agents.values()), reverse=True) + [-math.inf]
        )[:2]
        judged_at = first if now is None else now
        stalls_since = (
            judged_at - _QUIET_S
            if last_step is None
            else max(last_step, judged_at - RETRANSMIT_MAX_S)
        )
        for run, kept in agents.items():
            if run in ended:
                continue
            # The newest keep-alive of another agent: the job's, unless it is this agent's own.
            other = second if kept[-1] == first else first
            cut = _newest_cut(kept, other, every, judged_at, stalls_since)
            cuts.update({(job, rank): cut for rank in ranks.get(run, ())} if cut else {})
    return cuts


def _newest_cut(
    kept: list[float], other: float, every: list[float], now: float, stalls_since: float
) -> Cut | None:
    """An agent's newest cut from its keep-alives' times (sorted), the newest of another agent
    of its job (-inf: none) and every agent's (sorted): the keep-alives inside one of its gaps
    are another agent's. A healed cut counts only where it healed after ``stalls_since``: one
    healed before it began no stall that lasts."""
    last = kept[-1]
    if other - last > _QUIET_S:
        return Cut(last)
    if now - last > _QUIET_S and other > last and now - other <= _QUIET_S:
        return Cut(last, confirmed=False)  # overdue while another agent's still come
    for since, healed in zip(reversed(kept[:-1]), reversed(kept[1:]), strict=True):
        if healed < stalls_since:
            break  # every rank has stepped since it healed
        if healed - since <= _QUIET_S:
            continue
        # Another agent reached the store well after this one's last, while this one could not.
        if bisect.bisect_right(every, since + _QUIET_S) < bisect.bisect_left(every, healed):
            return Cut(since, healed, confirmed=False)
    return None
