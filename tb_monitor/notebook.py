"""An elastic job's life in a notebook: the timeline figure, why it restarted, the restart summary.

    >>> tb_monitor.notebook.timeline("runs/demo")          # matplotlib figure, one row per lane
    >>> tb_monitor.notebook.restarts("runs/demo")          # per attempt: root cause, collateral
    >>> tb_monitor.notebook.restart_summary("runs/demo")   # pandas DataFrame, one row per attempt
    >>> tb_monitor.notebook.rank_heatmap("runs/demo")      # ranks x windows, relative slowness

Each takes a logdir (a path or an ``s3://`` / ``gs://`` URL) or the DataFrame
``tb_monitor.read_events`` returned.

Lanes, intervals and state colours are the Timeline tab's (``tb_monitor.timeline``), so the
figure, the trace export and TensorBoard agree; the summary is ``tb_monitor.analysis``'s.
matplotlib is imported only when drawing (the ``notebook`` extra).
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tb_monitor.analysis.restarts import (
    attempts,
    mark_restarts,
    restart_starts,
    restart_summary,
    restarts,
    timeline_rows,
)
from tb_monitor.timeline import SLOWNESS_COLORS, Lane, lane_of, spans, state_color

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["rank_heatmap", "restart_summary", "restarts", "timeline"]


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"tb_monitor.notebook needs {module.split('.')[0]}; install the extra with "
            "pip install 'tb-monitor[notebook]'"
        ) from exc


def timeline(source: str | os.PathLike[str] | Any, ax: Axes | None = None) -> Figure:
    """Draw a job's timeline: one row per lane, bars for intervals, ticks for points.

    ``source``: a logdir (path or URL) or the DataFrame ``tb_monitor.read_events`` returned;
    anything else is a TypeError naming it. Colours follow the state
    (``tb_monitor.timeline.state_color``), ranks that went down with another's failure drawn as
    STOPPED_BY_RESTART, each root cause marked with an ✕; each restart is a dashed vertical
    line. Draws into ``ax`` when given, else into a new figure sized to the number of lanes;
    returns the figure. Raises ValueError when it holds no timeline events.
    """
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
    marks = mark_restarts(marks, found)
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
            ax.broken_barh(ranges, (y - 0.3, 0.6), color=state_color(state), label=label)
    for state, (xs, ys) in points.items():
        label = None if state in seen else (state or "other")
        seen.add(state)
        ax.scatter(xs, ys, marker="|", s=120, color=state_color(state), label=label)

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

    for job, attempt, start in restart_starts(marks):
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


def rank_heatmap(source: Any, *, window_s: float = 10.0, ax: Axes | None = None) -> Figure:
    """Ranks x windows, each cell a rank's compute time over the median rank's in that window,
    in the Ranks view's diverging scale (``tb_monitor.timeline.SLOWNESS_COLORS``, 0.5x to 2x);
    flagged stragglers' labels in bold. ``source``: a logdir or ``read_scalars``' DataFrame;
    ``window_s``: the recording window (``TB_MONITOR_RANK_WINDOW_S``)."""

    from tb_monitor.analysis.stragglers import rank_windows, relative_scores, stragglers

    plt = _need("matplotlib.pyplot")
    colors = _need("matplotlib.colors")
    frame = rank_windows(source, window_s=window_s)
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.6 + 0.3 * max(1, frame["rank"].nunique())))
    else:
        fig = ax.figure
    if frame.empty:
        ax.set_title("no rank health recorded")
        return fig
    frame = frame.assign(slot=(frame["window_end"] / window_s).round().astype("int64"))
    grid = frame.pivot_table(index="rank", columns="slot", values="compute_s", aggfunc="last")
    relative = relative_scores(grid.to_numpy(dtype=float))
    cmap = colors.LinearSegmentedColormap.from_list("slowness", list(SLOWNESS_COLORS))
    start = datetime.fromtimestamp(grid.columns[0] * window_s, tz=timezone.utc)
    image = ax.imshow(
        relative,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        norm=colors.LogNorm(vmin=0.5, vmax=2.0),
        extent=(0, len(grid.columns) * window_s, len(grid.index) - 0.5, -0.5),
    )
    flagged = set(stragglers(source, window_s=window_s).query("flagged")["rank"])
    ax.set_yticks(range(len(grid.index)))
    ax.set_yticklabels([f"rank {r}" for r in grid.index])
    for label, rank in zip(ax.get_yticklabels(), grid.index, strict=True):
        if rank in flagged:
            label.set_fontweight("bold")
    ax.set_xlabel(f"seconds since {start:%H:%M:%S} UTC ({window_s:g}-s windows)")
    ax.set_title("compute time relative to the median rank")
    bar = fig.colorbar(image, ax=ax, pad=0.01)
    bar.ax.minorticks_off()
    bar.set_ticks([0.5, 1.0, 2.0], labels=["0.5x", "1x", "2x"])
    fig.tight_layout()
    return fig
