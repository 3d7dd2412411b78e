"""Jobs in one logdir: which records belong to which job, by torchelastic run id and start.

Two jobs written to one logdir must never be read as one: a stall in one would hide behind the
other's end, a straggler behind the other's ranks. Jobs with different run ids are apart
already (every lane, attempt and rank run is named by its run id). torchrun's default run id
is ``"none"``, though, so two jobs may share a run id and even their ranks' run directories;
then their agents tell them apart: each job's agents live from its rendezvous to its end, and
agents whose lifetimes overlap are one job. ``separate_jobs`` gives such jobs their own id,
``<run id>@<start, HH:MM:SS UTC>``, in every record's ``run_id``, so the timeline's lanes,
the attempts and the report see separate jobs; ``job_spans`` says when each job started and
which run directories it wrote, and ``job_grid`` cuts the ranks' grid to one job, its ranks
scored among themselves. Two jobs sharing a run id and running at the same time stay one job
(nothing in their records tells them apart).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.root_cause import AGENT_PREFIX
from tb_monitor.contract.runs import decode_part

__all__ = [
    "JobSpan",
    "is_agent_run",
    "is_store_lost",
    "is_verdict",
    "job_grid",
    "job_of",
    "job_spans",
    "separate_jobs",
]

#: An agent's last record: its verdict on the whole run (TERMINATED: ``tb-monitor run``'s, a
#: signal stopped it).
_VERDICTS = frozenset(f"{AGENT_PREFIX}{state}" for state in ("SUCCEEDED", "FAILED", "TERMINATED"))
_KEYS = (str, type(None))  # run ids a lookup may take (a foreign record's may be a list)


@dataclass(frozen=True)
class JobSpan:
    """One job of the logdir: its id, when it started and when the next job that wrote to its
    run directories did, the run directories it wrote."""

    job: str  # the run id, or ``<run id>@HH:MM:SS`` where several jobs share the run id
    start: float  # its agents' first record (-inf: a job without agents)
    end: float  # the next start of a job sharing a run directory with it (inf: none)
    dirs: frozenset[str]  # the run directories (a run's top directory) its records are in
    shared: bool  # another job wrote to one of its run directories: tell them apart by time


def job_of(row: Mapping[str, Any]) -> str:
    """The job a decoded record belongs to: its run id, else its run's top directory (decoded:
    the run id it was written for)."""
    return str(row.get("run_id") or decode_part(str(row["run"]).split("/", 1)[0]) or ".")


def is_agent_run(run: str) -> bool:
    """Whether ``run`` is a torchelastic agent's (``contract.agent_run_name``)."""
    return "/agent-" in f"/{run}"


def _lives(rows: list[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per run id, each agent process's life: from its first record to its last, where a record
    that opens a rendezvous after the agent's verdict starts a new life (a process that reused
    the pid, and so the run)."""
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if is_agent_run(str(row["run"])):
            by_run.setdefault(str(row["run"]), []).append(row)
    lives: dict[str, list[tuple[float, float]]] = {}
    for records in by_run.values():
        ordered = sorted(records, key=lambda r: r["wall_time"])
        life, ended = [ordered[0]["wall_time"], ordered[0]["wall_time"]], False
        for row in ordered:
            if ended and _opens(row):
                lives.setdefault(job_of(row), []).append((life[0], life[1]))
                life, ended = [row["wall_time"], row["wall_time"]], False
            life[1] = row["wall_time"]
            ended = ended or is_verdict(row)
        lives.setdefault(job_of(ordered[0]), []).append((life[0], life[1]))
    return lives


def _opens(row: Mapping[str, Any]) -> bool:
    """A record an agent makes as it starts: hosting the rendezvous store, or joining a round."""
    if row["kind"] != contract.RENDEZVOUS:
        return False
    return row.get("state") == "INIT" or "attempts to join the next round" in str(
        row.get("message") or ""
    )


def is_store_lost(row: Mapping[str, Any]) -> bool:
    """An agent's rendezvous call that failed to reach the store (a keep-alive, a store call):
    its node may be cut off from the store's (``root_cause``'s partition)."""
    failed = row.get("kind") == contract.RENDEZVOUS and row.get("state") == "FAILED"
    return failed and "RendezvousConnectionError" in str(row.get("message") or "")


def is_verdict(row: Mapping[str, Any]) -> bool:
    """An agent's final record: torchelastic's SUCCEEDED or FAILED (or TERMINATED) with source
    AGENT."""
    name = str(row.get("name") or "")
    return row.get("source") == "AGENT" and name in _VERDICTS


def _starts(rows: list[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per run id, the start of each job under it: agents whose lives overlap are one job."""
    starts: dict[str, list[float]] = {}
    for run_id, lives in _lives(rows).items():
        ends = -math.inf
        for begin, end in sorted(lives):
            if begin > ends:
                starts.setdefault(run_id, []).append(begin)
            ends = max(ends, end)
    return starts


