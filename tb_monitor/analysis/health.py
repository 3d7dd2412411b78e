"""The job's health as one value: ``job_report(logdir)`` returns a ``JobReport``.

Everything a user asks of a finished or running elastic job in one typed document: each job's
attempts with their root causes, collateral ranks and time lost (``tb_monitor.analysis.attempts``),
and, where the ranks recorded their health, the ranks' step times, the stragglers and the
stalled ranks with the rank the others wait for. Each job of the logdir is read on its own
(``tb_monitor.analysis.jobs``: by run id and start), its ranks scored among themselves, and a
job that ended lists no rank as stalled after its end (stalls are judged at its end). ``tb-monitor report`` prints it (text as
``tb_monitor.analysis.report_text`` renders it, or ``--json``), a notebook shows the same text,
the Timeline tab's header its attempts and the Prometheus sink its restarts and state; nothing
else assembles the job's health, so every view of it agrees. A reader that already holds the
records (and the ``RankGrid``) builds the same value with ``report_of``: the plugin, through
TensorBoard's data provider; the Prometheus sink, from the records it was handed.
``JobReport.to_json()`` is the ``--json`` document, a plain dict:

JSON schema (``schema`` is ``SCHEMA_VERSION``, bumped on an incompatible change; a new key is
not one; times are epoch seconds)::

    {
      "schema": 1,
      "logdir": "runs/exp7",
      "status": "succeeded" | "failed" | "terminated" | "running" | "empty",
                                         # report --follow: also "waiting", before the logdir
                                         # exists; "terminated": a signal to its agent ended a job
      "exit_code": 0 | 1,                # 1: a job's last attempt failed, or a job is stalled;
                                         # terminated: torchrun's exit code (1)
      "ranks": null | {                  # rank health of the logdir's one job (or of a logdir
                                         # without job records); null when none was recorded,
                                         # or when the logdir holds several jobs: see jobs[].ranks
        "count": 4, "windows": 36, "window_s": 10.0,
        "stragglers": [                  # flagged ranks, slowest first
          {"rank": 1, "relative": 1.5, "individual": 1.02, "windows_over": 12, "flagged": true}
        ],
        "slowest": [...],                # the 3 highest relative scores, same fields
        "stalled": true,                 # a rank is stalled and not every job has ended
        "stalls": [                      # the rank the others wait for first
          {"rank": 3, "since_step_s": 45.0, "entered": 5, "left": 5,
           "in_collective": false, "fr_seq": null, "waited_for": true,
           "silent": true,               # its heartbeats stopped while the others' went on
           "agent": null | {             # what its agent saw (analysis.agent_views)
             "seen": "stopped" | "uninterruptible sleep" | "alive but silent" | null,
             "process_state": "T", "pid": 4242, "host": "node-a", "seen_at": 1.7e9,
             "stacks": "Thread 0x... (most recent call first): ..." | null,
             "stacks_at": 1.7e9 | null, "stacks_reason": "dumped after it went silent" | null,
             "stacks_note": "stopped: no stacks (...)" | null}}
        ],
        "waited_for": [3],
        "step_times": [                  # per rank, the median over its windows, by rank
          {"rank": 0, "windows": 36, "step_s": 0.05, "collective_s": 0.01, "compute_s": 0.04}
        ]
      },
      "jobs": [
        {
          "job": "<run id>",
          "status": "<TERMINATED, or the last attempt's outcome: SUCCEEDED, FAILED, ...>",
          "terminated": null | {"signal": "SIGTERM", "exit_code": 1, "time": 1.7e9},
          "finished": true,           # every agent of the job recorded its verdict
          "attempts_total": 2,
          "restarts": 1,
          "time_lost_s": 2.7,         # summed over the attempts a restart followed
          "ranks": null | {...},      # this job's rank health, as the top-level "ranks"
          "attempts": [
            {
              "job": "...", "attempt": 0, "start": 1.7e9, "end": 1.7e9, "duration_s": 6.0,
              "outcome": "FAILED",
              "root_cause": null | {
                "rank": 2, "host": "node-a", "time": 1.7e9,
                "reason": "ValueError: bad batch",   # one line: also "killed by SIGKILL"
                "exception": "ValueError" | null, "message": "bad batch" | null,
                "exit_code": 1 | null, "signal": "SIGKILL" | null,
                "source": "worker" | "error_file" | "agent" | "vanished",
                "traceback": "Traceback (most recent call last): ..." | null
              },
              "collateral_ranks": [0, 1, 3], "failed_ranks": [0, 1, 2, 3], "ranks": [0, 1, 2, 3],
              "time_lost_s": 2.7 | null,  # root cause -> next attempt; null: none followed
              "restarted": true,          # a later attempt followed
              "collateral_state": "STOPPED_BY_RESTART" | "STOPPED_AT_END",
              "nodes": ["node-a (pid 41)", ...], "nodes_joined": [], "nodes_left": [],
              "rendezvous_s": 1.1
            }
          ]
        }
      ]
    }
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from tb_monitor.analysis.agent_views import agent_views
from tb_monitor.analysis.attempts import (
    Attempt,
    Termination,
    attempt_dict,
    attempts,
    finished_jobs,
    terminations,
)
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.jobs import job_grid, job_spans, separate_jobs
from tb_monitor.analysis.rank_report import RankHealth, rank_health
from tb_monitor.analysis.report_text import html_text, render, visible
from tb_monitor.analysis.sources import timeline_rows
from tb_monitor.timeline import Span

__all__ = ["SCHEMA_VERSION", "JobHealth", "JobReport", "job_report", "report_of"]

#: The version of ``JobReport.to_json()``'s document: bumped on an incompatible change.
SCHEMA_VERSION = 1
_EXIT_OK, _EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class JobHealth:
    """One job of the logdir: its attempts in order, whether every agent recorded its end, and
    its ranks' health (None where they recorded none)."""

    job: str
    attempts: tuple[Attempt, ...]
    finished: bool
    ranks: RankHealth | None = None
    terminated: Termination | None = None  # a signal to its agent ended it

    @property
    def stalled(self) -> bool:
        """A rank of it is stalled while it runs."""
        return self.ranks is not None and bool(self.ranks.stalls) and not self.finished

    @property
    def status(self) -> str:
        """TERMINATED when a signal to its agent ended it (its ranks' failures that followed are
        collateral), else the last attempt's outcome: SUCCEEDED, FAILED, RUNNING, ..."""
        return "TERMINATED" if self.terminated else self.attempts[-1].outcome

    @property
    def restarts(self) -> int:
        return len(self.attempts) - 1

    @property
    def time_lost_s(self) -> float:
        """Summed over the attempts a restart followed."""
        return sum(a.time_lost_s or 0.0 for a in self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "finished": self.finished,
            "attempts_total": len(self.attempts),
            "restarts": self.restarts,
            "time_lost_s": self.time_lost_s,
            "terminated": None if self.terminated is None else asdict(self.terminated),
            "ranks": None if self.ranks is None else _ranks_json(self.ranks, self.stalled),
            "attempts": [attempt_dict(a) for a in self.attempts],
        }


