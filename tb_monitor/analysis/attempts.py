"""Attempts: every attempt of an elastic job, how it ended and why, as plain Python objects.

``attempts(rows)`` takes decoded timeline records (``tb_monitor.analysis.sources``: jobs that
share a run id told apart) and gives one ``Attempt`` per job and rendezvous round: its ranks,
its outcome, the rank whose failure brought the group down (``tb_monitor.analysis.root_cause``:
its earliest real failure), the ranks that went down with it (stopped by the restart, or when
the job ended where none followed), the time lost until the next attempt and how the
membership changed. No pandas: the Timeline plugin, ``tb-monitor report`` (through
``tb_monitor.analysis.health``) and the notebook all draw from it, so they always agree.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.hung import hung_attempts
from tb_monitor.analysis.jobs import is_agent_run, is_store_lost, is_verdict, job_of
from tb_monitor.analysis.root_cause import AGENT_PREFIX, RankEnding, RootCause, root_cause
from tb_monitor.timeline import STOPPED_AT_END, STOPPED_BY_RESTART, Span, spans

__all__ = [
    "SIGNAL_SLACK_S",
    "Attempt",
    "Termination",
    "attempt_dict",
    "attempts",
    "finished_jobs",
    "restart_starts",
    "terminations",
]

_JOINED = re.compile(r"\bhas joined round (\d+)\b")
#: A failure this close before the agent began stopping its workers is still the stop's: the
#: signal that preempts a job often reaches its workers too, a moment before the agent acts.
SIGNAL_SLACK_S = 1.0
_Key = tuple[str, int]  # (job, attempt)


@dataclass(frozen=True)
class Attempt:
    """One attempt of one job: the workers started after one rendezvous round, and how it ended."""

    job: str
    attempt: int  # the rendezvous round it followed
    start: float
    end: float
    outcome: str  # FAILED, SUCCEEDED, RUNNING, HUNG, RESTARTED (cut short, no failure), ...
    ranks: tuple[int, ...]
    failed_ranks: tuple[int, ...]
    root_cause: RootCause | None
    collateral_ranks: tuple[int, ...]
    time_lost_s: float | None  # root cause -> next attempt's start; None: no restart followed
    nodes: tuple[str, ...]
    nodes_joined: tuple[str, ...]
    nodes_left: tuple[str, ...]
    rendezvous_s: float
    #: Per collateral rank, its records that ended the attempt (drawn as ``collateral_state``).
    collateral_records: tuple[Mapping[str, Any], ...] = field(default=(), compare=False, repr=False)
    restarted: bool = False  # a later attempt of the job followed
    #: Collateral ranks whose agent recorded nothing since the root cause: none known to wait.
    unheard_ranks: tuple[int, ...] = field(default=(), compare=False)

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def collateral_state(self) -> str:
        """How its collateral ranks are drawn: stopped by the restart, or when the job ended."""
        return STOPPED_BY_RESTART if self.restarted else STOPPED_AT_END


@dataclass(frozen=True)
class _Logdir:
    """What the whole logdir says that each attempt is read against."""

    starts: dict[_Key, float]  # each attempt's first worker start
    agent_last: dict[str, float]  # each agent run's newest record
    members: dict[_Key, set[str]]  # the nodes that joined each round
    rounds: list[Span]  # the rendezvous rounds, as intervals
    alarms: dict[str, list[float]]  # per agent run, when it recorded trouble: dates a lost node
    agent_nodes: dict[str, str]  # per agent run, its node: "host (pid N)"
    cut: dict[str, float]  # per agent run, when it first failed to reach the rendezvous store
    beating: set[str]  # the agent runs that record keep-alives (heard every few seconds)


# ---------------------------------------------------------------------------------------------
# Reading the marks: worker attempts, how each rank ended, rendezvous membership
# ---------------------------------------------------------------------------------------------


def _worker_attempts(marks: list[Span]) -> list[Span]:
    return [
        span
        for span in marks
        if span.lane.kind == contract.WORKER and span.end is not None and span.number is not None
    ]


def _attempt_starts(worker_attempts: list[Span]) -> dict[_Key, float]:
    """Each attempt's first worker start (``worker_attempts``: ``_worker_attempts``)."""
    starts: dict[_Key, float] = {}
    for span in worker_attempts:
        key = (span.lane.group, span.number)
        starts[key] = min(starts.get(key, math.inf), span.begin)
    return starts


