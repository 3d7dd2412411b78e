"""The Ranks view of one job where the logdir holds several.

Two jobs written to one logdir must never be scored as one grid: a stall in one would hide
behind the other's heartbeats, a straggler behind the other's ranks. The timeline store tells
the jobs apart (``tb_monitor.analysis.jobs.job_spans``, by run id and start); here the ranks'
grid is cut to the job the view shows (``jobs.job_grid``, as the report's per-job sections
read it) and scored among that job's ranks, once per snapshot and job. A logdir with one job
(or whose jobs are not read yet) is shown whole, as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.grid_history import FoldedGrid, folded_job_grid
from tb_monitor.analysis.jobs import JobSpan, job_grid
from tb_plugin.rank_snapshot import RankSnapshot
from tb_plugin.requests import RequestError

__all__ = ["job_snapshot", "job_view", "jobs_json", "pick_job"]


def _rows(snap: RankSnapshot, span: JobSpan) -> int:
    """How many of the grid's ranks are the job's (by run directory)."""
    return sum(run.split("/", 1)[0] in span.dirs for run in snap.runs)


def pick_job(snap: RankSnapshot, spans: Sequence[JobSpan], wanted: str | None) -> JobSpan | None:
    """The job the view shows: ``wanted``, else the newest job with ranks; None (the whole grid)
    where the logdir holds one job or none is known yet. Raise :class:`RequestError` for a job
    the logdir does not hold."""
    if wanted is not None and spans and wanted not in {span.job for span in spans}:
        known = ", ".join(span.job for span in spans)
        raise RequestError(f"job must be one of the logdir's jobs ({known}), got {wanted!r:.80}")
    if len(spans) < 2:
        return None
    if wanted is not None:
        return next(span for span in spans if span.job == wanted)
    with_ranks = [span for span in spans if _rows(snap, span)] or list(spans)
    return max(with_ranks, key=lambda span: span.start)


def jobs_json(snap: RankSnapshot, spans: Sequence[JobSpan]) -> list[dict[str, Any]]:
    """The jobs for the view's picker, oldest first: id, start (epoch s, null where unknown),
    and how many ranks recorded health."""
    ordered = sorted(spans, key=lambda span: span.start)
    return [
        {
            "job": span.job,
            "start": span.start if math.isfinite(span.start) else None,
            "ranks": _rows(snap, span),
        }
        for span in ordered
    ]


def _recorded_part(grid: RankGrid, span: JobSpan) -> RankGrid:
    """``grid`` cut to the windows its ranks recorded, heartbeats kept: a job's grid runs to the
    next job's start (the first job's would show an hour of nothing after its three minutes)."""
    held = np.flatnonzero((grid.steps > 0).any(axis=0))
    if not len(held) or (held[0] == 0 and held[-1] == grid.shape[1] - 1):
        return grid
    ends = grid.window_ends()
    since, until = ends[held[0]] - grid.window_s, ends[held[-1]]
    cut = job_grid(grid, dataclasses.replace(span, start=since, end=until, shared=True))
    return cut.with_beats(grid.beats)


def job_snapshot(snap: RankSnapshot, span: JobSpan | None) -> RankSnapshot:
    """The snapshot of one job's ranks (made once per snapshot and job); ``snap`` for None."""
    if span is None:
        return snap
    found = snap.jobs.get(span)
    if found is None:
        grid = folded_job_grid(snap.grid, span)
        if not isinstance(grid, FoldedGrid):  # a history runs from the job's start already
            grid = _recorded_part(grid, span)
        found = dataclasses.replace(
            snap,
            grid=grid,
            scores=[dataclasses.asdict(s) for s in grid.scores(*snap.scoring)],
            stalls=[dataclasses.asdict(s) for s in grid.stalls()],
            jobs={},
        )
        snap.jobs[span] = found
    return found


def job_view(
    snap: RankSnapshot, spans: Sequence[JobSpan], wanted: str | None, attempts: list[dict[str, Any]]
) -> tuple[RankSnapshot, list[dict[str, Any]], dict[str, Any]]:
    """What the ``ranks`` route shows of ``wanted`` (else the newest job): its snapshot, its
    attempts (for the markers), and the payload's ``jobs`` and ``job`` (null: the whole grid)."""
    span = pick_job(snap, spans, wanted)
    shown = {"jobs": jobs_json(snap, spans), "job": span and span.job}
    if span is None:
        return snap, attempts, shown
    # The cached job snapshot may be older than the read's progress: say how far it is now.
    ours = dataclasses.replace(job_snapshot(snap, span), loading=snap.loading)
    return ours, [a for a in attempts if a.get("job") == span.job], shown
