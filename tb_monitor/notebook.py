"""An elastic job's life in a notebook: the timeline figure, why it restarted, the restart summary.

    >>> tb_monitor.notebook.report("runs/demo")            # the job's health, shown as its text
    >>> tb_monitor.notebook.timeline("runs/demo")          # matplotlib figure, one row per lane
    >>> tb_monitor.notebook.restarts("runs/demo")          # per attempt: root cause, collateral
    >>> tb_monitor.notebook.restart_summary("runs/demo")   # pandas DataFrame, one row per attempt
    >>> tb_monitor.notebook.rank_heatmap("runs/demo")      # ranks x windows, relative slowness
    >>> tb_monitor.notebook.step_times("runs/demo")        # per rank, step time median and p95

Each takes a logdir (a path or an ``s3://`` / ``gs://`` URL); all but ``report`` also the
DataFrame ``tb_monitor.read_events`` returned.

Lanes, intervals and state colours are the Timeline tab's (``tb_monitor.timeline``), so the
figure, the trace export and TensorBoard agree; the report and the summaries are
``tb_monitor.analysis``'s (``health.job_report``, the document ``tb-monitor report`` prints).
matplotlib is imported only when drawing (the ``notebook`` extra).
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tb_monitor.analysis.attempts import Attempt, attempts, restart_starts
from tb_monitor.analysis.health import JobReport, job_report
from tb_monitor.analysis.restart_marks import mark_restarts
from tb_monitor.analysis.restarts import restart_summary, restarts
from tb_monitor.analysis.sources import timeline_rows
from tb_monitor.timeline import SLOWNESS_COLORS, Lane, Span, lane_of, spans, state_color

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["rank_heatmap", "report", "restart_summary", "restarts", "step_times", "timeline"]


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"tb_monitor.notebook needs {module.split('.')[0]}; install the extra with "
            "pip install 'tb-monitor[notebook]'"
        ) from exc


def report(logdir: str | os.PathLike[str], job: str | None = None) -> JobReport:
    """The job's health (``tb_monitor.analysis.health.job_report``): each job's attempts with
    their root causes, collateral ranks and time lost, the ranks' step times, stragglers and
    stalls. A notebook shows it as the text ``tb-monitor report`` prints (``str()`` of it too);
    ``.to_json()`` is its ``--json``. ``job``: only that job (its run id, or
    ``<run id>@HH:MM:SS`` where two jobs share one), as ``tb-monitor report --job``."""
    found = job_report(logdir)
    return found if job is None else found.pick(job)


def _marks(source: Any) -> tuple[list[Span], list[Attempt]]:
    """The timeline's marks as drawn (collateral ranks stopped by the restart), and the attempts."""
    rows = timeline_rows(source, "timeline")
    if not rows:
        what = (
            f"logdir {os.fspath(source)!r}"
            if isinstance(source, (str, os.PathLike))
            else "the DataFrame"
        )
        raise ValueError(f"{what} holds no timeline events")
    marks = spans(rows)
    found = attempts(rows, marks)
    return mark_restarts(marks, found), found


def _draw_marks(ax: Axes, marks: list[Span], row: dict[Lane, int], t0: float) -> None:
    """Intervals as bars, points as ticks, in their state's colour; one legend entry a state."""
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
            ax.broken_barh(ranges, (y - 0.3, 0.6), color=state_color(state), label=label)
    for state, (xs, ys) in points.items():
        label = None if state in seen else (state or "other")
        seen.add(state)
        ax.scatter(xs, ys, marker="|", s=120, color=state_color(state), label=label)


def _draw_root_causes(ax: Axes, found: list[Attempt], row: dict[Lane, int], t0: float) -> None:
    """Each root cause: an ✕ on its rank's lane, with its one-line reason."""
    for attempt in found:
        cause = attempt.root_cause
        if cause is None or cause.record is None:
            continue
        y = row[lane_of(cause.record)]
        ax.scatter(
            [cause.time - t0],
            [y],
            marker="X",
            s=90,
            color=state_color("FAILED"),
            edgecolors="black",
            zorder=5,
        )
        ax.annotate(
            f"root cause: {cause.reason}"[:90],
            (cause.time - t0, y),
            xytext=(8, -3),
            textcoords="offset points",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.85, "lw": 0},
        )


