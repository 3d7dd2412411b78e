"""Attempts: every attempt of an elastic job, how it ended and why, as plain Python objects.

``attempts(rows)`` takes decoded timeline records (``tb_monitor.analysis.sources``) and gives
one ``Attempt`` per job and rendezvous round: its ranks, its outcome, the rank whose failure
brought the group down (``tb_monitor.analysis.root_cause``), the ranks that went down with it,
the time lost until the next attempt and how the membership changed. No pandas: the Timeline
plugin, ``tb-monitor report`` (through ``tb_monitor.analysis.health``) and the notebook all
draw from it, so they always agree.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.root_cause import AGENT_PREFIX, RankEnding, RootCause, cause_of
from tb_monitor.timeline import Span, spans

__all__ = ["Attempt", "attempt_dict", "attempts", "finished_jobs", "restart_starts"]

_JOINED = re.compile(r"\bhas joined round (\d+)\b")
_Key = tuple[str, int]  # (job, attempt)


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


@dataclass(frozen=True)
class _Logdir:
    """What the whole logdir says that each attempt is read against."""

    starts: dict[_Key, float]  # each attempt's first worker start
    job_end: dict[str, float]  # each job's last record
    members: dict[_Key, set[str]]  # the nodes that joined each round
    rounds: list[Span]  # the rendezvous rounds, as intervals


# ---------------------------------------------------------------------------------------------
# Reading the marks: worker attempts, how each rank ended, rendezvous membership
# ---------------------------------------------------------------------------------------------


def _worker_attempts(marks: list[Span]) -> list[Span]:
    return [
        span
        for span in marks
        if span.lane.kind == contract.WORKER and span.end is not None and span.number is not None
    ]


def _attempt_starts(marks: list[Span]) -> dict[_Key, float]:
    """Each attempt's first worker start."""
    starts: dict[_Key, float] = {}
    for span in _worker_attempts(marks):
        key = (span.lane.group, span.number)
        starts[key] = min(starts.get(key, math.inf), span.begin)
    return starts


def restart_starts(marks: list[Span]) -> list[tuple[str, int, float]]:
    """``(job, attempt, start)`` of every attempt after the first: its first worker START."""
    starts = _attempt_starts(marks)
    return sorted((job, attempt, t) for (job, attempt), t in starts.items() if attempt > 0)


def _rank_endings(marks: list[Span]) -> dict[_Key, dict[int, RankEnding]]:
    """Per attempt and rank, what its records say about how it ended."""
    endings: dict[_Key, dict[int, RankEnding]] = defaultdict(lambda: defaultdict(RankEnding))
    for span in marks:
        # A worker record without a rank sits on its run's lane: no rank to name.
        if span.lane.kind != contract.WORKER or span.number is None:
            continue
        if not isinstance(span.lane.key[0], int):
            continue
        ending = endings[(span.lane.group, span.number)][int(span.lane.key[0])]
        for row in span.rows:
            ending.add(row)
    return endings


def _job_of(row: Mapping[str, Any]) -> str:
    return str(row.get("run_id") or str(row["run"]).split("/", 1)[0])


def _round_members(rows: Iterable[Mapping[str, Any]]) -> dict[_Key, set[str]]:
    """Per (job, round): the nodes (agents) that joined it."""
    members: dict[_Key, set[str]] = defaultdict(set)
    for row in rows:
        if row["kind"] != contract.RENDEZVOUS or row.get("state") == "FAILED":
            continue
        found = _JOINED.search(row.get("message") or "")
        if found:
            node = f"{row.get('hostname')} (pid {row.get('pid')})"
            members[(_job_of(row), int(found.group(1)))].add(node)
    return members


def _read_logdir(rows: list[Mapping[str, Any]], marks: list[Span]) -> _Logdir:
    job_end: dict[str, float] = {}
    for span in marks:
        last = span.end if span.end is not None else span.begin
        job_end[span.lane.group] = max(job_end.get(span.lane.group, -math.inf), last)
    rounds = [s for s in marks if s.lane.kind == contract.RENDEZVOUS and s.end is not None]
    return _Logdir(_attempt_starts(marks), job_end, _round_members(rows), rounds)


# ---------------------------------------------------------------------------------------------
# One attempt
# ---------------------------------------------------------------------------------------------


def _rendezvous_s(logdir: _Logdir, job: str, since: float, start: float) -> float:
    """From the first node starting to join the round before ``start`` to the last one joining."""
    before = [s for s in logdir.rounds if s.lane.group == job and since < (s.end or 0) <= start]
    return max(s.end or 0 for s in before) - min(s.begin for s in before) if before else 0.0


def _fault(
    started: list[int], by_rank: Mapping[int, RankEnding]
) -> tuple[RootCause | None, list[int], list[Mapping[str, Any]]]:
    """The root cause, the collateral ranks and their records that ended the attempt."""
    failed = sorted(rank for rank, ending in by_rank.items() if ending.failed)
    causes = sorted((cause_of(rank, by_rank[rank]) for rank in failed), key=lambda c: c[0])
    if not causes:
        return None, [], []
    root = causes[0][1]
    collateral: list[int] = []
    records: list[Mapping[str, Any]] = []
    for rank in started:
        ending = by_rank.get(rank, RankEnding())
        if rank == root.rank or (ending.succeeded and not ending.failed):
            continue
        collateral.append(rank)
        records.extend(ending.ends)
    return root, collateral, records