@dataclass(frozen=True)
class JobReport:
    """The health of the jobs in one logdir: their attempts, and their ranks where recorded."""

    logdir: str
    jobs: tuple[JobHealth, ...]
    ranks: RankHealth | None  # None where no rank recorded its health

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every job's attempts, by job and attempt (``tb_monitor.analysis.attempts.attempts``)."""
        return tuple(attempt for job in self.jobs for attempt in job.attempts)

    @property
    def finished(self) -> bool:
        """Every job has ended (and there is at least one)."""
        return bool(self.jobs) and all(job.finished for job in self.jobs)

    @property
    def status(self) -> str:
        """``empty``, ``failed`` (a job's last attempt failed), ``terminated`` (a signal to its
        agent ended a job: a preemption), ``succeeded`` or ``running``."""
        if not self.jobs:
            return "empty"
        if any(job.status == "FAILED" for job in self.jobs):
            return "failed"
        if any(job.terminated for job in self.jobs):
            return "terminated"
        return "succeeded" if self.finished else "running"

    @property
    def stalled(self) -> bool:
        """A rank is stalled while its job runs (a stall in a job that has ended is history)."""
        if self.jobs:
            return any(job.stalled for job in self.jobs)
        return self.ranks is not None and bool(self.ranks.stalls)

    def pick(self, job: str) -> JobReport:
        """The report of one job: ``job`` is its id, or its run id (every job of that run id).
        A ValueError names the jobs there are when none matches."""
        ours = tuple(j for j in self.jobs if job in (j.job, j.job.split("@", 1)[0]))
        if not ours:
            there = ", ".join(visible(j.job) for j in self.jobs) or "none"
            raise ValueError(f"no job {job!r} in {self.logdir} (jobs: {there})")
        ranks = ours[0].ranks if len(ours) == 1 else None
        return JobReport(logdir=self.logdir, jobs=ours, ranks=ranks)

    @property
    def exit_code(self) -> int:
        """1 when a job's last attempt failed or a rank is stalled, torchrun's (1) when a signal
        ended a job, else 0."""
        if self.status == "terminated":
            codes = [job.terminated.exit_code for job in self.jobs if job.terminated]
            return next((code for code in codes if code), _EXIT_FAILED)
        return _EXIT_FAILED if self.status == "failed" or self.stalled else _EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (the module docstring gives the schema)."""
        ranks = None if self.ranks is None else _ranks_json(self.ranks, self.stalled)
        return {
            "schema": SCHEMA_VERSION,
            "logdir": self.logdir,
            "status": self.status,
            "exit_code": self.exit_code,
            "ranks": ranks,
            "jobs": [job.to_json() for job in self.jobs],
        }

    def __str__(self) -> str:
        """The text ``tb-monitor report`` prints (``tb_monitor.analysis.report_text``)."""
        return render(self)

    def _repr_html_(self) -> str:
        """A notebook shows the same text, escaped."""
        return html_text(self)


def _ranks_json(ranks: RankHealth, stalled: bool) -> dict[str, Any]:
    return {**ranks.to_json(), "stalled": stalled}


def _jobs(rows: Sequence[Mapping[str, Any]], marks: list[Span] | None) -> tuple[JobHealth, ...]:
    """Each job's attempts, in the order ``attempts`` gives them."""
    found = attempts(rows, marks)
    finished = finished_jobs(rows, found)
    stopped = terminations(rows)
    by_job: dict[str, list[Attempt]] = {}
    for attempt in found:
        by_job.setdefault(attempt.job, []).append(attempt)
    return tuple(
        JobHealth(job, tuple(ours), finished.get(job, False), terminated=stopped.get(job))
        for job, ours in by_job.items()
    )