def _draw_restarts(ax: Axes, marks: list[Span], many_jobs: bool, t0: float) -> None:
    """Each restart: a dashed vertical line where its first worker started."""
    for job, attempt, start in restart_starts(marks):
        ax.axvline(start - t0, color="#424242", linestyle="--", linewidth=1)
        ax.annotate(
            f"restart {attempt}" + (f" ({job})" if many_jobs else ""),
            (start - t0, 0),
            xycoords=("data", "axes fraction"),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=8,
        )


def _label_axes(ax: Axes, lanes: list[Lane], many_jobs: bool, t0: float, marks: int) -> None:
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
    ax.set_title(f"{marks} marks on {len(lanes)} lanes")


def timeline(source: str | os.PathLike[str] | Any, ax: Axes | None = None) -> Figure:
    """Draw a job's timeline: one row per lane, bars for intervals, ticks for points.

    ``source``: a logdir (path or URL) or the DataFrame ``tb_monitor.read_events`` returned;
    anything else is a TypeError naming it. Colours follow the state
    (``tb_monitor.timeline.state_color``), ranks that went down with another's failure drawn as
    STOPPED_BY_RESTART (STOPPED_AT_END in a job's last attempt), each root cause marked with an
    ✕; each restart is a dashed vertical line; jobs sharing a run id drawn apart. Draws into ``ax`` when given, else into a new figure sized to the number of lanes;
    returns the figure. Raises ValueError when it holds no timeline events.
    """
    marks, found = _marks(source)
    plt = _need("matplotlib.pyplot")
    lanes = sorted({span.lane for span in marks}, key=Lane.sort_key)
    row = {lane: i for i, lane in enumerate(lanes)}
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 1.5 + 0.32 * len(lanes)), layout="constrained")
    t0 = min(span.begin for span in marks)
    many_jobs = len({lane.group for lane in lanes}) > 1
    _draw_marks(ax, marks, row, t0)
    _draw_root_causes(ax, found, row, t0)
    _draw_restarts(ax, marks, many_jobs, t0)
    _label_axes(ax, lanes, many_jobs, t0, len(marks))
    return ax.figure


