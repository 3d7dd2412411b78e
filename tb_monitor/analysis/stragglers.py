"""Stragglers and stalls: which rank is slow, and which rank the job waits for.

Computed from the per-rank Stat windows ``tb_monitor.integrations.rank_health`` records
(``rank/step_s``, ``rank/collective_s`` and the heartbeats), never from an event per step:

- ``rank_windows(source)``: one row per rank and window: steps, step time, time in collectives,
  and *compute* time (step time minus collective wait), the quantity that separates ranks;
- ``stragglers(source)``: per rank, its compute time relative to the median of all ranks in the
  same window (``relative``) and to its own best window (``individual``); a rank is flagged when
  ``relative`` stays above ``threshold`` for ``windows`` consecutive windows;
- ``stalls(source)``: ranks whose progress stopped for longer than ``factor`` typical steps
  (with a floor), and the rank the others wait for: the one that has not entered the collective
  the others are inside (behind in collective sequence).

Each takes a logdir (local or a URL) or the DataFrame ``read_scalars`` returned. pandas is
imported when called. The scoring itself is plain numpy (``relative_scores``,
``individual_scores``, ``longest_over``, ``stalled_ranks``), shared with the Timeline plugin's
Ranks view (``tb_plugin.ranks``), which reads the same scalars through TensorBoard's data provider.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tb_monitor import _env
from tb_monitor.logdir import readers

if TYPE_CHECKING:
    import pandas

__all__ = [
    "FLAG_THRESHOLD",
    "FLAG_WINDOWS",
    "STALL_FACTOR",
    "STALL_FLOOR_S",
    "WINDOW_COLUMNS",
    "individual_scores",
    "longest_over",
    "rank_of",
    "rank_windows",
    "relative_scores",
    "stalled_ranks",
    "stalls",
    "stragglers",
]

#: A rank is flagged when its relative score stays above this for FLAG_WINDOWS windows.
FLAG_THRESHOLD = 1.2
FLAG_WINDOWS = 3
#: A rank is stalled past STALL_FACTOR typical steps without a step boundary, at least the floor
#: (``$TB_MONITOR_STALL_FLOOR_S`` where the reading side runs: TensorBoard, ``tb-monitor report``).
STALL_FACTOR = 10.0
STALL_FLOOR_S = _env.seconds("TB_MONITOR_STALL_FLOOR_S", 30.0)

WINDOW_COLUMNS = (
    "rank",
    "run",
    "window_end",
    "steps",
    "step_s",
    "collective_s",
    "compute_s",
)
_RANK_RUN = re.compile(r"(?:^|/)(?:[\w.-]+-)?rank-(\d+)$")


def _scalars(source: Any) -> pandas.DataFrame:
    pd = readers.need_pandas()
    if isinstance(source, pd.DataFrame):
        missing = {"run", "tag", "step", "wall_time", "value"} - set(source.columns)
        if missing:
            raise ValueError(
                f"expected a read_scalars DataFrame; columns {sorted(missing)} missing"
            )
        return source
    if isinstance(source, (str, os.PathLike)):
        return readers.read_scalars(source)
    raise TypeError(f"expected a logdir or a read_scalars DataFrame, got {source!r:.100}")


def rank_of(run: str) -> int | None:
    """The rank a run directory holds (``.../rank-3``, ``job-rank-3``), or None."""
    match = _RANK_RUN.search(run)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------------------------
# The scoring, on plain numpy grids: rows are ranks, columns are windows (NaN: no window)
# ---------------------------------------------------------------------------------------------


def relative_scores(compute: np.ndarray) -> np.ndarray:
    """Each cell's compute time over the median of all ranks in its window (NaN where the
    window's median is 0 or the cell is missing)."""
    compute = np.asarray(compute, dtype=np.float64)
    if compute.size == 0:
        return compute.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
        median = np.nanmedian(compute, axis=0)
    median = np.where(median > 0, median, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return compute / median[np.newaxis, :]


def individual_scores(compute: np.ndarray) -> np.ndarray:
    """Each cell's compute time over its rank's own best (smallest) window."""
    compute = np.asarray(compute, dtype=np.float64)
    if compute.size == 0:
        return compute.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        best = np.nanmin(compute, axis=1)
    best = np.where(best > 0, best, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return compute / best[:, np.newaxis]


def longest_over(
    scores: np.ndarray, threshold: float = FLAG_THRESHOLD, present: np.ndarray | None = None
) -> np.ndarray:
    """Per rank (row), the longest run of consecutive windows whose score is above
    ``threshold``. Cells outside ``present`` (windows the rank did not record, or that were not
    kept) neither count nor break a run; a present window with no score (NaN) breaks it."""
    scores = np.asarray(scores, dtype=np.float64)
    rows, cols = scores.shape
    if not rows or not cols:
        return np.zeros(rows, dtype=np.int64)
    present = np.ones(scores.shape, dtype=bool) if present is None else np.asarray(present, bool)
    over = present & (np.nan_to_num(scores, nan=-np.inf) > threshold)
    broken = present & ~over
    # Windows over so far, minus as many at the last break: the run ending at each cell.
    count = np.cumsum(over, axis=1)
    at_break = np.maximum.accumulate(np.where(broken, count, 0), axis=1)
    return (count - at_break).max(axis=1).astype(np.int64)


def stalled_ranks(
    beats: Mapping[int, Mapping[str, float]],
    typical_step_s: Mapping[int, float],
    *,
    now: float | None = None,
    factor: float = STALL_FACTOR,
    floor_s: float = STALL_FLOOR_S,
) -> list[dict[str, Any]]:
    """The stalled ranks from each rank's newest heartbeat values.

    ``beats[rank]`` holds ``wall_time`` (when its newest heartbeat was logged) and the heartbeat
    Stats' values by name: ``since_step_s``, ``entered``, ``left``, ``in_collective_s``, and
    ``fr_seq`` where the rank read torch's Flight Recorder. Returns dicts with ``rank``,
    ``since_step_s``, ``entered``, ``left``, ``in_collective``, ``fr_seq`` and ``waited_for``
    (the rank the others wait for: outside a collective while others are inside one, or behind
    in the sequence of collectives entered from Python, or in the Flight Recorder's, which
    DDP's collectives pass through too), the waited-for first, then longest stalled first.
    """
    if not beats:
        return []
    now = max(float(b["wall_time"]) for b in beats.values()) if now is None else now
    rows = []
    for rank, beat in beats.items():
        if beat.get("since_step_s") is None:
            continue
        silent = now - float(beat["wall_time"])
        since = float(beat["since_step_s"]) + silent
        limit = max(floor_s, factor * float(typical_step_s.get(rank, 0.0) or 0.0))
        if since <= limit:
            continue
        rows.append(
            {
                "rank": int(rank),
                "since_step_s": since,
                "entered": int(beat.get("entered") or 0),
                "left": int(beat.get("left") or 0),
                "in_collective": float(beat.get("in_collective_s") or 0.0) > 0,
                "fr_seq": _flight_recorder_seq(beat.get("fr_seq")),
            }
        )
    inside_any = any(row["in_collective"] for row in rows)
    most = max((row["entered"] for row in rows), default=0)
    fr_most = max((row["fr_seq"] for row in rows if row["fr_seq"] is not None), default=None)
    for row in rows:
        behind_fr = row["fr_seq"] is not None and row["fr_seq"] < fr_most
        row["waited_for"] = (
            (not row["in_collective"] and inside_any) or row["entered"] < most or behind_fr
        )
    rows.sort(key=lambda row: (row["waited_for"], row["since_step_s"]), reverse=True)
    return rows


def _flight_recorder_seq(value: float | None) -> int | None:
    """A heartbeat's ``fr_seq``: None when absent or -1 (no current value: steps resumed)."""
    return None if value is None or value < 0 else int(value)


def _wide(scalars: pandas.DataFrame, window_s: float) -> pandas.DataFrame:
    """``rank/...`` tags as columns, one row per run and window: each Stat logs its window a
    moment after the boundary, so rows are grouped by the nearest boundary (``slot``)."""
    rows = scalars[scalars["tag"].str.startswith("rank/")].copy()
    if rows.empty:
        return rows
    rows["slot"] = (rows["wall_time"] / window_s).round().astype("int64")
    wide = rows.pivot_table(index=["run", "slot"], columns="tag", values="value", aggfunc="last")
    wide["wall_time"] = rows.groupby(["run", "slot"])["wall_time"].max()
    wide = wide.reset_index()
    wide["rank"] = wide["run"].map(rank_of)
    return wide[wide["rank"].notna()]


def rank_windows(source: Any, *, window_s: float = 10.0) -> pandas.DataFrame:
    """One row per rank and window: ``WINDOW_COLUMNS``, sorted by window end and rank.

    ``window_s`` is the recording window (``TB_MONITOR_RANK_WINDOW_S``, 10 s by default).
    """
    pd = readers.need_pandas()
    wide = _wide(_scalars(source), window_s)
    needed = {"rank/step_s.count", "rank/step_s.sum"}
    if wide.empty or not needed <= set(wide.columns):
        return pd.DataFrame(columns=WINDOW_COLUMNS)
    wide = wide[wide["rank/step_s.count"].notna()]
    collective = wide.get("rank/collective_s.sum", pd.Series(0.0, index=wide.index)).fillna(0.0)
    frame = pd.DataFrame(
        {
            "rank": wide["rank"].astype("int64"),
            "run": wide["run"],
            "window_end": wide["wall_time"],
            "steps": wide["rank/step_s.count"].astype("int64"),
            "step_s": wide["rank/step_s.sum"] / wide["rank/step_s.count"],
            "collective_s": collective / wide["rank/step_s.count"],
        }
    )
    frame["compute_s"] = (frame["step_s"] - frame["collective_s"]).clip(lower=0.0)
    return frame.sort_values(["window_end", "rank"], ignore_index=True)


def _aligned(windows: pandas.DataFrame, window_s: float) -> pandas.DataFrame:
    """Window ends of all ranks on one grid (ranks close the same window a few ms apart)."""
    windows = windows.copy()
    windows["slot"] = (windows["window_end"] / window_s).round().astype("int64")
    return windows


def stragglers(
    source: Any,
    *,
    threshold: float = FLAG_THRESHOLD,
    windows: int = FLAG_WINDOWS,
    window_s: float = 10.0,
) -> pandas.DataFrame:
    """One row per rank: its median ``relative`` and ``individual`` compute score, the longest
    run of consecutive windows above ``threshold``, and ``flagged``; slowest first."""
    pd = readers.need_pandas()
    frame = rank_windows(source, window_s=window_s)
    columns = ["rank", "relative", "individual", "windows_over", "flagged"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    frame = _aligned(frame, window_s)
    grid = frame.pivot_table(index="rank", columns="slot", values="compute_s", aggfunc="last")
    compute = grid.to_numpy(dtype=np.float64)
    relative = relative_scores(compute)
    individual = individual_scores(compute)
    longest = longest_over(relative, threshold, present=~np.isnan(compute))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rel_median = np.nanmedian(relative, axis=1)
        ind_median = np.nanmedian(individual, axis=1)
    rows = [
        (
            int(rank),
            float(rel_median[i]),
            float(ind_median[i]),
            int(longest[i]),
            bool(longest[i] >= windows),
        )
        for i, rank in enumerate(grid.index.tolist())
    ]
    result = pd.DataFrame.from_records(rows, columns=columns)
    return result.sort_values("relative", ascending=False, ignore_index=True)


def stalls(
    source: Any,
    *,
    now: float | None = None,
    factor: float = STALL_FACTOR,
    floor_s: float = STALL_FLOOR_S,
    window_s: float = 10.0,
) -> pandas.DataFrame:
    """One row per rank whose progress stopped: ``rank``, ``since_step_s`` (from its last
    heartbeat), ``entered``, ``left``, ``in_collective``, ``fr_seq`` (its newest collective in
    torch's Flight Recorder, None where not read), and ``waited_for`` (True for the rank the
    others wait for). Empty when nothing is stalled.

    A rank is stalled when its last heartbeat says no step boundary for more than ``factor``
    times its median step time (at least ``floor_s``), or its heartbeats stopped that long
    before ``now`` (default: the newest heartbeat of any rank).
    """
    pd = readers.need_pandas()
    columns = ["rank", "since_step_s", "entered", "left", "in_collective", "fr_seq", "waited_for"]
    scalars = _scalars(source)
    beats = scalars[scalars["tag"].str.startswith("rank/") & scalars["tag"].str.endswith(".value")]
    if beats.empty or "rank/since_step_s.value" not in set(beats["tag"]):
        return pd.DataFrame(columns=columns)
    # Each heartbeat Stat's newest value per rank, with the time it was logged.
    newest = beats.sort_values("wall_time").groupby(["run", "tag"]).tail(1)
    latest = newest.pivot_table(index="run", columns="tag", values="value", aggfunc="last")
    latest["wall_time"] = newest.groupby("run")["wall_time"].max()
    latest["rank"] = latest.index.map(rank_of)
    latest = latest[latest["rank"].notna()].set_index("rank")
    typical = rank_windows(scalars, window_s=window_s).groupby("rank")["step_s"].median()
    names = ("since_step_s", "entered", "left", "in_collective_s", "fr_seq")
    newest_beats = {
        int(rank): {
            "wall_time": float(beat["wall_time"]),
            **{
                name: (None if pd.isna(v) else float(v))
                for name in names
                for v in [beat.get(f"rank/{name}.value", float("nan"))]
            },
        }
        for rank, beat in latest.iterrows()
    }
    rows = stalled_ranks(newest_beats, typical.to_dict(), now=now, factor=factor, floor_s=floor_s)
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame.from_records(rows, columns=columns)