def _judged(
    grid: RankGrid, job: JobHealth | None, now: float | None, views: Any
) -> RankHealth | None:
    """The ranks' health, stalls judged at the job's end where it ended: a rank is not stalled
    after its job's end."""
    if job is not None and job.finished:
        newest = max((b.get("wall_time", -math.inf) for b in grid.beats.values()), default=None)
        latest = now if now is not None else newest
        now = None if latest is None else min(latest, job.attempts[-1].end)
    return rank_health(grid, now=now, views=views)


def _with_ranks(
    jobs: tuple[JobHealth, ...],
    rows: Sequence[Mapping[str, Any]],
    grid: RankGrid,
    now: float | None,
) -> tuple[tuple[JobHealth, ...], RankHealth | None]:
    """Each job with its own ranks' health (its part of the grid, where the logdir holds several
    jobs), and the report's: the one job's, or the whole grid's without job records."""
    views = agent_views(rows)
    if len(jobs) <= 1:
        ranks = _judged(grid, jobs[0] if jobs else None, now, views)
        return tuple(replace(job, ranks=ranks) for job in jobs), ranks
    spans = {span.job: span for span in job_spans(rows)}
    out = [
        replace(job, ranks=_judged(job_grid(grid, spans[job.job]), job, now, views)) for job in jobs
    ]
    return tuple(out), None


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
    ``now``: when stalls are judged (default: the newest heartbeat; a job that ended: its end);
    ``marks``: ``timeline.spans(rows)`` when the caller already drew them (of the same rows
    ``jobs.separate_jobs`` gives back: else they are drawn again).
    """
    given = list(rows)
    rows = separate_jobs(given)
    jobs = _jobs(rows, marks if rows == given else None)
    if grid is None:
        return JobReport(logdir=logdir, jobs=jobs, ranks=None)
    jobs, ranks = _with_ranks(jobs, rows, grid, now)
    return JobReport(logdir=logdir, jobs=jobs, ranks=ranks)


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
