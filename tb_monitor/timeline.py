"""The timeline model: the states and their colours, which lane a record belongs to, and the
intervals records form.

The Timeline tab (``tb_plugin``), the Perfetto export and the notebook figure all draw from
here, so a lane, an attempt or a state's colour is the same thing wherever a user looks at it.
"""

from __future__ import annotations

import bisect
import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tb_monitor import contract
from tb_monitor.contract.runs import decode_part

__all__ = [
    "END_STATES",
    "EXTRA_COLORS",
    "SLOWNESS_COLORS",
    "STATES",
    "STOPPED_AT_END",
    "STOPPED_BY_RESTART",
    "Lane",
    "Span",
    "State",
    "attempt_of",
    "lane_of",
    "marks_time_only",
    "spans",
    "state_color",
]


@dataclass(frozen=True)
class State:
    """One state a record can carry: its name, its colour, and how alarming it is."""

    name: str
    color: str


#: Every known state, least alarming first: where several share a level-of-detail bucket, the
#: latest in this order gives the bucket its colour. ``""`` is a record without a state.
STATES = (
    State("", "#78909c"),
    State("INIT", "#9aa0a6"),
    State("START", "#4fc3f7"),
    State("RUNNING", "#1e88e5"),
    State("RENDEZVOUS", "#5c6bc0"),
    State("ASSIGN_WORKER_RANKS", "#9575cd"),
    State("HEALTHY", "#26a69a"),
    State("SUCCEEDED", "#43a047"),
    State("STOPPED", "#8d6e63"),
    State("TERMINATED", "#ab47bc"),
    # A rank that went down because another rank failed (tb_monitor.analysis.restarts): its
    # agent terminated it, or it failed in a collective with the rank that was gone.
    State("STOPPED_BY_RESTART", "#b0a8b9"),
    # The same in the job's last attempt: no restart followed, the group stopped with the job.
    State("STOPPED_AT_END", "#c9b79c"),
    State("UNHEALTHY", "#fb8c00"),
    State("FAILED", "#e53935"),
)
#: The diverging scale of relative slowness (a rank's compute over the median of all ranks): half
#: as slow or faster, the median, twice as slow or slower; the Ranks view and the notebook use it.
SLOWNESS_COLORS = ("#2166ac", "#f7f7f7", "#b2182b")
#: Colours for states not listed above, picked by a stable hash of the name.
EXTRA_COLORS = ("#00897b", "#c0ca33", "#6d4c41", "#d81b60", "#3949ab", "#7cb342")
_COLORS = {state.name: state.color for state in STATES}
#: The state of a rank that went down because another rank failed, where a restart followed
#: (``tb_monitor.analysis.attempts``), and where the job ended instead.
STOPPED_BY_RESTART, STOPPED_AT_END = "STOPPED_BY_RESTART", "STOPPED_AT_END"


def state_color(name: str | None) -> str:
    """The colour of a state, the same in the Timeline tab, the notebook and the export."""
    name = name or ""
    color = _COLORS.get(name)
    if color is not None:
        return color
    h = 0
    for c in name:
        h = (h * 31 + ord(c)) & 0xFFFFFFFF
    return EXTRA_COLORS[h % len(EXTRA_COLORS)]


#: States that end a worker's attempt (torchelastic's WorkerState values, and TERMINATED).
END_STATES = frozenset({"SUCCEEDED", "FAILED", "TERMINATED", "UNHEALTHY", "STOPPED"})
_ROUND = re.compile(r"\bround (\d+)\b")
_OPEN, _CLOSE, _NUMBER, _WHOLE = "open", "close", "number", "whole"


@dataclass(frozen=True)
class Lane:
    """One swimlane: a node's rendezvous, an agent, a worker rank, or a run's other events."""

    group: str  # the job: its run id, else the run's top directory
    kind: str
    label: str
    key: tuple[Any, ...]  # what makes the lane one lane

    def sort_key(self) -> tuple[Any, ...]:
        """Jobs; then rendezvous, agents, workers, other events; then labels, numbers by value."""
        return self._sort_key

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        """Made once per lane: every record of a big job is filed by its lane, in dicts."""
        return hash((self.group, self.kind, self.label, self.key))

    def __getstate__(self) -> dict[str, Any]:
        # A string's hash differs from one process to the next: made again where it is read.
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}

    @functools.cached_property
    def _sort_key(self) -> tuple[Any, ...]:
        """Made once per lane: a big job's lanes are sorted again at every refresh."""
        natural = tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", self.label))
        return (self.group, contract.KINDS.index(self.kind), natural)


class Span(NamedTuple):
    """A mark on a lane: an interval (``end`` set) or a point, with the records it stands for.
    A named tuple: a big job's records make many, each much cheaper to make than a frozen
    dataclass's."""

    lane: Lane
    begin: float  # wall time, seconds since the epoch
    end: float | None
    label: str
    state: str | None  # what colours it: an interval's outcome, a point's own state
    number: int | None  # worker and agent marks: the attempt; a rendezvous round: its number
    rows: tuple[Mapping[str, Any], ...]
    open: bool = False  # an interval whose end has not been recorded (yet)


