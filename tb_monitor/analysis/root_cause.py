"""Reading one rank's failure: what its own records and its agent's say, as a ``RootCause``.

A rank that raised records its own FAILED (``tb_monitor.rank.worker``: exception,
message, traceback); its agent records FAILED too, with the exit code and, under ``@record``,
torchelastic's error file. A rank killed by a signal records nothing itself. ``cause_of`` reads
whichever is there; ``root_cause`` picks an attempt's: its earliest real failure. Not real, in
this order of last resort: a node that vanished (none of its ranks recorded anything since the
first failure, its agent silent since before it), a node cut off from the rendezvous store, a
bare exit code where either is known (its agent's record alone: no signal, no message), a
failure that reads as a lost peer (a connection error, a timeout), and the agent's own
shutdown of the group (the signal agents stop workers with, and the SIGKILL it sends a rank
that ignored it once another rank of its own had failed, not as a lost peer just before: that
is the kill's echo): those ranks are collateral. A bare exit code younger than ``UNTOLD_S`` is
``untold``: a lost peer's exit reads the same until the rank's own record comes, so no rank is
known to wait for it yet.

A vanished node (``kill -9`` of a machine) is one cause naming every rank it took with it, dated
by the survivors: its own last flushed records can predate the loss by a flush interval, so
the date is the first thing another node recorded after them that says something broke (a
rank's failure, its agent's failed keep-alive or store call, its verdict).

A node cut off by a network partition records its own end: its agent loses the rendezvous
store (a keep-alive or store call fails to connect) while the store's side still records, and
stops its ranks; the other side's ranks fail on connections that time out across the cut. The
cause is the ranks of every node that lost the store, cut off from the others, dated by the
first failure a rank on the other side recorded: a lost peer there is collateral, and so is a
rank of the cut-off node that timed out first. A store lost once every other agent had ended
is no cut (the store's host was gone).
"""

from __future__ import annotations

import json
import math
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "AGENT_PREFIX",
    "WORKER_PREFIX",
    "RankEnding",
    "RootCause",
    "cause_of",
    "is_lost_peer",
    "is_unexplained",
    "is_untold",
    "ranks_words",
    "root_cause",
]

WORKER_PREFIX = "tb_monitor.worker.status."  # a worker's own record (rank.worker)
AGENT_PREFIX = "torchelastic.worker.status."  # its agent's record of it
#: Exceptions a rank raises because a peer went away: never the root cause while another is known.
_PEER_LOST = re.compile(
    r"connection (?:closed|reset|refused|aborted)|broken pipe|read error|write error|"
    r"DistBackendError|DistNetworkError|peer|socket|communicator was aborted|"
    r"ProcessGroup\w* .*(?:abort|timeout|timed out)|timed out|timeout",
    re.IGNORECASE,
)
#: Signals an agent stops its workers with: a rank ended by one went down with the group.
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
#: Where a candidate stands, first wins: a real failure, a vanished node, a node cut off from the
#: store, a bare exit code (its agent's record alone, no signal, no message: a lost peer's exit
#: reads the same until the rank's own record comes; below a lost node only where one is
#: known), a lost peer, a stop.
_REAL, _VANISHED, _CUT_OFF, _UNTOLD, _LOST_PEER, _STOPPED = range(6)
#: A bare exit code is untold this long after it, as the newest agent record dates the read:
#: the rank's own record comes within its writer's flush, its killer's within a monitor loop.
UNTOLD_S = 10.0
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_EMPTY_ERROR = {"<NONE>", "<N/A>", ""}


@dataclass(frozen=True)
class RootCause:
    """The failure that brought an attempt down: which rank, what, when, and how it is known."""

    rank: int
    time: float  # when it failed (the worker's own record; else when its agent saw it)
    reason: str  # one line: "ValueError: bad batch", "killed by SIGKILL", "exited with code 3"
    exception: str | None = None  # the exception's type, as its traceback names it
    message: str | None = None  # the exception message's last line
    traceback: str | None = None
    exit_code: int | None = None  # the process's exit code where its agent (or it) recorded one
    signal: str | None = None  # "SIGKILL": the signal that ended it, where known
    host: str | None = None
    source: str = "worker"  # "worker", "error_file" (@record), "agent", "vanished" or "cut_off"
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    #: Every rank it names: ``(rank,)``, or all the ranks a lost node took with it.
    ranks: tuple[int, ...] = ()
    node: str | None = None  # a lost node: "host (pid N)", its agent
    seen_by: str | None = None  # a lost node: who recorded the loss first ("rank 0", a node)
    cut_off_from: tuple[int, ...] = ()  # a partition: the ranks on the store's side of the cut
    agent: str | None = field(default=None, compare=False, repr=False)  # a lost node's agent run
    #: A bare exit code younger than ``UNTOLD_S``: it may be the echo of a failure not recorded.
    untold: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if not self.ranks:
            object.__setattr__(self, "ranks", (self.rank,))