def restart_starts(marks: list[Span]) -> list[tuple[str, int, float]]:
    """``(job, attempt, start)`` of every attempt after the first: its first worker START."""
    starts = _attempt_starts(_worker_attempts(marks))
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


def _node(row: Mapping[str, Any]) -> str:
    """A rendezvous record's node, as the attempts name nodes: ``host (pid N)``."""
    return f"{row.get('hostname')} (pid {row.get('pid')})"


def _round_members(rows: Iterable[Mapping[str, Any]]) -> dict[_Key, set[str]]:
    """Per (job, round): the nodes (agents) that joined it."""
    members: dict[_Key, set[str]] = defaultdict(set)
    for row in rows:
        if row["kind"] != contract.RENDEZVOUS or row.get("state") == "FAILED":
            continue
        message = row.get("message") or ""
        found = _JOINED.search(message) if "has joined round" in message else None
        if found:
            members[(job_of(row), int(found.group(1)))].add(_node(row))
    return members


def _read_logdir(
    rows: list[Mapping[str, Any]], marks: list[Span], worker_attempts: list[Span]
) -> _Logdir:
    rounds = [s for s in marks if s.lane.kind == contract.RENDEZVOUS and s.end is not None]
    agent_last: dict[str, float] = {}
    alarms: dict[str, list[float]] = defaultdict(list)
    nodes: dict[str, str] = {}
    cut: dict[str, float] = {}
    beating: set[str] = set()
    for row in rows:
        run = row["run"]
        if not is_agent_run(run):
            continue
        agent_last[run] = max(agent_last.get(run, -math.inf), row["wall_time"])
        if contract.is_heartbeat(row):
            beating.add(run)
        if row.get("state") == "FAILED" or is_verdict(row):
            alarms[run].append(row["wall_time"])
        if is_store_lost(row):
            cut.setdefault(run, row["wall_time"])
        if row["kind"] == contract.RENDEZVOUS and row.get("pid") is not None:
            nodes.setdefault(run, _node(row))
    return _Logdir(
        _attempt_starts(worker_attempts),
        agent_last,
        _round_members(rows),
        rounds,
        dict(alarms),
        nodes,
        cut,
        beating,
    )


# ---------------------------------------------------------------------------------------------
# One attempt
# ---------------------------------------------------------------------------------------------


def _rendezvous_s(logdir: _Logdir, job: str, since: float, start: float) -> float:
    """From the first node starting to join the round before ``start`` to the last one joining."""
    before = [s for s in logdir.rounds if s.lane.group == job and since < (s.end or 0) <= start]
    return max(s.end or 0 for s in before) - min(s.begin for s in before) if before else 0.0


def _fault(
    logdir: _Logdir, started: list[int], by_rank: Mapping[int, RankEnding]
) -> tuple[RootCause | None, list[int], list[Mapping[str, Any]], list[int]]:
    """The root cause, the collateral ranks, their records that ended the attempt, and those of
    them whose agent, one that keeps alive, recorded nothing since the root cause."""
    root = root_cause(by_rank, logdir.agent_last, logdir.alarms, logdir.agent_nodes, logdir.cut)
    collateral, records, unheard = [], [], []
    if root is None:
        return None, collateral, records, unheard
    for rank in started:
        ending = by_rank.get(rank, RankEnding())
        if rank in root.ranks or (ending.succeeded and not ending.failed):
            continue
        collateral.append(rank)
        records.extend(ending.ends)
        agent = str(ending.agent)
        if agent in logdir.beating and logdir.agent_last.get(agent, -math.inf) < root.time:
            unheard.append(rank)
    return root, collateral, records, unheard