def lane_of(row: Mapping[str, Any]) -> Lane:
    """The lane of a decoded timeline record (``run``, ``kind`` and ``contract.FIELDS``).

    Rendezvous events: one lane per node (host, agent pid, local id); worker events: one lane per
    rank, the agent's records and the worker's own together; agent and other events: one lane
    per run.
    """
    run, kind = row["run"], row["kind"]
    group = str(
        row.get("run_id") or (decode_part(run.split("/", 1)[0]) if "/" in run else run or ".")
    )
    base = run.rsplit("/", 1)[-1] if run else "."
    if kind == contract.RENDEZVOUS:
        host, pid, local = row.get("hostname"), row.get("pid"), row.get("local_id")
        extra = f", id {local}" if local not in (None, 0) else ""
        # A record made before the node had its local id (the store's INIT) says None: same node.
        return Lane(group, kind, f"{host} (pid {pid}{extra})", (host, pid, local or 0))
    if kind == contract.WORKER and row.get("rank") is not None:
        return Lane(group, kind, f"rank {row['rank']}", (row["rank"],))
    if kind == contract.AGENT and row.get("hostname") and "/" not in run:
        return Lane(group, kind, f"agent {row['hostname']}", (run,))
    return Lane(group, kind, base, (run,))


def attempt_of(row: Mapping[str, Any]) -> int | None:
    """The restart count a record was written in: the agent's or the worker's own."""
    metadata = row.get("metadata") or {}
    for key in ("agent_restarts", "restart_count"):
        value = metadata.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _role(row: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """Part a record plays in an interval, and its attempt or round number."""
    kind, state = row["kind"], row.get("state")
    if kind == contract.WORKER:
        role = _OPEN if state == "START" else _CLOSE if state in END_STATES else None
        return role, None  # a worker attempt's number comes from its agent's rendezvous round
    if kind == contract.RENDEZVOUS:
        message = row.get("message") or ""
        if state == "FAILED":
            role = _CLOSE
        elif "attempts to join the next round" in message:
            role = _OPEN
        elif "has joined round" in message:
            role = _CLOSE
        elif "as complete" in message:
            role = _NUMBER
        else:  # heartbeats and the like: most records, so no regex for them
            return None, None
        found = _ROUND.search(message)
        return role, int(found.group(1)) if found else None
    if row.get("name") == contract.FR_COLLECTIVE:
        return _WHOLE, None
    return None, None


def marks_time_only(row: Mapping[str, Any]) -> bool:
    """Whether a rendezvous record tells the analyses only when its agent was there: it plays
    no part in a round (``_role``: no join, no joined, no FAILED, no round number) and opens no
    rendezvous (``INIT``). Of such a record repeated all day (the sync of every keep-alive
    round), the earliest and the newest say all the others do."""
    return (
        row["kind"] == contract.RENDEZVOUS and row.get("state") != "INIT" and _role(row)[0] is None
    )


def spans(
    rows: Iterable[Mapping[str, Any]],
    lane_of: Callable[[Mapping[str, Any]], Lane] = lane_of,
) -> list[Span]:
    """Every record as part of exactly one span, sorted by time; ``lane_of`` gives each
    record's lane (a caller that knows them already, as the plugin's store does, saves
    making one per record: a third of this function over a big job's records).

    Intervals: a worker's attempt (START to its first end state), a node's rendezvous round (its
    join attempt to joining, or FAILED), a collective a Flight Recorder dump held (its own
    start to end, ``contract.FR_COLLECTIVE``). A START before the previous attempt ended cuts that one
    short (state RUNNING); an interval still open at the end runs to the last record, ``open``.

    A worker attempt is numbered by the rendezvous round its agent joined before starting it:
    the round is the same on every node, while ``agent_restarts`` (and the workers'
    ``TORCHELASTIC_RESTART_COUNT``) counts only the agent's own failures, so an agent restarted
    by another node's failure reports its second attempt as 0. Without rendezvous records, the
    restart count is used.
    """
    rows = list(rows)
    # Records whose time is not a number go last: in the sort's key they would leave the
    # others out of time order (every lane's intervals, and the rounds bisected below).
    timed = [row for row in rows if row["wall_time"] == row["wall_time"]]
    timed.sort(key=_time)
    ordered = timed
    if len(timed) < len(rows):
        ordered = timed + [row for row in rows if row["wall_time"] != row["wall_time"]]
    roles = [_role(row) for row in ordered]  # once each: a rendezvous record's is a search
    rounds = _rounds_joined(ordered, roles)
    by_lane: dict[Lane, list[int]] = {}  # per lane, its records' positions in ``ordered``
    for at, row in enumerate(ordered):
        by_lane.setdefault(lane_of(row), []).append(at)
    last = (timed or ordered)[-1]["wall_time"] if ordered else 0.0
    out: list[Span] = []
    for lane, positions in by_lane.items():
        opened: Mapping[str, Any] | None = None
        number: int | None = None
        for at in positions:
            row, (role, row_number) = ordered[at], roles[at]
            if role == _OPEN:
                if opened is not None:
                    out.append(_interval(lane, opened, row["wall_time"], "RUNNING", number, ()))
                opened = row
                number = row_number if lane.kind == contract.RENDEZVOUS else _attempt(row, rounds)
            elif role == _CLOSE and opened is not None:
                number = row_number if row_number is not None else number
                out.append(
                    _interval(lane, opened, row["wall_time"], row.get("state"), number, (row,))
                )
                opened = None
            elif role == _WHOLE:
                out.append(_collective(lane, row))
            else:
                if role == _NUMBER and opened is not None and row_number is not None:
                    number = row_number
                out.append(_point(lane, row, _point_number(lane, row, number, rounds)))
        if opened is not None:
            out.append(_interval(lane, opened, last, "RUNNING", number, (), still_open=True))
    out.sort(key=_begin)
    return out


_time = operator.itemgetter("wall_time")
_begin = operator.attrgetter("begin")


_Rounds = dict[str, tuple[list[float], list[int]]]


def _rounds_joined(
    rows: list[Mapping[str, Any]], roles: list[tuple[str | None, int | None]]
) -> _Rounds:
    """Per run (agent), the times and numbers of the rendezvous rounds it joined, in the order
    of ``rows`` (time order, those without a number last; ``roles``: each one's ``_role``); a
    round whose time is not a number is before no record, so left out."""
    joined: _Rounds = {}
    for row, (role, number) in zip(rows, roles, strict=True):
        if role == _CLOSE and number is not None and row["kind"] == contract.RENDEZVOUS:
            t = row["wall_time"]
            if row.get("state") != "FAILED" and t == t:
                times, numbers = joined.setdefault(row["run"], ([], []))
                times.append(t)
                numbers.append(number)
    return joined


def _attempt(row: Mapping[str, Any], rounds: _Rounds) -> int | None:
    """A worker record's attempt: its agent's last round joined before it, else its restart count."""
    times, numbers = rounds.get(row["run"], _NO_ROUNDS)
    t = row["wall_time"]
    joined = bisect.bisect_right(times, t) if t == t else 0  # a NaN time: after no round
    return numbers[joined - 1] if joined else attempt_of(row)


_NO_ROUNDS: tuple[list[float], list[int]] = ([], [])


def _point_number(
    lane: Lane,
    row: Mapping[str, Any],
    lane_number: int | None,
    rounds: _Rounds,
) -> int | None:
    """A point's attempt: on a worker lane the lane's latest, on an agent lane its round."""
    if lane.kind == contract.WORKER:
        return lane_number if lane_number is not None else attempt_of(row)
    if lane.kind == contract.AGENT:
        return _attempt(row, rounds)
    return None


def _point(lane: Lane, row: Mapping[str, Any], number: int | None) -> Span:
    name, state = str(row.get("name") or ""), row.get("state")
    if lane.kind == contract.RENDEZVOUS:
        label = name.rsplit(":", 1)[-1]  # "dynamic_rendezvous.py:Class.method" -> "Class.method"
    elif lane.kind in (contract.AGENT, contract.WORKER) and state:
        label = str(state)
    else:
        label = name
    return Span(lane, row["wall_time"], None, label, state, number, (row,))


def _collective(lane: Lane, row: Mapping[str, Any]) -> Span:
    """A collective from a Flight Recorder dump (``contract.FR_COLLECTIVE``): an interval of
    its own, from its start to the ``end`` it carries; ``open`` when it had not completed."""
    data = row.get("metadata") or {}
    end = data.get("end")
    begin = row["wall_time"]
    if not isinstance(end, (int, float)) or isinstance(end, bool) or not end >= begin:
        end = begin
    label = f"{data.get('profiling_name')} #{data.get('collective_seq_id')} ({data.get('desc')})"
    state = str(data.get("state") or "").upper()
    return Span(lane, begin, float(end), label, state, None, (row,), bool(data.get("open")))


def _interval(
    lane: Lane,
    opened: Mapping[str, Any],
    end: float,
    state: str | None,
    number: int | None,
    closing: tuple[Mapping[str, Any], ...],
    still_open: bool = False,
) -> Span:
    noun = "round" if lane.kind == contract.RENDEZVOUS else "attempt"
    label = noun if number is None else f"{noun} {number}"
    if lane.kind != contract.RENDEZVOUS and state:
        label += f": {state}"
    return Span(
        lane, opened["wall_time"], end, label, state, number, (opened, *closing), still_open
    )