def _name(run_id: str, start: float, taken: set[str]) -> str:
    name = f"{run_id}@{datetime.fromtimestamp(start, tz=timezone.utc):%H:%M:%S}"
    n = 1
    while name in taken:
        n += 1
        name = f"{run_id}@{datetime.fromtimestamp(start, tz=timezone.utc):%H:%M:%S}.{n}"
    taken.add(name)
    return name


def job_spans(rows: Iterable[Mapping[str, Any]]) -> list[JobSpan]:
    """Every job of decoded timeline records (after ``separate_jobs``), by id."""
    starts: dict[str, float] = {}
    dirs: dict[str, set[str]] = {}
    seen: dict[tuple[Any, Any], tuple[str, bool]] = {}  # (run id, run): its job, an agent's?
    for row in rows:
        run_id, run = row.get("run_id"), row["run"]
        keyed = type(run_id) in _KEYS and type(run) is str
        known = seen.get((run_id, run)) if keyed else None
        if known is None:
            known = (job_of(row), is_agent_run(str(run)))
            dirs.setdefault(known[0], set()).add(str(run).split("/", 1)[0])
            if keyed:
                seen[(run_id, run)] = known
        job, agent = known
        if agent:
            starts[job] = min(starts.get(job, math.inf), row["wall_time"])
    out = []
    for job in sorted(dirs):
        start = starts.get(job, -math.inf)
        sharing = [other for other in dirs if other != job and dirs[other] & dirs[job]]
        later = [starts.get(other, -math.inf) for other in sharing]
        end = min((t for t in later if t > start), default=math.inf)
        out.append(JobSpan(job, start, end, frozenset(dirs[job]), bool(sharing)))
    return out


def separate_jobs(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records with each job's own id in ``run_id`` where several jobs share a run id.

    A record goes to the job of its run id that started last at or before it (the first job,
    for a record before any start). Records of a run id with one job are returned as they are.
    """
    rows = list(rows)
    starts = {run_id: s for run_id, s in _starts(rows).items() if len(s) > 1}
    if not starts:
        return rows
    taken: set[str] = set()
    names = {run_id: [_name(run_id, t, taken) for t in s] for run_id, s in starts.items()}
    out: list[Mapping[str, Any]] = []
    for row in rows:
        run_id = job_of(row)
        ours = starts.get(run_id)
        if ours is None:
            out.append(row)
            continue
        index = max(0, bisect.bisect_right(ours, row["wall_time"]) - 1)
        out.append({**row, "run_id": names[run_id][index]})
    return out


def job_grid(grid: RankGrid, span: JobSpan) -> RankGrid:
    """One job's part of the ranks' grid: the rows of its run directories, scored among
    themselves; where another job wrote to them too, only the windows ending after its start
    until the next one's, and the heartbeats logged then. The report's per-job ranks (and what
    a view of one job's ranks should read)."""
    rows = [row for row, run in enumerate(grid.runs) if run.split("/", 1)[0] in span.dirs]
    since, until = (span.start, span.end) if span.shared else (-math.inf, math.inf)
    ends = grid.window_ends()
    inside = np.flatnonzero((ends > since) & (ends <= until))
    cols = slice(int(inside[0]), int(inside[-1]) + 1) if len(inside) else slice(0, 0)
    runs = [grid.runs[row] for row in rows]
    beats = {
        run: beat
        for run, beat in grid.beats.items()
        if run in runs and since < beat.get("wall_time", until) <= until
    }
    cut = [a[rows][:, cols] for a in (grid.steps, grid.step_s, grid.collective_s)]
    p50, p95, starved, ran = (
        a[rows][:, cols] for a in (grid.step_p50, grid.step_p95, grid.starved, grid.cpu_run)
    )
    slot0 = grid.slot0 + (cols.start or 0)
    return RankGrid(
        *(runs, grid.window_s, slot0, *cut, beats),
        step_quantiles=(p50, p95),
        starved=starved,
        cpu_run=ran,
    )
