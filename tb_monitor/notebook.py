"""An elastic job's life in a notebook: the timeline figure and the restart summary, one line each.

    >>> tb_monitor.notebook.timeline("runs/demo")          # matplotlib figure, one row per lane
    >>> tb_monitor.notebook.restart_summary("runs/demo")   # pandas DataFrame, one row per attempt

Lanes, intervals and states are the Timeline tab's (``tb_monitor.timeline.spans``), so the figure,
the trace export and TensorBoard agree. matplotlib and pandas are imported only when called
(the ``notebook`` extra).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tb_monitor import contract, readers
from tb_monitor.export import decode
from tb_monitor.timeline import Lane, Span, spans

if TYPE_CHECKING:
    import pandas
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["STATE_COLORS", "restart_summary", "timeline"]

#: Colour of each state in the figure; states not listed are drawn grey.
STATE_COLORS = {
    "INIT": "#9e9e9e",
    "START": "#64b5f6",
    "RUNNING": "#1e88e5",
    "RENDEZVOUS": "#00897b",
    "ASSIGN_WORKER_RANKS": "#4db6ac",
    "HEALTHY": "#7cb342",
    "SUCCEEDED": "#2e7d32",
    "STOPPED": "#8d6e63",
    "TERMINATED": "#fb8c00",
    "UNHEALTHY": "#8e24aa",
    "FAILED": "#e53935",
}
_OTHER = "#bdbdbd"

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


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"tb_monitor.notebook needs {module.split('.')[0]}; install the extra with "
            "pip install 'tb-monitor[notebook]'"
        ) from exc


def _spans(logdir: str | os.PathLike[str]) -> list[Span]:
    return spans(decode(readers.iter_timeline(logdir)))


def timeline(logdir: str | os.PathLike[str], ax: Axes | None = None) -> Figure:
    """Draw the logdir's timeline: one row per lane, bars for intervals, ticks for points.

    Colours follow the state (:data:`STATE_COLORS`); each restart is a dashed vertical line.
    Draws into ``ax`` when given, else into a new figure sized to the number of lanes; returns
    the figure. Raises ValueError naming the logdir when it holds no timeline events.
    """
    marks = _spans(logdir)
    if not marks:
        raise ValueError(f"logdir {os.fspath(logdir)!r} holds no timeline events")
    plt = _need("matplotlib.pyplot")
    lanes = sorted({span.lane for span in marks}, key=Lane.sort_key)
    row = {lane: i for i, lane in enumerate(lanes)}
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 1.5 + 0.32 * len(lanes)), layout="constrained")
    t0 = min(span.begin for span in marks)

    bars: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    points: dict[str, tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    for span in marks:
        state = span.state or ""
        if span.end is None:
            points[state][0].append(span.begin - t0)
            points[state][1].append(row[span.lane])
        else:
            bars[state][row[span.lane]].append((span.begin - t0, max(span.end - span.begin, 1e-3)))
    seen: set[str] = set()
    for state, by_row in bars.items():
        for y, ranges in by_row.items():
            label = None if state in seen else (state or "other")
            seen.add(state)
            ax.broken_barh(
                ranges, (y - 0.3, 0.6), color=STATE_COLORS.get(state, _OTHER), label=label
            )
    for state, (xs, ys) in points.items():
        label = None if state in seen else (state or "other")
        seen.add(state)
        ax.scatter(xs, ys, marker="|", s=120, color=STATE_COLORS.get(state, _OTHER), label=label)

    for job, attempt, start in _restarts(marks):
        ax.axvline(start - t0, color="#424242", linestyle="--", linewidth=1)
        ax.annotate(
            f"restart {attempt}" + (f" ({job})" if len({lane.group for lane in lanes}) > 1 else ""),
            (start - t0, 0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=8,
        )

    many_jobs = len({lane.group for lane in lanes}) > 1
    ax.set_yticks(
        range(len(lanes)),
        [
            (f"{lane.group} · " if many_jobs else "") + f"{lane.kind}: {lane.label}"
            for lane in lanes
        ],
    )
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # first lane on top
    when = datetime.fromtimestamp(t0, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    ax.set_xlabel(f"seconds since {when}")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="state")
    ax.set_title(f"{len(marks)} marks on {len(lanes)} lanes")
    return ax.figure


def _restarts(marks: list[Span]) -> list[tuple[str, int, float]]:
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
    pandas = _need("pandas")
    marks = _spans(logdir)
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
