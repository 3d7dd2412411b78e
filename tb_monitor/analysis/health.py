"""The job's health as one value: ``job_report(logdir)`` returns a ``JobReport``.

Everything a user asks of a finished or running elastic job in one typed document: each job's
attempts with their root causes, collateral ranks and time lost (``tb_monitor.analysis.attempts``),
and, where the ranks recorded their health, the ranks' step times, the stragglers and the
stalled ranks with the rank the others wait for. Each job of the logdir is read on its own
(``tb_monitor.analysis.jobs``: by run id and start), its ranks scored among themselves; a job
that ended, or whose last attempt is over, lists no stalled rank (a stall is live: the end says
why its ranks stopped), and a running attempt's stalls are judged on its own heartbeats.
``tb-monitor report`` prints it (``tb_monitor.analysis.report``: its text, or ``--json``), a
notebook shows the same text,
the Timeline tab's header its attempts and the Prometheus sink its restarts and state; nothing
else assembles the job's health, so every view of it agrees. A reader that already holds the
records (and the ``RankGrid``) builds the same value with ``report_of``: the plugin, through
TensorBoard's data provider; the Prometheus sink, from the records it was handed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.agent_views import agent_views
from tb_monitor.analysis.attempts import (
    Attempt,
    attempts,
    finished_jobs,
    stops_begun,
    terminations,
)
from tb_monitor.analysis.captures import captures
from tb_monitor.analysis.flight_recorder import GroupVerdict, group_verdicts
from tb_monitor.analysis.fr_records import dumps_of_rows
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.jobs import job_grid, job_spans, separate_jobs
from tb_monitor.analysis.rank_report import RankHealth, rank_health
from tb_monitor.analysis.report import SCHEMA_VERSION, JobHealth, JobReport
from tb_monitor.analysis.roll_call import roll_calls
from tb_monitor.analysis.scoring import Cut
from tb_monitor.analysis.sources import timeline_rows
from tb_monitor.analysis.store_contact import cut_off_ranks
from tb_monitor.timeline import Span

__all__ = ["SCHEMA_VERSION", "JobHealth", "JobReport", "job_report", "report_of"]


def _jobs(rows: Sequence[Mapping[str, Any]], marks: list[Span] | None) -> tuple[JobHealth, ...]:
    """Each job's attempts, in the order ``attempts`` gives them."""
    found = attempts(rows, marks)
    finished = finished_jobs(rows, found)
    stopped, stopping, taken = terminations(rows), stops_begun(rows), captures(rows)
    by_job: dict[str, list[Attempt]] = {}
    for attempt in found:
        by_job.setdefault(attempt.job, []).append(attempt)
    return tuple(
        JobHealth(
            job,
            tuple(ours),
            finished.get(job, False),
            terminated=stopped.get(job),
            stop_began=stopping.get(job),
            captures=tuple(_captures_of(job, taken)),
        )
        for job, ours in by_job.items()
    )


def _captures_of(job: str, taken: Mapping[str, list[Any]]) -> list[Any]:
    """The captures of ``job`` (``job``: its run id, with ``@start`` where the logdir holds
    several jobs of that id: the captures of the id go with each)."""
    return taken.get(job.split("@", 1)[0], [])


def _judged(
    grid: RankGrid,
    job: JobHealth | None,
    now: float | None,
    views: Any,
    calls: Any,
    cut_off: Mapping[tuple[str, int], Cut],
) -> RankHealth | None:
    """The ranks' health. A job that ended has no live stall: every agent recorded its verdict,
    or its last attempt is over (a rank failed or was stopped), or an agent began stopping its
    workers, and its ranks wait for that end, not for a rank. In a running attempt only the
    heartbeats logged since it started count: a rank whose beats stopped with an earlier
    attempt (it failed, its node left) has ended. ``cut_off``: the ranks of nodes whose
    keep-alives to the rendezvous store stopped (``store_contact.cut_off_ranks``)."""
    if job is None:
        return rank_health(grid, now=now, views=views, calls=calls, cut_off=cut_off)
    last = job.attempts[-1]
    stopping = job.stop_began is not None and job.stop_began >= last.start
    if job.finished or last.outcome != "RUNNING" or stopping:
        ranks = rank_health(grid, now=now, views=views)
        return None if ranks is None else replace(ranks, stalls=())
    ours = {run: b for run, b in grid.beats.items() if b.get("wall_time", -math.inf) >= last.start}
    ours = grid.with_beats(ours)
    return rank_health(ours, now=now, views=views, calls=calls, cut_off=cut_off)


