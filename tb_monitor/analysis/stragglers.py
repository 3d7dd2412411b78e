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
imported when called.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from tb_monitor.logdir import readers

if TYPE_CHECKING:
    import pandas

__all__ = ["WINDOW_COLUMNS", "rank_windows", "stalls", "stragglers"]

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


def _rank_of(run: str) -> int | None:
    match = _RANK_RUN.search(run)
    return int(match.group(1)) if match else None


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
    wide["rank"] = wide["run"].map(_rank_of)
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
    source: Any, *, threshold: float = 1.2, windows: int = 3, window_s: float = 10.0
) -> pandas.DataFrame:
    """One row per rank: its median ``relative`` and ``individual`` compute score, the longest
    run of consecutive windows above ``threshold``, and ``flagged``; slowest first."""
    pd = readers.need_pandas()
    frame = rank_windows(source, window_s=window_s)
    columns = ["rank", "relative", "individual", "windows_over", "flagged"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    frame = _aligned(frame, window_s)
    median = frame.groupby("slot")["compute_s"].transform("median")
    frame["relative"] = frame["compute_s"] / median.where(median > 0)
    best = frame.groupby("rank")["compute_s"].transform("min")
    frame["individual"] = frame["compute_s"] / best.where(best > 0)
    rows = []
    for rank, group in frame.sort_values("slot").groupby("rank"):
        over = (group["relative"] > threshold).astype(int).tolist()
        longest = run = 0
        for flag in over:
            run = run + 1 if flag else 0
            longest = max(longest, run)
        rows.append(
            (
                int(rank),
                float(group["relative"].median()),
                float(group["individual"].median()),
                longest,
                longest >= windows,
            )
        )
    result = pd.DataFrame.from_records(rows, columns=columns)
    return result.sort_values("relative", ascending=False, ignore_index=True)


def stalls(
    source: Any,
    *,
    now: float | None = None,
    factor: float = 10.0,
    floor_s: float = 30.0,
    window_s: float = 10.0,
) -> pandas.DataFrame:
    """One row per rank whose progress stopped: ``rank``, ``since_step_s`` (from its last
    heartbeat), ``entered``, ``left``, ``in_collective``, and ``waited_for`` (True for the rank
    the others wait for). Empty when nothing is stalled.

    A rank is stalled when its last heartbeat says no step boundary for more than ``factor``
    times its median step time (at least ``floor_s``), or its heartbeats stopped that long
    before ``now`` (default: the newest heartbeat of any rank).
    """
    pd = readers.need_pandas()
    columns = ["rank", "since_step_s", "entered", "left", "in_collective", "waited_for"]
    scalars = _scalars(source)
    beats = scalars[scalars["tag"].str.startswith("rank/") & scalars["tag"].str.endswith(".value")]
    if beats.empty or "rank/since_step_s.value" not in set(beats["tag"]):
        return pd.DataFrame(columns=columns)
    # Each heartbeat Stat's newest value per rank, with the time it was logged.
    newest = beats.sort_values("wall_time").groupby(["run", "tag"]).tail(1)
    latest = newest.pivot_table(index="run", columns="tag", values="value", aggfunc="last")
    latest["wall_time"] = newest.groupby("run")["wall_time"].max()
    latest["rank"] = latest.index.map(_rank_of)
    latest = latest[latest["rank"].notna()].set_index("rank")
    now = float(latest["wall_time"].max()) if now is None else now
    typical = rank_windows(scalars, window_s=window_s).groupby("rank")["step_s"].median()
    rows = []
    for rank, beat in latest.iterrows():
        silent = now - float(beat["wall_time"])
        since = float(beat["rank/since_step_s.value"]) + silent
        limit = max(floor_s, factor * float(typical.get(rank, 0.0) or 0.0))
        if since <= limit:
            continue
        in_collective = float(beat.get("rank/in_collective_s.value", 0.0) or 0.0) > 0
        rows.append(
            (
                int(rank),
                since,
                int(beat.get("rank/entered.value", 0) or 0),
                int(beat.get("rank/left.value", 0) or 0),
                in_collective,
            )
        )
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame.from_records(rows, columns=columns[:-1])
    # The rank the others wait for: outside a collective while others are inside one, or
    # behind in the sequence of collectives entered.
    inside = frame["in_collective"]
    most = frame["entered"].max()
    frame["waited_for"] = (~inside & inside.any()) | (frame["entered"] < most)
    return frame.sort_values(["waited_for", "since_step_s"], ascending=False, ignore_index=True)
