"""Restarts: one row per attempt of an elastic job, computed from its timeline events.

``restarts(source)`` answers "why did it restart": per attempt, the rank whose failure brought the
group down (the root cause: its exception, message, traceback, or the exit code / signal its agent
saw), the ranks that went down with it (collateral), the time lost until the next attempt, and
how the rendezvous membership changed. ``attempts(rows)`` is the same analysis over decoded
records as plain Python objects: the Timeline plugin, ``tb-monitor report`` and the notebook
helpers all draw from it, so they always agree. pandas is imported only for the DataFrames.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tb_monitor import contract
from tb_monitor.logdir import readers
from tb_monitor.timeline import Span, spans

if TYPE_CHECKING:
    import pandas

__all__ = [
    "RESTARTS_COLUMNS",
    "STOPPED_BY_RESTART",
    "SUMMARY_COLUMNS",
    "Attempt",
    "RootCause",
    "attempt_dict",
    "attempts",
    "finished_jobs",
    "job_spans",
    "mark_restarts",
    "restart_starts",
    "restart_summary",
    "restarts",
    "timeline_rows",
]

#: The state of a rank that went down because another rank failed (``tb_monitor.timeline.STATES``).
STOPPED_BY_RESTART = "STOPPED_BY_RESTART"

_ATTEMPT = ("job", "attempt", "start", "end", "duration_s", "outcome")  # every table starts so

SUMMARY_COLUMNS = (*_ATTEMPT, "failed_ranks", "first_failed_rank", "rendezvous_s")

RESTARTS_COLUMNS = (
    *_ATTEMPT,
    "root_cause_rank",
    "root_cause_host",
    "exception",
    "message",
    "reason",
    "traceback",
    "failed_at",
    "exit_code",
    "signal",
    "time_lost_s",
    "collateral_ranks",
    "failed_ranks",
    "ranks",
    "nodes",
    "nodes_joined",
    "nodes_left",
    "rendezvous_s",
)

_WORKER_PREFIX = "tb_monitor.worker.status."  # a worker's own record (integrations.worker)
_AGENT_PREFIX = "torchelastic.worker.status."  # its agent's record of it
#: Exceptions a rank raises because a peer went away: never the root cause while another is known.
_PEER_LOST = re.compile(
    r"connection (?:closed|reset|refused|aborted)|broken pipe|read error|write error|"
    r"DistBackendError|DistNetworkError|peer|socket|communicator was aborted|"
    r"ProcessGroup\w* .*(?:abort|timeout|timed out)|timed out|timeout",
    re.IGNORECASE,
)
#: Signals an agent stops its workers with: a rank ended by one went down with the group.
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_EMPTY_ERROR = {"<NONE>", "<N/A>", ""}
_JOINED = re.compile(r"\bhas joined round (\d+)\b")


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
    source: str = "worker"  # "worker" (its own record), "error_file" (@record) or "agent"
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Attempt:
    """One attempt of one job: the workers started after one rendezvous round, and how it ended."""

    job: str
    attempt: int  # the rendezvous round it followed
    start: float
    end: float
    outcome: str  # FAILED, SUCCEEDED, RUNNING, RESTARTED (cut short without a failure), ...
    ranks: tuple[int, ...]
    failed_ranks: tuple[int, ...]
    root_cause: RootCause | None
    collateral_ranks: tuple[int, ...]
    time_lost_s: float | None  # root cause -> next attempt's start, or -> the job's last record
    nodes: tuple[str, ...]
    nodes_joined: tuple[str, ...]
    nodes_left: tuple[str, ...]
    rendezvous_s: float
    #: Per collateral rank, its records that ended the attempt (drawn as STOPPED_BY_RESTART).
    collateral_records: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def duration_s(self) -> float:
        return self.end - self.start


# ---------------------------------------------------------------------------------------------
# Sources: a logdir (local or URL) or a DataFrame from read_events
# ---------------------------------------------------------------------------------------------


def _is_frame(source: Any) -> bool:
    pandas_module = sys.modules.get("pandas")
    return pandas_module is not None and isinstance(source, pandas_module.DataFrame)


def _check_source(source: Any, caller: str) -> None:
    if isinstance(source, (str, os.PathLike)) or _is_frame(source):
        return
    raise TypeError(
        f"{caller}() takes a logdir (a path or an s3:// / gs:// URL) or the DataFrame "
        f"read_events returns, not {type(source).__name__}: {source!r:.100}"
    )


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    return value


def timeline_rows(source: Any, caller: str = "timeline_rows") -> list[dict[str, Any]]:
    """Decoded timeline records of ``source``: a logdir (path or URL), or ``read_events``' frame.

    Raises TypeError at once, naming the value, for anything else; a frame without the
    ``read_events`` columns is a ValueError naming the ones missing.
    """
    _check_source(source, caller)
    if not _is_frame(source):
        return list(readers.decode_timeline(readers.iter_timeline(source)))
    missing = [c for c in ("run", "wall_time", "kind") if c not in source.columns]
    if missing:
        raise ValueError(
            f"{caller}(): the DataFrame lacks the columns {missing} that read_events gives"
        )
    rows = []
    for record in source.to_dict("records"):
        row: dict[str, Any] = dict.fromkeys(contract.FIELDS)
        row.update({k: _clean(v) for k, v in record.items()})
        row["wall_time"] = float(record["wall_time"])
        if not isinstance(row.get("metadata"), Mapping):
            row["metadata"] = {}
        rows.append(row)
    return rows


def job_spans(source: Any) -> list[Span]:
    """Every timeline mark (point or interval) of the jobs in ``source`` (logdir or frame)."""
    return spans(timeline_rows(source, "job_spans"))


def restart_starts(marks: list[Span]) -> list[tuple[str, int, float]]:
    """``(job, attempt, start)`` of every attempt after the first: its first worker START."""
    starts: dict[tuple[str, int], float] = {}
    for span in _worker_attempts(marks):
        key = (span.lane.group, span.number)
        starts[key] = min(starts.get(key, math.inf), span.begin)
    return sorted((job, attempt, t) for (job, attempt), t in starts.items() if attempt > 0)


def _worker_attempts(marks: list[Span]) -> list[Span]:
    return [
        span
        for span in marks
        if span.lane.kind == contract.WORKER and span.end is not None and span.number is not None
    ]


# ---------------------------------------------------------------------------------------------
# Reading one rank's failure
# ---------------------------------------------------------------------------------------------


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
    value = _clean(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class _Rank:
    """What the records of one rank in one attempt say about how it ended."""

    own_failed: Mapping[str, Any] | None = None
    agent_failed: Mapping[str, Any] | None = None
    ends: list[Mapping[str, Any]] = field(default_factory=list)
    succeeded: bool = False
    host: str | None = None

    @property
    def failed(self) -> bool:
        return self.own_failed is not None or self.agent_failed is not None


def _cause(rank: int, info: _Rank) -> tuple[tuple[int, float], RootCause]:
    """The rank's failure as a root cause, and its sort key: (looks like a lost peer, time)."""
    own, agent = info.own_failed, info.agent_failed
    exit_code = None
    for row in (agent, own):
        if row is not None and exit_code is None:
            exit_code = _int((row.get("metadata") or {}).get("exit_code"))
    sig = _signal_name(-exit_code) if exit_code is not None and exit_code < 0 else None
    if own is not None:
        trace = own.get("error_trace")
        exception, message = _exception_of(own.get("message") or trace)
        if exception is None and trace:
            exception, message = _exception_of(str(trace).strip().splitlines()[-1])
        source, when = "worker", float(own["wall_time"])
    else:
        assert agent is not None
        text, trace = _error_file(agent.get("error_trace"))
        exception, message = _exception_of(text)
        source = "error_file" if text else "agent"
        when = float(agent["wall_time"])
    if exception:
        reason = f"{exception}: {message}" if message else exception
    elif sig:
        reason = f"killed by {sig}"
    elif message:
        reason = message
    elif exit_code is not None:
        reason = f"exited with code {exit_code}"
    else:
        reason = "failed"
    if sig and exception is None:
        trace = trace or None
    if own is not None:  # it recorded its own failure: does it read as a peer gone?
        lost_peer = bool(_PEER_LOST.search(f"{exception or ''}: {message or ''}"))
    else:  # only its agent saw it end: stopped the way agents stop workers, or on its own
        lost_peer = sig in _STOP_SIGNALS
    cause = RootCause(
        rank=rank,
        time=when,
        reason=reason,
        exception=exception,
        message=message,
        traceback=trace or None,
        exit_code=exit_code,
        signal=sig,
        host=info.host,
        source=source,
        record=own if own is not None else agent,
    )
    return (int(lost_peer), when), cause