@dataclass
class RankEnding:
    """What the records of one rank in one attempt say about how it ended."""

    own_failed: Mapping[str, Any] | None = None  # its own FAILED record
    agent_failed: Mapping[str, Any] | None = None  # its agent's FAILED record of it
    ends: list[Mapping[str, Any]] = field(default_factory=list)  # every record that ended it
    succeeded: bool = False
    host: str | None = None
    agent: str | None = None  # its agent's run, from the agent's records of it
    last_seen: float = -math.inf  # its newest record

    @property
    def failed(self) -> bool:
        return self.own_failed is not None or self.agent_failed is not None

    def add(self, row: Mapping[str, Any]) -> None:
        """Take one of the rank's records of this attempt into account."""
        name, state = str(row.get("name") or ""), row.get("state")
        self.host = self.host or row.get("hostname")
        self.last_seen = max(self.last_seen, float(row["wall_time"]))
        if name.startswith(AGENT_PREFIX):
            self.agent = self.agent or str(row["run"])
        if state == "FAILED" and name.startswith(WORKER_PREFIX):
            self.own_failed = self.own_failed or row
        elif state == "FAILED":
            self.agent_failed = self.agent_failed or row
        if state == "SUCCEEDED":
            self.succeeded = True
        if state in ("FAILED", "TERMINATED", "UNHEALTHY", "STOPPED"):
            self.ends.append(row)


def _exception_of(text: str | None) -> tuple[str | None, str | None]:
    """``("ValueError", "its last line")`` from "ValueError: ..." text; (None, None) otherwise."""
    if not text:
        return None, None
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return None, None
    found = _EXCEPTION_LINE.match(lines[0].strip())
    if not found or " " in found.group(1):
        return None, lines[-1].strip()
    rest = [found.group(2) or "", *lines[1:]]
    rest = [line for line in rest if line.strip()]
    return found.group(1), (rest[-1].strip() if rest else "")


def _error_file(raw: str | None) -> tuple[str | None, str | None]:
    """torchelastic's error file JSON (``raw_error`` of its agent's FAILED): message, traceback."""
    if not raw or not str(raw).startswith("{"):
        return None, None
    try:
        data = json.loads(raw)
    except ValueError:
        return None, None
    message = data.get("message") if isinstance(data, Mapping) else None
    if isinstance(message, str):
        return (None if message in _EMPTY_ERROR else message), None
    if not isinstance(message, Mapping):
        return None, None
    extra = message.get("extraInfo") or {}
    trace = extra.get("py_callstack") if isinstance(extra, Mapping) else None
    text = message.get("message")
    return (text if isinstance(text, str) and text not in _EMPTY_ERROR else None), (
        trace if isinstance(trace, str) else None
    )


