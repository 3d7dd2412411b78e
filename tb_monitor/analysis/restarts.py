"""Restarts: one row per attempt of an elastic job, computed from its timeline events.

Pure pandas over the timeline model (``tb_monitor.timeline``): the notebook, the demo and the
command line all answer "what happened to my job" from here.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import TYPE_CHECKING

from tb_monitor import contract
from tb_monitor.logdir import readers
from tb_monitor.timeline import Span, spans

if TYPE_CHECKING:
    import pandas

__all__ = ["SUMMARY_COLUMNS", "job_spans", "restart_starts", "restart_summary"]

SUMMARY_COLUMNS = (
    "job",
    "attempt",
    "start",
    "end",
    "duration_s",
    "outcome",
    "failed_ranks",
    "first_failed_rank",
    "rendezvous_s",
)


def job_spans(logdir: str | os.PathLike[str]) -> list[Span]:
    """Every timeline mark (point or interval) of the logdir's jobs."""
    return spans(readers.decode_timeline(readers.iter_timeline(logdir)))


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


def restart_summary(logdir: str | os.PathLike[str]) -> pandas.DataFrame:
    """One row per job and attempt: when it ran, its outcome, the failed ranks, rendezvous time.

    Columns: job, attempt (the rendezvous round it followed), start, end (UTC timestamps),
    duration_s, outcome (FAILED when a rank failed; RUNNING while one is open; RESTARTED when a
    later attempt began before any end was recorded; else the end states recorded),
    failed_ranks (sorted list), first_failed_rank (the rank that failed first: the root cause when
    the others then failed in a collective; None without failures), rendezvous_s (from the first node starting to join the round
    before this attempt until the last node joined it: time the job spent not training).
    """
    pandas = readers.need_pandas()
    marks = job_spans(logdir)
    attempts: dict[tuple[str, int], list[Span]] = defaultdict(list)
    for span in _worker_attempts(marks):
        attempts[(span.lane.group, span.number)].append(span)
    failed: dict[tuple[str, int | None], dict[int, float]] = defaultdict(dict)  # rank -> when
    for span in marks:
        # A worker record without a rank sits on its run's lane: no rank to name.
        rank_lane = isinstance(span.lane.key[0], int)
        if span.lane.kind == contract.WORKER and span.state == "FAILED" and rank_lane:
            when = span.begin if span.end is None else span.end
            ranks = failed[(span.lane.group, span.number)]
            rank = int(span.lane.key[0])
            ranks[rank] = min(when, ranks.get(rank, math.inf))
    rounds = [s for s in marks if s.lane.kind == contract.RENDEZVOUS and s.end is not None]

    rows = []
    previous_start: dict[str, float] = {}
    for (job, attempt), group in sorted(attempts.items()):
        start = min(span.begin for span in group)
        end = max(span.end or span.begin for span in group)
        # The rounds that ended between the previous attempt's start and this one's.
        since = previous_start.get(job, -math.inf)
        before = [s for s in rounds if s.lane.group == job and since < (s.end or 0) <= start]
        previous_start[job] = start
        rendezvous_s = (
            max(s.end or 0 for s in before) - min(s.begin for s in before) if before else 0.0
        )
        failures = failed[(job, attempt)]
        ranks = sorted(failures)
        first = min(failures, key=failures.__getitem__) if failures else None
        # States of the attempts whose end was recorded; the others were cut short or still run.
        states = sorted({span.state or "?" for span in group if len(span.rows) > 1})
        if ranks:
            outcome = "FAILED"
        elif any(span.open for span in group):
            outcome = "RUNNING"
        elif not states:
            outcome = "RESTARTED"  # a later attempt began before any end was recorded
        else:
            outcome = "/".join(states)
        rows.append((job, attempt, start, end, end - start, outcome, ranks, first, rendezvous_s))
    frame = pandas.DataFrame.from_records(rows, columns=SUMMARY_COLUMNS)
    for column in ("start", "end"):  # readable in a notebook, still exact to the microsecond
        frame[column] = pandas.to_datetime(frame[column], unit="s", utc=True)
    return frame.astype({"attempt": "int64", "first_failed_rank": "Int64"})  # Int64: NA, not NaN