# ---------------------------------------------------------------------------------------------
# The analysis
# ---------------------------------------------------------------------------------------------


def _node_name(row: Mapping[str, Any]) -> str:
    return f"{row.get('hostname')} (pid {row.get('pid')})"


def _round_members(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], set[str]]:
    """Per (job, round): the nodes (agents) that joined it."""
    members: dict[tuple[str, int], set[str]] = defaultdict(set)
    for row in rows:
        if row["kind"] != contract.RENDEZVOUS or row.get("state") == "FAILED":
            continue
        found = _JOINED.search(row.get("message") or "")
        if found:
            job = str(row.get("run_id") or str(row["run"]).split("/", 1)[0])
            members[(job, int(found.group(1)))].add(_node_name(row))
    return members


def attempts(rows: Iterable[Mapping[str, Any]], marks: list[Span] | None = None) -> list[Attempt]:
    """Every attempt of every job in decoded timeline records (``readers.decode_timeline``).

    Sorted by job and attempt. See :func:`restarts` for what each field means. ``marks``:
    ``timeline.spans(rows)`` when the caller already has them.
    """
    rows = list(rows)
    marks = spans(rows) if marks is None else marks
    job_end: dict[str, float] = {}
    for span in marks:
        last = span.end if span.end is not None else span.begin
        job_end[span.lane.group] = max(job_end.get(span.lane.group, -math.inf), last)
    groups: dict[tuple[str, int], list[Span]] = defaultdict(list)
    for span in _worker_attempts(marks):
        groups[(span.lane.group, span.number)].append(span)
    ranks: dict[tuple[str, int], dict[int, _Rank]] = defaultdict(lambda: defaultdict(_Rank))
    for span in marks:
        # A worker record without a rank sits on its run's lane: no rank to name.
        if span.lane.kind != contract.WORKER or span.number is None:
            continue
        if not isinstance(span.lane.key[0], int):
            continue
        info = ranks[(span.lane.group, span.number)][int(span.lane.key[0])]
        for row in span.rows:
            name, state = str(row.get("name") or ""), row.get("state")
            info.host = info.host or row.get("hostname")
            if state == "FAILED" and name.startswith(_WORKER_PREFIX):
                info.own_failed = info.own_failed or row
            elif state == "FAILED":
                info.agent_failed = info.agent_failed or row
            if state == "SUCCEEDED":
                info.succeeded = True
            if state in ("FAILED", "TERMINATED", "UNHEALTHY", "STOPPED"):
                info.ends.append(row)
    members = _round_members(rows)
    rounds = [s for s in marks if s.lane.kind == contract.RENDEZVOUS and s.end is not None]

    starts = {key: min(span.begin for span in group) for key, group in groups.items()}
    out: list[Attempt] = []
    previous: dict[str, tuple[float, set[str] | None]] = {}  # per job: start, nodes
    for (job, number), group in sorted(groups.items()):
        start = starts[(job, number)]
        end = max(span.end or span.begin for span in group)
        since, old = previous.get(job, (-math.inf, None))
        before = [s for s in rounds if s.lane.group == job and since < (s.end or 0) <= start]
        rendezvous_s = (
            max(s.end or 0 for s in before) - min(s.begin for s in before) if before else 0.0
        )
        by_rank = ranks[(job, number)]
        failed = sorted(rank for rank, info in by_rank.items() if info.failed)
        causes = sorted((_cause(rank, by_rank[rank]) for rank in failed), key=lambda c: c[0])
        root = causes[0][1] if causes else None
        started = sorted({int(s.lane.key[0]) for s in group if isinstance(s.lane.key[0], int)})
        collateral: list[int] = []
        collateral_records: list[Mapping[str, Any]] = []
        if root is not None:
            for rank in started:
                info = by_rank.get(rank, _Rank())
                if rank == root.rank or (info.succeeded and not info.failed):
                    continue
                collateral.append(rank)
                collateral_records.extend(info.ends)
            end = max(end, root.time)
        # States of the attempts whose end was recorded; the others were cut short or still run.
        states = sorted({span.state or "?" for span in group if len(span.rows) > 1})
        if root is not None:
            outcome = "FAILED"
        elif any(span.open for span in group):
            outcome = "RUNNING"
        elif not states:
            outcome = "RESTARTED"
        else:
            outcome = "/".join(states)
        later = [t for (j, n), t in starts.items() if j == job and n > number]
        time_lost = None
        if root is not None:
            until = min(later) if later else job_end.get(job, root.time)
            time_lost = max(0.0, until - root.time)
        nodes = members.get((job, number), set())
        if not nodes:
            nodes = {str(info.host) for info in by_rank.values() if info.host}
        joined = sorted(nodes - old) if old is not None else []
        left = sorted(old - nodes) if old is not None else []
        previous[job] = (start, nodes)
        out.append(
            Attempt(
                job=job,
                attempt=number,
                start=start,
                end=end,
                outcome=outcome,
                ranks=tuple(started),
                failed_ranks=tuple(failed),
                root_cause=root,
                collateral_ranks=tuple(collateral),
                time_lost_s=time_lost,
                nodes=tuple(sorted(nodes)),
                nodes_joined=tuple(joined),
                nodes_left=tuple(left),
                rendezvous_s=rendezvous_s,
                collateral_records=tuple(collateral_records),
            )
        )
    return out