def _int(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exit_code(ending: RankEnding) -> int | None:
    """The exit code its agent recorded, else its own record's."""
    for row in (ending.agent_failed, ending.own_failed):
        if row is not None:
            code = _int((row.get("metadata") or {}).get("exit_code"))
            if code is not None:
                return code
    return None


def _what_failed(ending: RankEnding) -> tuple[str | None, str | None, str | None, str, float]:
    """``(exception, message, traceback, source, time)`` from the records that say most."""
    own, agent = ending.own_failed, ending.agent_failed
    if own is not None:
        trace = own.get("error_trace")
        exception, message = _exception_of(own.get("message") or trace)
        if exception is None and trace:
            exception, message = _exception_of(str(trace).strip().splitlines()[-1])
        return exception, message, trace, "worker", float(own["wall_time"])
    assert agent is not None
    text, trace = _error_file(agent.get("error_trace"))
    exception, message = _exception_of(text)
    return exception, message, trace, ("error_file" if text else "agent"), float(agent["wall_time"])


def _reason(
    exception: str | None, message: str | None, sig: str | None, exit_code: int | None
) -> str:
    """The failure in one line for humans."""
    if exception:
        return f"{exception}: {message}" if message else exception
    if sig:
        return f"killed by {sig}"
    if message:
        return message
    if exit_code is not None:
        return f"exited with code {exit_code}"
    return "failed"


def cause_of(rank: int, ending: RankEnding) -> RootCause:
    """The rank's failure as its own records and its agent's tell it."""
    exit_code = _exit_code(ending)
    sig = _signal_name(-exit_code) if exit_code is not None and exit_code < 0 else None
    exception, message, trace, source, when = _what_failed(ending)
    return RootCause(
        rank=rank,
        time=when,
        reason=_reason(exception, message, sig, exit_code),
        exception=exception,
        message=message,
        traceback=trace or None,
        exit_code=exit_code,
        signal=sig,
        host=ending.host,
        source=source,
        record=ending.own_failed if ending.own_failed is not None else ending.agent_failed,
    )


def is_lost_peer(cause: RootCause) -> bool:
    """Whether ``cause`` reads as a rank that lost a peer (a connection error, a timeout): the
    rank it lost may not have recorded its own end yet."""
    return bool(_PEER_LOST.search(f"{cause.exception or ''}: {cause.message or ''}"))


def is_untold(cause: RootCause) -> bool:
    """Whether ``cause`` is a bare exit code: its agent's record alone, with no signal and no
    message; a lost peer's exit reads the same until the rank's own record comes."""
    return cause.signal is None and cause.source == "agent" and cause.ranks == (cause.rank,)


def is_unexplained(cause: RootCause) -> bool:
    """Whether ``cause`` may be the echo of a failure not recorded yet (a lost peer, a bare
    exit code just read): the ranks with no record then are suspects, not ranks that wait."""
    return is_lost_peer(cause) or cause.untold


def _standing(cause: RootCause, ending: RankEnding, by_agent: list[RootCause]) -> int:
    """How real a failure is: its own exception, or what its agent saw (``_REAL`` ...)."""
    if ending.own_failed is not None:
        return _LOST_PEER if is_lost_peer(cause) else _REAL
    if cause.signal in _STOP_SIGNALS:
        return _STOPPED
    # SIGKILL after another rank of the same agent failed on its own (not by a signal): the
    # agent's escalation of the stop it began then. Not after a lost peer recorded less than
    # UNTOLD_S before it: that is the echo of this kill (the agent records it at its next look),
    # and an escalation comes only after the stop's grace (30 s in torchelastic).
    escalated = any(
        other.rank != cause.rank
        and other.signal is None
        and other.time <= cause.time
        and not (is_lost_peer(other) and cause.time - other.time < UNTOLD_S)
        for other in by_agent
    )
    return _STOPPED if cause.signal == "SIGKILL" and escalated else _REAL


def ranks_words(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 2, 3``: how the report names ranks."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _lost_nodes(
    by_rank: Mapping[int, RankEnding], agent_last: Mapping[str, float], first: float
) -> dict[str, list[int]]:
    """Per agent silent since before the first failure, none of whose ranks recorded anything
    since: its ranks that recorded no end. A node killed whole leaves nothing else; a rank of it
    that recorded its lost peer lived on (its agent was only between keep-alives)."""
    lost: dict[str, list[int]] = {}
    heard: set[str] = set()
    for rank, ending in sorted(by_rank.items()):
        silent = ending.agent is not None and agent_last.get(ending.agent, -math.inf) < first
        if ending.last_seen >= first:
            heard.add(str(ending.agent))
        elif silent and not (ending.failed or ending.succeeded or ending.ends):
            lost.setdefault(str(ending.agent), []).append(rank)
    return {agent: ranks for agent, ranks in lost.items() if agent not in heard}


def _node_lost(
    agent: str,
    ranks: list[int],
    by_rank: Mapping[int, RankEnding],
    causes: Mapping[int, RootCause],
    alarms: Mapping[str, Sequence[float]],
    nodes: Mapping[str, str],
) -> RootCause:
    """A vanished node as one cause: every rank of it, dated by the first survivor's record
    of trouble after the node's last record (its own last record where none followed)."""
    last = max(by_rank[rank].last_seen for rank in ranks)
    seen = [(c.time, f"rank {r}") for r, c in causes.items() if by_rank[r].agent != agent]
    seen += [
        (t, f"the agent on {nodes.get(run, run)}")
        for run, times in alarms.items()
        if run != agent
        for t in times
    ]
    when, seen_by = min((s for s in seen if s[0] >= last), default=(last, None))
    host = by_rank[ranks[0]].host
    return RootCause(
        rank=ranks[0],
        time=when,
        reason=f"node {host or nodes.get(agent, agent)} lost: {ranks_words(ranks)}",
        host=host,
        source="vanished",
        ranks=tuple(ranks),
        node=nodes.get(agent, host),
        seen_by=seen_by,
        agent=agent,
    )


def _cut_off(
    by_rank: Mapping[int, RankEnding],
    agent_last: Mapping[str, float],
    cut: Mapping[str, float],
    causes: Mapping[int, RootCause],
    nodes: Mapping[str, str],
) -> RootCause | None:
    """The ranks of every node whose agent lost the store while another agent still recorded,
    as one cause: cut off from the other ranks, dated by the first failure among those."""
    lost = {
        run: t
        for run, t in cut.items()
        if any(last >= t for other, last in agent_last.items() if other not in cut)
    }
    ranks = [rank for rank, ending in sorted(by_rank.items()) if ending.agent in lost]
    others = tuple(rank for rank in sorted(by_rank) if rank not in ranks)
    if not ranks or not others:
        return None
    seen = [(c.time, f"rank {r}") for r, c in causes.items() if r in others]
    when, seen_by = min(seen, default=(min(lost.values()), None))
    first = by_rank[ranks[0]]
    node = nodes.get(str(first.agent), first.host)
    return RootCause(
        rank=ranks[0],
        time=when,
        reason=f"node {first.host or node} cut off from the rendezvous store: "
        f"{ranks_words(ranks)} from {ranks_words(others)}",
        host=first.host,
        source="cut_off",
        ranks=tuple(ranks),
        node=node,
        seen_by=seen_by,
        cut_off_from=others,
    )


def root_cause(
    by_rank: Mapping[int, RankEnding],
    agent_last: Mapping[str, float],
    alarms: Mapping[str, Sequence[float]] | None = None,
    nodes: Mapping[str, str] | None = None,
    cut: Mapping[str, float] | None = None,
) -> RootCause | None:
    """The attempt's root cause: its earliest real failure (see the module docstring), or None
    where no rank failed. ``agent_last``: per agent run, the time of its newest record;
    ``alarms``: per agent run, when it recorded trouble (a failed record, its verdict), which
    dates a lost node; ``nodes``: per agent run, its node as "host (pid N)"; ``cut``: per agent
    run, when it first failed to reach the rendezvous store (``analysis.jobs.is_store_lost``)."""
    causes = {rank: cause_of(rank, e) for rank, e in by_rank.items() if e.failed}
    if not causes:
        return None
    first = min(c.time for c in causes.values())
    by_agent: dict[str | None, list[RootCause]] = {}
    for rank, cause in causes.items():
        by_agent.setdefault(by_rank[rank].agent, []).append(cause)
    ranked = [
        (_standing(cause, by_rank[rank], by_agent[by_rank[rank].agent]), cause.time, rank, cause)
        for rank, cause in causes.items()
    ]
    for agent, ranks in _lost_nodes(by_rank, agent_last, first).items():
        lost = _node_lost(agent, ranks, by_rank, causes, alarms or {}, nodes or {})
        ranked.append((_VANISHED, lost.time, lost.rank, lost))
    cut_off = _cut_off(by_rank, agent_last, cut or {}, causes, nodes or {})
    if cut_off is not None:
        ranked.append((_CUT_OFF, cut_off.time, cut_off.rank, cut_off))
    if any(c[0] in (_VANISHED, _CUT_OFF) for c in ranked):  # it explains a bare exit code
        ranked = [(_UNTOLD if is_untold(c[3]) else c[0], *c[1:]) for c in ranked]
    found = min(ranked, key=lambda c: c[:3])[3]
    now = max(agent_last.values(), default=first)
    return (
        replace(found, untold=True) if is_untold(found) and now - found.time < UNTOLD_S else found
    )