def _with_ranks(
    jobs: tuple[JobHealth, ...],
    rows: Sequence[Mapping[str, Any]],
    grid: RankGrid,
    now: float | None,
) -> tuple[tuple[JobHealth, ...], RankHealth | None]:
    """Each job with its own ranks' health (its part of the grid, where the logdir holds several
    jobs), and the report's: the one job's, or the whole grid's without job records. A
    keep-alive is overdue by ``now``, else by the newest heartbeat."""
    newest_beat = max(
        (b["wall_time"] for b in grid.beats.values() if "wall_time" in b), default=None
    )
    cut = cut_off_ranks(rows, now=newest_beat if now is None else now, last_step=_last_step(grid))
    views, calls = agent_views(rows), roll_calls(rows)
    if len(jobs) <= 1:
        ranks = _judged(grid, jobs[0] if jobs else None, now, views, calls, cut)
        return tuple(replace(job, ranks=ranks) for job in jobs), ranks
    spans = {span.job: span for span in job_spans(rows)}
    out = [
        replace(job, ranks=_judged(job_grid(grid, spans[job.job]), job, now, views, calls, cut))
        for job in jobs
    ]
    return tuple(out), None


def _last_step(grid: RankGrid) -> float | None:
    """The oldest of the ranks' last steps by their newest beats (wall time), None without one."""
    steps = [
        float(b["wall_time"]) - float(b["since_step_s"])
        for b in grid.beats.values()
        if b.get("wall_time") is not None and b.get("since_step_s") is not None
    ]
    return min(steps, default=None)


def report_of(
    logdir: str,
    rows: Iterable[Mapping[str, Any]],
    grid: RankGrid | None = None,
    *,
    now: float | None = None,
    marks: list[Span] | None = None,
) -> JobReport:
    """The report from what a reader already holds: the decoded timeline records
    (``sources.timeline_rows``; rendezvous keep-alives may be left out, they change nothing) and
    the ranks' ``RankGrid``, as the plugin reads both through TensorBoard's data provider.
    ``now``: when stalls are judged (default: the newest heartbeat; a job that ended has none);
    ``marks``: ``timeline.spans(rows)`` when the caller already drew them (of the same rows
    ``jobs.separate_jobs`` gives back: else they are drawn again).
    """
    given = list(rows)
    rows = separate_jobs(given)
    jobs = _jobs(rows, marks if rows == given else None)
    recorded = _flight_recorder(rows)
    if grid is None:
        return JobReport(logdir=logdir, jobs=jobs, ranks=None, flight_recorder=recorded)
    jobs, ranks = _with_ranks(jobs, rows, grid, now)
    return JobReport(logdir=logdir, jobs=jobs, ranks=ranks, flight_recorder=recorded)


def _flight_recorder(rows: Sequence[Mapping[str, Any]]) -> tuple[GroupVerdict, ...]:
    """Each group's verdict from the Flight Recorder records imported into the logdir."""
    dumps = dumps_of_rows(row for row in rows if row.get("name") == contract.FR_COLLECTIVE)
    return group_verdicts(dumps) if dumps else ()


def job_report(
    logdir: str | os.PathLike[str], *, window_s: float | None = None, now: float | None = None
) -> JobReport:
    """The health of the jobs in ``logdir`` (a path or an ``s3://`` / ``gs://`` URL).

    ``window_s``: the ranks' recording window (default: inferred from their windows, see
    ``tb_monitor.analysis.grid``); ``now``: the time stalls are judged at (default: the
    newest heartbeat). Raises ``FileNotFoundError`` / ``OSError`` / ``ValueError`` when the
    logdir cannot be read, and TypeError, naming it, for anything but a logdir.
    """
    if not isinstance(logdir, (str, os.PathLike)):
        raise TypeError(
            f"job_report() takes a logdir (a path or an s3:// / gs:// URL), "
            f"not {type(logdir).__name__}: {logdir!r:.100}"
        )
    path = os.fspath(logdir)
    rows = timeline_rows(path, "job_report")
    return report_of(path, rows, RankGrid.from_logdir(path, window_s=window_s), now=now)