def attempt_dict(attempt: Attempt, traceback: bool = True) -> dict[str, Any]:
    """One attempt as JSON-ready values (times in epoch seconds): ``tb-monitor report --json``
    and the Timeline's payload share it. ``root_cause`` is None or a dict of its fields."""
    cause = attempt.root_cause
    root = None
    if cause is not None:
        root = {
            "rank": cause.rank,
            "host": cause.host,
            "time": cause.time,
            "reason": cause.reason,
            "exception": cause.exception,
            "message": cause.message,
            "exit_code": cause.exit_code,
            "signal": cause.signal,
            "source": cause.source,
        }
        if traceback:
            root["traceback"] = cause.traceback
    return {
        "job": attempt.job,
        "attempt": attempt.attempt,
        "start": attempt.start,
        "end": attempt.end,
        "duration_s": attempt.duration_s,
        "outcome": attempt.outcome,
        "root_cause": root,
        "collateral_ranks": list(attempt.collateral_ranks),
        "failed_ranks": list(attempt.failed_ranks),
        "ranks": list(attempt.ranks),
        "time_lost_s": attempt.time_lost_s,
        "nodes": list(attempt.nodes),
        "nodes_joined": list(attempt.nodes_joined),
        "nodes_left": list(attempt.nodes_left),
        "rendezvous_s": attempt.rendezvous_s,
    }


