"""Stragglers and stalls as pandas DataFrames: which rank is slow, and which one the job waits for.

Views over :class:`tb_monitor.analysis.grid.RankGrid` (the grid the report, the Timeline
plugin's Ranks view and the notebook read too), computed from the per-rank Stat windows
``tb_monitor.rank.health`` records, never from an event per step:

- ``rank_windows(source)``: one row per rank and window: steps, step time, time in collectives,
  and *compute* time (step time minus collective wait), the quantity that separates ranks;
- ``stragglers(source)``: per rank, its compute time relative to the median of all ranks in the
  same window (``relative``) and to its own best window (``individual``); a rank is flagged when
  ``relative`` stays above ``threshold`` for ``windows`` consecutive windows, or when it is
  starved of CPU as long (``scoring.starved_windows``: its compute may then look normal);
- ``stalls(source)``: ranks whose progress stopped for longer than ``factor`` typical steps
  (with a floor), and the rank the others wait for: the one that has not entered the collective
  the others are inside (behind in collective sequence, or in torch's Flight Recorder).

Each takes a logdir (local or a URL) or the DataFrame ``read_scalars`` returned, and
``window_s``, the recording window (``TB_MONITOR_RANK_WINDOW_S``; default: inferred from the
data). pandas is imported when called. The numpy scoring core is
:mod:`tb_monitor.analysis.scoring`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from tb_monitor.analysis.grid import RankGrid, Score, Stall
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS, STALL_FACTOR, STALL_FLOOR_S
from tb_monitor.contract import rank_of
from tb_monitor.logdir import readers

if TYPE_CHECKING:
    import pandas

__all__ = [
    "FLAG_THRESHOLD",
    "FLAG_WINDOWS",
    "STALL_FACTOR",
    "STALL_FLOOR_S",
    "WINDOW_COLUMNS",
    "rank_of",
    "rank_windows",
    "stalls",
    "stragglers",
]

WINDOW_COLUMNS = ("rank", "run", "window_end", "steps", "step_s", "collective_s", "compute_s")
#: A Score's and a Stall's fields but the grid's row.
SCORE_COLUMNS = tuple(f.name for f in dataclasses.fields(Score) if f.name != "row")
STALL_COLUMNS = tuple(f.name for f in dataclasses.fields(Stall) if f.name != "row")


def _grid(source: Any, window_s: float | None) -> RankGrid:
    readers.need_pandas()
    return RankGrid.load(source, window_s=window_s)


def rank_windows(source: Any, *, window_s: float | None = None) -> pandas.DataFrame:
    """One row per rank and window it recorded: ``WINDOW_COLUMNS``, sorted by window end and
    rank; ``window_end`` is the window's boundary on the wall clock."""
    pd = readers.need_pandas()
    grid = _grid(source, window_s)
    rows, cols = np.nonzero(grid.steps)
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    return pd.DataFrame(
        {
            "rank": np.asarray(grid.ranks, dtype=np.int64)[rows],
            "run": np.asarray(grid.runs, dtype=object)[rows],
            "window_end": grid.window_ends()[cols],
            "steps": grid.steps[rows, cols].astype(np.int64),
            "step_s": grid.step_s[rows, cols].astype(np.float64),
            "collective_s": grid.collective_s[rows, cols].astype(np.float64),
            "compute_s": grid.compute[rows, cols].astype(np.float64),
        },
        columns=WINDOW_COLUMNS,
    )


def stragglers(
    source: Any,
    *,
    threshold: float = FLAG_THRESHOLD,
    windows: int = FLAG_WINDOWS,
    window_s: float | None = None,
) -> pandas.DataFrame:
    """One row per rank: its ``run``, its median ``relative`` and ``individual`` compute score
    and ``compute_s``, the longest run of consecutive windows above ``threshold``
    (``windows_over``), its share of runnable time waiting for a CPU (``starved``) and longest
    run of windows starved of CPU (``starved_over``), ``flagged``, and why (``cause``:
    "compute" or "cpu", and ``reason`` in words); slowest first."""
    pd = readers.need_pandas()
    scores = _grid(source, window_s).scores(threshold, windows)
    records = [dataclasses.asdict(score) for score in scores]
    return pd.DataFrame.from_records(records, columns=SCORE_COLUMNS)


def stalls(
    source: Any,
    *,
    now: float | None = None,
    factor: float = STALL_FACTOR,
    floor_s: float | None = None,
    window_s: float | None = None,
) -> pandas.DataFrame:
    """One row per rank whose progress stopped: ``rank``, ``run``, ``since_step_s`` (from its
    last heartbeat), ``entered``, ``left``, ``in_collective``, ``fr_seq`` (its newest collective
    in torch's Flight Recorder, None where not read) and ``waited_for`` (True for the rank the
    others wait for). Empty when nothing is stalled.

    A rank is stalled when its last heartbeat says no step boundary for more than ``factor``
    times its median step time and no progress (a batch, a collective, a save) for the floor,
    or its heartbeats stopped that long before ``now`` (default: the newest heartbeat of any
    rank); ``floor_s`` None: the rule's default floors (``scoring.stalled_ranks``).
    """
    pd = readers.need_pandas()
    found = _grid(source, window_s).stalls(now=now, factor=factor, floor_s=floor_s)
    records = [dataclasses.asdict(stall) for stall in found]
    return pd.DataFrame.from_records(records, columns=STALL_COLUMNS)