def _outcome(group: list[Span], root: RootCause | None) -> str:
    if root is not None:
        return "FAILED"
    if any(span.open for span in group):
        return "RUNNING"
    # States of the attempts whose end was recorded; the others were cut short.
    states = sorted({span.state or "?" for span in group if len(span.rows) > 1})
    return "/".join(states) if states else "RESTARTED"


def _time_lost(logdir: _Logdir, key: _Key, root: RootCause | None) -> float | None:
    """From the root cause to the next attempt's start, or to the job's last record."""
    if root is None:
        return None
    job, number = key
    later = [t for (j, n), t in logdir.starts.items() if j == job and n > number]
    until = min(later) if later else logdir.job_end.get(job, root.time)
    return max(0.0, until - root.time)


def _attempt(
    logdir: _Logdir,
    key: _Key,
    group: list[Span],
    by_rank: Mapping[int, RankEnding],
    previous: tuple[float, set[str] | None],
) -> Attempt:
    job, number = key
    start = logdir.starts[key]
    started = sorted({int(s.lane.key[0]) for s in group if isinstance(s.lane.key[0], int)})
    root, collateral, records = _fault(started, by_rank)
    end = max(span.end or span.begin for span in group)
    since, old = previous
    nodes = logdir.members.get(key) or {str(e.host) for e in by_rank.values() if e.host}
    return Attempt(
        job=job,
        attempt=number,
        start=start,
        end=end if root is None else max(end, root.time),
        outcome=_outcome(group, root),
        ranks=tuple(started),
        failed_ranks=tuple(sorted(rank for rank, e in by_rank.items() if e.failed)),
        root_cause=root,
        collateral_ranks=tuple(collateral),
        time_lost_s=_time_lost(logdir, key, root),
        nodes=tuple(sorted(nodes)),
        nodes_joined=tuple(sorted(nodes - old)) if old is not None else (),
        nodes_left=tuple(sorted(old - nodes)) if old is not None else (),
        rendezvous_s=_rendezvous_s(logdir, job, since, start),
        collateral_records=tuple(records),
    )


def attempts(rows: Iterable[Mapping[str, Any]], marks: list[Span] | None = None) -> list[Attempt]:
    """Every attempt of every job in decoded timeline records (``readers.decode_timeline``).

    Sorted by job and attempt. See ``tb_monitor.analysis.restarts.restarts`` for what each field
    means. ``marks``: ``timeline.spans(rows)`` when the caller already has them.
    """
    rows = list(rows)
    marks = spans(rows) if marks is None else marks
    logdir = _read_logdir(rows, marks)
    groups: dict[_Key, list[Span]] = defaultdict(list)
    for span in _worker_attempts(marks):
        groups[(span.lane.group, span.number)].append(span)
    endings = _rank_endings(marks)
    out: list[Attempt] = []
    previous: dict[str, tuple[float, set[str] | None]] = {}  # per job: start, nodes
    for key, group in sorted(groups.items()):
        attempt = _attempt(
            logdir, key, group, endings[key], previous.get(key[0], (-math.inf, None))
        )
        previous[key[0]] = (attempt.start, set(attempt.nodes))
        out.append(attempt)
    return out


def finished_jobs(
    rows: Iterable[Mapping[str, Any]], found: list[Attempt] | None = None
) -> dict[str, bool]:
    """Per job: whether every agent of it recorded its final verdict (the job is over).

    torchelastic's agent records ``torchelastic.worker.status.SUCCEEDED`` or ``FAILED`` with
    source AGENT once, when it ends. A job whose records hold no agent is over when none of its
    workers is still running. ``found``: ``attempts(rows)`` when the caller already has them.
    """
    agents: dict[str, set[str]] = defaultdict(set)
    done: dict[str, set[str]] = defaultdict(set)
    jobs: set[str] = set()
    rows = list(rows)
    for row in rows:
        run = str(row["run"])
        job = _job_of(row)
        jobs.add(job)
        if "/agent-" in f"/{run}" and row["kind"] in (contract.AGENT, contract.RENDEZVOUS):
            agents[job].add(run)
            name = str(row.get("name") or "")
            final = name in (f"{AGENT_PREFIX}SUCCEEDED", f"{AGENT_PREFIX}FAILED")
            if final and row.get("source") == "AGENT":
                done[job].add(run)
    found = attempts(rows) if found is None else found
    running = {a.job for a in found if a.outcome == "RUNNING"}
    return {job: (agents[job] <= done[job]) if agents[job] else job not in running for job in jobs}


def _root_cause_dict(cause: RootCause, traceback: bool) -> dict[str, Any]:
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
    return root


def attempt_dict(attempt: Attempt, traceback: bool = True) -> dict[str, Any]:
    """One attempt as JSON-ready values (times in epoch seconds): ``tb-monitor report --json``
    and the Timeline's payload share it. ``root_cause`` is None or a dict of its fields."""
    cause = attempt.root_cause
    return {
        "job": attempt.job,
        "attempt": attempt.attempt,
        "start": attempt.start,
        "end": attempt.end,
        "duration_s": attempt.duration_s,
        "outcome": attempt.outcome,
        "root_cause": None if cause is None else _root_cause_dict(cause, traceback),
        "collateral_ranks": list(attempt.collateral_ranks),
        "failed_ranks": list(attempt.failed_ranks),
        "ranks": list(attempt.ranks),
        "time_lost_s": attempt.time_lost_s,
        "nodes": list(attempt.nodes),
        "nodes_joined": list(attempt.nodes_joined),
        "nodes_left": list(attempt.nodes_left),
        "rendezvous_s": attempt.rendezvous_s,
    }