def _outcome(group: list[Span], root: RootCause | None) -> str:
    if root is not None:
        return "FAILED"
    if any(span.open for span in group):
        return "RUNNING"
    # States of the attempts whose end was recorded; the others were cut short.
    states = sorted({span.state or "?" for span in group if len(span.rows) > 1})
    return "/".join(states) if states else "RESTARTED"


def _next_start(logdir: _Logdir, key: _Key) -> float | None:
    """When the job's next attempt started, None in its last."""
    job, number = key
    later = [t for (j, n), t in logdir.starts.items() if j == job and n > number]
    return min(later) if later else None


def _time_lost(root: RootCause | None, next_start: float | None) -> float | None:
    """From the root cause to the next attempt's start; None when no restart followed (the
    time after a job's last failure is not lost to a restart)."""
    if root is None or next_start is None:
        return None
    return max(0.0, next_start - root.time)


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
    root, collateral, records, unheard = _fault(logdir, started, by_rank)
    next_start = _next_start(logdir, key)
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
        time_lost_s=_time_lost(root, next_start),
        nodes=tuple(sorted(nodes)),
        nodes_joined=tuple(sorted(nodes - old)) if old is not None else (),
        nodes_left=tuple(sorted(old - nodes)) if old is not None else (),
        rendezvous_s=_rendezvous_s(logdir, job, since, start),
        collateral_records=tuple(records),
        restarted=next_start is not None,
        unheard_ranks=tuple(unheard),
    )


def attempts(rows: Iterable[Mapping[str, Any]], marks: list[Span] | None = None) -> list[Attempt]:
    """Every attempt of every job in decoded timeline records (``readers.decode_timeline``).

    Sorted by job and attempt. See ``tb_monitor.analysis.restarts.restarts`` for what each field
    means; an attempt a signal to its agent cut short is TERMINATED (``Termination.ended``).
    ``marks``: ``timeline.spans(rows)`` when the caller already has them.
    """
    rows = list(rows)
    marks = spans(rows) if marks is None else marks
    worker_attempts = _worker_attempts(marks)
    logdir = _read_logdir(rows, marks, worker_attempts)
    groups: dict[_Key, list[Span]] = defaultdict(list)
    for span in worker_attempts:
        groups[(span.lane.group, span.number)].append(span)
    endings = _rank_endings(marks)
    stopped = terminations(rows)
    out: list[Attempt] = []
    previous: dict[str, tuple[float, set[str] | None]] = {}  # per job: start, nodes
    for key, group in sorted(groups.items()):
        attempt = _attempt(
            logdir, key, group, endings[key], previous.get(key[0], (-math.inf, None))
        )
        previous[key[0]] = (attempt.start, set(attempt.nodes))
        out.append(stopped[key[0]].ended(attempt) if key[0] in stopped else attempt)
    nexts = {key: t for key in groups if (t := _next_start(logdir, key)) is not None}
    return hung_attempts(rows, out, nexts)  # an agent ended as hung (analysis.hung)


@dataclass(frozen=True)
class Termination:
    """A signal to a job's agent ended the job (a scheduler's preemption, Ctrl-C): the verdict
    ``tb-monitor run``'s agent records (``torchelastic.worker.status.TERMINATED``, source
    AGENT), where torchelastic records FAILED as for a crash."""

    signal: str | None  # "SIGTERM"
    exit_code: int | None  # torchrun's
    time: float
    stop_began: float | None = None  # when the agent began stopping its workers: the signal

    def ended(self, attempt: Attempt) -> Attempt:
        """``attempt`` as this signal ended it: one still running when the agent began stopping
        its workers is TERMINATED, and every failure of it from then on (a rank killed by the
        stop, a peer's lost connection) is collateral, not a root cause. A failure that came
        first (more than ``SIGNAL_SLACK_S`` before) stays the attempt's root cause."""
        if self.stop_began is None or attempt.end < self.stop_began - SIGNAL_SLACK_S:
            return attempt
        root = attempt.root_cause
        if root is not None and root.time < self.stop_began - SIGNAL_SLACK_S:
            return attempt
        records = attempt.collateral_records
        if root is not None and root.record is not None:
            records = (*records, root.record)
        return replace(
            attempt,
            outcome="TERMINATED",
            root_cause=None,
            collateral_ranks=tuple(r for r in attempt.ranks if r in attempt.failed_ranks),
            collateral_records=records,
            time_lost_s=None,
        )