def mark_restarts(marks: list[Span], found: list[Attempt]) -> list[Span]:
    """The marks as the Timeline draws them: collateral ranks stopped by the restart.

    A collateral rank's attempt interval, and its records that ended it (FAILED in a collective,
    TERMINATED by its agent), take the state ``STOPPED_BY_RESTART``; the root cause's attempt is
    labelled with its one-line reason. Everything else is returned as it is.
    """
    collateral = {(a.job, a.attempt, rank) for a in found for rank in a.collateral_ranks}
    ending = {id(row) for a in found for row in a.collateral_records}
    causes = {(a.job, a.attempt, a.root_cause.rank): a.root_cause for a in found if a.root_cause}
    out = []
    for span in marks:
        rank = span.lane.key[0] if span.lane.kind == contract.WORKER else None
        key = (span.lane.group, span.number, rank)
        if span.end is not None and key in collateral:
            label = f"attempt {span.number}: stopped by restart"
            span = replace(span, state=STOPPED_BY_RESTART, label=label)
        elif span.end is not None and key in causes and span.state != "RUNNING":
            span = replace(span, label=f"attempt {span.number}: {causes[key].reason}")
        elif span.end is None and span.rows and id(span.rows[0]) in ending:
            span = replace(span, state=STOPPED_BY_RESTART)
        out.append(span)
    return out