def rank_heatmap(source: Any, *, window_s: float | None = None, ax: Axes | None = None) -> Figure:
    """Ranks x windows, each cell a rank's compute time over the median rank's in that window,
    in the Ranks view's diverging scale (``tb_monitor.timeline.SLOWNESS_COLORS``, 0.5x to 2x);
    flagged stragglers' labels in bold. ``source``: a logdir or ``read_scalars``' DataFrame;
    ``window_s``: the recording window (``TB_MONITOR_RANK_WINDOW_S``; default: inferred).

    The columns are the :class:`tb_monitor.analysis.grid.RankGrid`'s windows; with more
    windows than the axes have pixels, whole windows merge (k to a column), as in the Ranks
    view, so no column falls between two windows."""
    from tb_monitor.analysis.grid import RankGrid

    plt = _need("matplotlib.pyplot")
    colors = _need("matplotlib.colors")
    grid = RankGrid.load(source, window_s=window_s)
    rows, windows = grid.shape
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.6 + 0.3 * max(1, rows)))
    else:
        fig = ax.figure
    if not windows:
        ax.set_title("no rank health recorded")
        return fig
    pixels = max(1, int(ax.get_window_extent().width))
    per = -(-windows // pixels)  # whole windows a column
    cmap = colors.LinearSegmentedColormap.from_list("slowness", list(SLOWNESS_COLORS))
    lo, _ = grid.extent
    image = ax.imshow(
        grid.merged(per),
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=colors.LogNorm(vmin=0.5, vmax=2.0),
        extent=(0, -(-windows // per) * per * grid.window_s, rows - 0.5, -0.5),
    )
    flagged = {s.row for s in grid.stragglers()}
    ax.set_yticks(range(rows))
    ax.set_yticklabels([f"rank {r}" for r in grid.ranks])
    for row, label in enumerate(ax.get_yticklabels()):
        if row in flagged:
            label.set_fontweight("bold")
    start = datetime.fromtimestamp(lo, tz=timezone.utc)
    ax.set_xlabel(f"seconds since {start:%H:%M:%S} UTC ({grid.window_s:g}-s windows)")
    ax.set_title("compute time relative to the median rank")
    bar = fig.colorbar(image, ax=ax, pad=0.01)
    bar.ax.minorticks_off()
    bar.set_ticks([0.5, 1.0, 2.0], labels=["0.5x", "1x", "2x"])
    fig.tight_layout()
    return fig


def _attempt_marks(source: Any) -> list[tuple[float, str, str, str]]:
    """(time, label, colour, line style) of each attempt's start (dashed) and its root cause,
    the Ranks view's markers; none for a DataFrame or a logdir without timeline events."""
    if not isinstance(source, (str, os.PathLike)):
        return []
    rows = timeline_rows(source, "timeline")
    out = []
    for a in attempts(rows, spans(rows)) if rows else []:
        verb = "restarted" if a.attempt else "started"
        out.append((a.start, f"attempt {a.attempt} {verb}", state_color("RENDEZVOUS"), "--"))
        if a.root_cause is not None:
            cause = a.root_cause
            what = (
                cause.reason
                if cause.source in ("vanished", "cut_off")
                else f"rank {cause.rank} failed"
            )
            out.append((cause.time, what, state_color("FAILED"), "-"))
    return out


def step_times(
    source: Any,
    *,
    window_s: float | None = None,
    ranks: list[int] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Each rank's step time in seconds, window by window, as the Ranks view draws it: every
    rank's median a thin grey line, the median rank's median (black) and p95 (dashed black),
    the ``ranks`` chosen (default: the flagged stragglers) in colour with their own p95, and
    each attempt's start and root cause as a vertical line. ``source``: a logdir (attempts
    marked from its timeline) or ``read_scalars``' DataFrame; ``window_s`` as in
    :func:`rank_heatmap`, whose column merging this follows
    (``tb_monitor.analysis.step_times``). Windows recorded without quantiles show their mean
    step time."""
    import numpy as np

    from tb_monitor.analysis.grid import RankGrid
    from tb_monitor.analysis.step_times import bucketed, typical

    plt = _need("matplotlib.pyplot")
    grid = RankGrid.load(source, window_s=window_s)
    fig, ax = plt.subplots(figsize=(11, 4)) if ax is None else (ax.figure, ax)
    rows, windows = grid.shape
    if not windows:
        ax.set_title("no rank health recorded")
        return fig
    per = -(-windows // max(1, int(ax.get_window_extent().width)))
    median, tail, recorded = bucketed(grid, per)
    x = np.minimum(np.arange(median.shape[1]) * per + per / 2, windows) * grid.window_s
    for row in range(rows):
        label = "each rank's median" if row == 0 else None
        ax.plot(x, median[row], color="0.6", lw=0.8, alpha=0.4 if rows > 16 else 0.8, label=label)
    ax.plot(x, typical(median), color="black", lw=2, label="median rank")
    if recorded:
        ax.plot(x, typical(tail), color="black", lw=1, ls="--", label="median rank's p95")
    chosen = [s.row for s in grid.stragglers()] if ranks is None else _rows_of(grid, ranks)
    for i, row in enumerate(chosen):
        color = f"C{i % 10}"
        ax.plot(x, median[row], color=color, lw=1.8, label=f"rank {grid.ranks[row]}")
        if recorded:
            ax.plot(x, tail[row], color=color, lw=1, ls="--", label=f"rank {grid.ranks[row]} p95")
    _draw_attempt_marks(ax, _attempt_marks(source), grid.extent[0])
    start = datetime.fromtimestamp(grid.extent[0], tz=timezone.utc)
    ax.set_xlabel(f"seconds since {start:%H:%M:%S} UTC ({grid.window_s:g}-s windows)")
    ax.set_ylabel("step time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("step time per rank" + ("" if recorded else " (window means: no quantiles)"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def _rows_of(grid: Any, ranks: list[int]) -> list[int]:
    """The grid's rows of ``ranks``; a rank it does not hold is a ValueError naming it."""
    missing = [r for r in ranks if r not in grid.ranks]
    if missing:
        raise ValueError(f"ranks {missing} recorded no step times (ranks: {grid.ranks})")
    return [grid.ranks.index(r) for r in ranks]


def _draw_attempt_marks(ax: Axes, marks: list[tuple[float, str, str, str]], t0: float) -> None:
    for t, label, color, style in marks:
        ax.axvline(t - t0, color=color, lw=1.2, ls=style)
        ax.annotate(
            label,
            (t - t0, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-2, -3),
            textcoords="offset points",
            rotation=90,  # along its line: neighbouring marks' labels do not overlap
            ha="right",
            va="top",
            fontsize=8,
            color=color,
        )