def terminations(rows: Iterable[Mapping[str, Any]]) -> dict[str, Termination]:
    """Per job a signal ended: its first agent's TERMINATED verdict."""
    found: dict[str, Termination] = {}
    for row in sorted(rows, key=lambda r: r["wall_time"]):
        name = str(row.get("name") or "")
        if name != f"{AGENT_PREFIX}TERMINATED" or row.get("source") != "AGENT":
            continue
        metadata = row.get("metadata") or {}
        code = metadata.get("exit_code")
        began = metadata.get("stop_began")
        found.setdefault(
            job_of(row),
            Termination(
                metadata.get("signal"),
                code if isinstance(code, int) else None,
                row["wall_time"],
                float(began) if isinstance(began, (int, float)) else None,
            ),
        )
    return found


def stops_begun(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per job: when an agent of it last began stopping its workers (``AGENT_STOPPING``)."""
    found: dict[str, float] = {}
    for row in rows:
        if row.get("name") == contract.AGENT_STOPPING:
            job = job_of(row)
            found[job] = max(found.get(job, -math.inf), float(row["wall_time"]))
    return found


def finished_jobs(
    rows: Iterable[Mapping[str, Any]], found: list[Attempt] | None = None
) -> dict[str, bool]:
    """Per job: whether every agent of it recorded its final verdict (the job is over).

    torchelastic's agent records ``torchelastic.worker.status.SUCCEEDED`` or ``FAILED`` with
    source AGENT once, when it ends (``tb-monitor run``'s also ``TERMINATED``: a signal stopped
    it). One FAILED or TERMINATED ends the job: that agent closes the rendezvous
    and the others follow (or were lost, killed with their node, and record nothing). An agent
    lost with its node (an attempt's root cause) never records its end: it counts as ended, so
    a job whose other agents recorded theirs (the survivor's SUCCEEDED: its ``run()`` returned)
    is over. A job whose records hold no agent is over when none of its workers is still
    running.
    ``found``: ``attempts(rows)`` when the caller already has them.
    """
    agents: dict[str, set[str]] = defaultdict(set)
    done: dict[str, set[str]] = defaultdict(set)
    failed: set[str] = set()
    jobs: set[str] = set()
    rows = list(rows)
    for row in rows:
        run = str(row["run"])
        job = job_of(row)
        jobs.add(job)
        if is_agent_run(run) and row["kind"] in (contract.AGENT, contract.RENDEZVOUS):
            agents[job].add(run)
            if is_verdict(row):
                done[job].add(run)
                verdict = str(row.get("name"))
                if verdict.endswith(("FAILED", "TERMINATED")):  # one agent's end ends the job
                    failed.add(job)
    found = attempts(rows) if found is None else found
    running = {a.job for a in found if a.outcome == "RUNNING"}
    for a in found:
        if a.root_cause is not None and a.root_cause.agent is not None:
            done[a.job].add(a.root_cause.agent)  # lost with its node: it records no end
    return {
        job: (job in failed or agents[job] <= done[job]) if agents[job] else job not in running
        for job in jobs
    }


def _root_cause_dict(cause: RootCause, traceback: bool) -> dict[str, Any]:
    """The cause's fields (not its record, nor its agent's run), the traceback where asked."""
    root = {f.name: getattr(cause, f.name) for f in fields(cause) if f.compare}
    root.update(ranks=list(cause.ranks), cut_off_from=list(cause.cut_off_from))
    if not traceback:
        del root["traceback"]
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
        "restarted": attempt.restarted,
        "collateral_state": attempt.collateral_state,
        "nodes": list(attempt.nodes),
        "nodes_joined": list(attempt.nodes_joined),
        "nodes_left": list(attempt.nodes_left),
        "rendezvous_s": attempt.rendezvous_s,
    }