def finished_jobs(rows: Iterable[Mapping[str, Any]]) -> dict[str, bool]:
    """Per job: whether every agent of it recorded its final verdict (the job is over).

    torchelastic's agent records ``torchelastic.worker.status.SUCCEEDED`` or ``FAILED`` with
    source AGENT once, when it ends. A job whose records hold no agent is over when none of its
    workers is still running.
    """
    agents: dict[str, set[str]] = defaultdict(set)
    done: dict[str, set[str]] = defaultdict(set)
    jobs: set[str] = set()
    rows = list(rows)
    for row in rows:
        run = str(row["run"])
        job = str(row.get("run_id") or run.split("/", 1)[0])
        jobs.add(job)
        if "/agent-" in f"/{run}" and row["kind"] in (contract.AGENT, contract.RENDEZVOUS):
            agents[job].add(run)
            name = str(row.get("name") or "")
            final = name in (f"{_AGENT_PREFIX}SUCCEEDED", f"{_AGENT_PREFIX}FAILED")
            if final and row.get("source") == "AGENT":
                done[job].add(run)
    running = {a.job for a in attempts(rows) if a.outcome == "RUNNING"}
    return {job: (agents[job] <= done[job]) if agents[job] else job not in running for job in jobs}


def restarts(source: Any) -> pandas.DataFrame:
    """Why each attempt of an elastic job ended: one row per job and attempt, sorted.

    ``source`` is a logdir (a local path, or an ``s3://`` / ``gs://`` URL) or the DataFrame
    ``tb_monitor.read_events`` returns; anything else is a TypeError naming it.

    Columns:

    - ``job``, ``attempt`` (the rendezvous round it followed: the same number on every node),
      ``start``, ``end`` (UTC timestamps: first worker start, last worker end), ``duration_s``;
    - ``outcome``: FAILED when a rank failed, RUNNING while a rank runs, RESTARTED when a later
      attempt began with no end recorded (a membership change), else the end states recorded
      (SUCCEEDED);
    - the **root cause**, the failure that brought the attempt down (all NA without one):
      ``root_cause_rank`` (Int64), ``root_cause_host``, ``exception`` (its type, "ValueError"),
      ``message`` (the exception message's last line), ``reason`` (one line for humans:
      "ValueError: ...", "killed by SIGKILL", "exited with code 3"), ``traceback``,
      ``failed_at`` (UTC timestamp), ``exit_code`` (Int64: the exit code its agent saw, negative
      for a signal) and ``signal`` ("SIGKILL"). The root cause is the first rank to fail, where
      a failure that reads as a lost peer (a collective's connection error, a timeout, or an end
      by the signal agents stop workers with) counts only when no other failure is known: a rank
      killed by SIGKILL records nothing itself, and its peers' connection errors are recorded
      before its agent notices it is gone;
    - ``time_lost_s``: from the root cause to the next attempt's first worker start, or to the
      job's last record when no attempt followed (NaN without a root cause);
    - ``collateral_ranks``: the other ranks of a failed attempt that did not succeed (failed
      later, terminated by their agent, or cut short): drawn as ``STOPPED_BY_RESTART``;
    - ``failed_ranks`` (every rank with a FAILED record), ``ranks`` (every rank started);
    - ``nodes`` (the agents that joined this attempt's round, "host (pid N)"), ``nodes_joined``
      and ``nodes_left`` (against the previous attempt's round; empty for the first);
    - ``rendezvous_s``: from the first node starting to join this round until the last one
      joined it.
    """

    def row(a: Attempt) -> tuple:
        cause = a.root_cause
        return (
            cause.rank if cause else None,
            cause.host if cause else None,
            cause.exception if cause else None,
            cause.message if cause else None,
            cause.reason if cause else None,
            cause.traceback if cause else None,
            cause.time if cause else math.nan,
            cause.exit_code if cause else None,
            cause.signal if cause else None,
            a.time_lost_s if a.time_lost_s is not None else math.nan,
            list(a.collateral_ranks),
            list(a.failed_ranks),
            list(a.ranks),
            list(a.nodes),
            list(a.nodes_joined),
            list(a.nodes_left),
            a.rendezvous_s,
        )

    frame = _attempt_frame(source, "restarts", row, RESTARTS_COLUMNS, "failed_at")
    return frame.astype(
        {
            "attempt": "int64",
            "root_cause_rank": "Int64",
            "exit_code": "Int64",
            "duration_s": "float64",
            "time_lost_s": "float64",
            "rendezvous_s": "float64",
        }
    )


def restart_summary(source: Any) -> pandas.DataFrame:
    """One row per job and attempt: when it ran, its outcome, the failed ranks, rendezvous time.

    ``source`` is a logdir or ``read_events``' DataFrame (see :func:`restarts`, which says why
    each attempt ended). Columns: job, attempt (the rendezvous round it followed), start, end
    (UTC timestamps), duration_s, outcome (FAILED when a rank failed; RUNNING while one is open;
    RESTARTED when a later attempt began before any end was recorded; else the end states
    recorded), failed_ranks (sorted list), first_failed_rank (the root cause: see
    :func:`restarts`; None without failures), rendezvous_s (from the first node starting to join
    the round before this attempt until the last node joined it: time the job spent not
    training).
    """

    def row(a: Attempt) -> tuple:
        cause = a.root_cause
        return (list(a.failed_ranks), cause.rank if cause else None, a.rendezvous_s)

    frame = _attempt_frame(source, "restart_summary", row, SUMMARY_COLUMNS)
    return frame.astype({"attempt": "int64", "first_failed_rank": "Int64"})  # Int64: NA, not NaN


def _attempt_frame(
    source: Any, caller: str, row: Callable[[Attempt], tuple], columns: tuple, *times: str
) -> pandas.DataFrame:
    """One row per attempt: its job, attempt, start, end, duration and outcome, then ``row``'s
    columns; ``start``, ``end`` and ``times`` as UTC timestamps (readable in a notebook, still
    exact to the microsecond)."""
    pandas_module = readers.need_pandas() if not _is_frame(source) else sys.modules["pandas"]
    records = [
        (a.job, a.attempt, a.start, a.end, a.duration_s, a.outcome, *row(a))
        for a in attempts(timeline_rows(source, caller))
    ]
    frame = pandas_module.DataFrame.from_records(records, columns=columns)
    for column in ("start", "end", *times):
        frame[column] = pandas_module.to_datetime(frame[column], unit="s", utc=True)
    return frame
