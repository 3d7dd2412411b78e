"""The ranks x windows grid of rank health: built once, read by every reader.

``tb_monitor.rank.health`` logs, in each worker's run, one Stat window of step and
collective timing every ``TB_MONITOR_RANK_WINDOW_S`` and heartbeat values (tags in
``tb_monitor.contract``). :class:`RankGrid` lays them on one numpy grid, rows = runs (ranks),
column ``j`` = the window ending at ``(slot0 + j) * window_s`` on the wall clock, and answers the
questions the analysis (``analysis.stragglers``), ``tb-monitor report``, the plugin's Ranks view
and ``notebook.rank_heatmap`` ask, so they cannot disagree. A rank's wait is its time in Python
collectives plus its backward's wait for DDP's gradient all-reduces (``rank/grad_wait_s``);
``step_p50`` / ``step_p95`` hold each window's step time median and p95:

    >>> grid = RankGrid.from_logdir("runs/job")   # or from_scalars(df), from_series(...)
    >>> grid.scores()           # list[Score]: per rank, slowest first
    >>> grid.stragglers()       # the flagged Scores
    >>> grid.stalls()           # list[Stall]: the rank the others wait for first
    >>> grid.merged(4)          # relative scores, 4 whole windows a column (the heatmap's)

One window rule. Stat windows end at multiples of the window length on the wall clock and are
logged a moment after the boundary; a window closed early (``close()``, a process ending) is
logged before it. A point logged at ``t`` belongs to the window ending at the nearest boundary
at or after ``t - window_s / 2`` (:func:`slot_of`), and windows of one rank that meet in one slot
are summed (steps, their time, their wait), never one dropped for the other. The window length
is inferred from the spacing of the windows (:func:`infer_window_s`) unless given; a logdir
with one window per rank falls back to ``$TB_MONITOR_RANK_WINDOW_S`` (10 s).

The scores and the stall rule are :mod:`tb_monitor.analysis.scoring`'s, the window rule
:mod:`tb_monitor.analysis.windows`'.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tb_monitor import _env, contract
from tb_monitor.analysis.grid_rows import WINDOW_TAGS, cells, paired
from tb_monitor.analysis.scoring import (
    FLAG_THRESHOLD,
    FLAG_WINDOWS,
    SILENT_SLACK_S,
    SILENT_WINDOWS,
    STALL_FACTOR,
    Cut,
    Score,
    Stall,
    counted_windows,
    individual_scores,
    longest_over,
    relative_scores,
    stalled_ranks,
    starved_reason,
    starved_rows,
)
from tb_monitor.analysis.windows import clock_shifts, infer_window_s, slot_of

if TYPE_CHECKING:
    import pandas

__all__ = ["BEAT_TAGS", "WINDOW_TAGS", "RankGrid", "Score", "Stall", "infer_window_s", "slot_of"]

#: Heartbeat scalar tag -> heartbeat name; only each one's newest value counts.
BEAT_TAGS = {contract.stat_tag(contract.RANK_PREFIX + n, "value"): n for n in contract.RANK_BEATS}
#: The heartbeat of steps so far, whose series (where read whole) aligns skewed hosts' windows.
_STEPS = contract.stat_tag(contract.RANK_PREFIX + "steps", "value")

#: Series as the readers hand them over: run -> tag -> (wall times, values).
Series = Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]]


class RankGrid:
    """Every rank's windows on one grid, and its newest heartbeat. Arrays are rows x columns,
    float32, NaN where the rank recorded no window; treat them as read-only (a grid is shared
    by the plugin's requests)."""

    def __init__(
        self,
        runs: list[str],
        window_s: float,
        slot0: int,
        steps: np.ndarray,
        step_s: np.ndarray,
        collective_s: np.ndarray,
        beats: Mapping[str, Mapping[str, float]] | None = None,
        previous: RankGrid | None = None,
        *,
        step_quantiles: tuple[np.ndarray, np.ndarray] | None = None,
        starved: np.ndarray | None = None,
        cpu_run: np.ndarray | None = None,
    ) -> None:
        self.runs = list(runs)
        self.ranks = [contract.rank_of(run) for run in self.runs]
        self.window_s = float(window_s)
        #: Column j holds the window ending at ``(slot0 + j) * window_s``.
        self.slot0 = int(slot0)
        self.steps = steps  # steps taken in the window
        self.step_s = step_s  # mean seconds a step
        self.collective_s = collective_s  # mean seconds a step waiting (collectives, DDP)
        #: Per window, the median and p95 of its step times (NaN: not recorded).
        self.step_p50, self.step_p95 = step_quantiles or np.full((2, *steps.shape), np.nan)
        #: Per window, the share of its threads' runnable time spent waiting for a CPU (NaN:
        #: not recorded): what names a rank starved of CPU (``scoring.starved_windows``).
        self.starved = np.full(steps.shape, np.nan) if starved is None else starved
        #: Per window, its threads' seconds on a CPU per step (NaN: not recorded): a rank that ran more
        #: than the others is busy, not starved.
        self.cpu_run = np.full(steps.shape, np.nan) if cpu_run is None else cpu_run
        with np.errstate(invalid="ignore"):
            self.compute = np.clip(step_s - collective_s, 0.0, None)
        self.relative = _relative(self.compute, self._same_columns(previous))
        self.beats = {run: dict(beat) for run, beat in (beats or {}).items() if run in runs}

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def from_series(
        cls,
        series: Series,
        beats: Mapping[str, Mapping[str, float]] | None = None,
        *,
        window_s: float | None = None,
        previous: RankGrid | None = None,
    ) -> RankGrid:
        """The grid of ``series`` (run -> tag -> (wall times, values) of ``WINDOW_TAGS``, any
        order) and ``beats`` (run -> the newest heartbeat values by name, with ``wall_time``).
        Runs that name no rank are left out. ``window_s``: the recording window (default:
        inferred). ``previous``: an older grid of the same runs, whose relative scores are
        kept for the leading windows that did not change (a live job adds windows at the end).
        A run whose clock is whole windows off the first run's (``windows.clock_shifts``, where
        ``series`` holds the heartbeats of steps so far) has its windows moved by as many.
        """
        beats = beats or {}
        runs = sorted(
            (run for run in {*series, *beats} if contract.rank_of(run) is not None),
            key=lambda run: (contract.rank_of(run), run),
        )
        windows = {run: paired(series.get(run, {})) for run in runs}
        if window_s is None:
            window_s = infer_window_s(w[0][0] for w in windows.values())
            window_s = window_s or _env.seconds("TB_MONITOR_RANK_WINDOW_S", contract.RANK_WINDOW_S)
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        shifts = clock_shifts({run: series.get(run, {}).get(_STEPS) for run in runs}, window_s)
        slots = {
            run: [slot_of(w[0] - shifts.get(run, 0.0), window_s) for w in ws]
            for run, ws in windows.items()
        }
        filled = [s[0] for s in slots.values() if len(s[0])]
        slot0 = int(min(s.min() for s in filled)) if filled else 0
        width = int(max(s.max() for s in filled)) - slot0 + 1 if filled else 0
        grids = (
            np.zeros((len(runs), width), np.float32),
            *np.full((6, len(runs), width), np.nan, np.float32),
        )
        for row, run in enumerate(runs):
            cells(windows[run], slots[run], slot0, [g[row] for g in grids])
        steps, step_s, waits, p50, p95, starved, cpu_run = grids
        return cls(
            *(runs, window_s, slot0, steps, step_s, waits, beats, previous),
            step_quantiles=(p50, p95),
            starved=starved,
            cpu_run=cpu_run,
        )

    @classmethod
    def from_scalars(cls, frame: pandas.DataFrame, *, window_s: float | None = None) -> RankGrid:
        """The grid of a ``tb_monitor.read_scalars`` DataFrame (run, tag, step, wall_time,
        value); a frame without those columns is a ValueError naming them."""
        missing = {"run", "tag", "wall_time", "value"} - set(frame.columns)
        if missing:
            raise ValueError(
                f"expected a read_scalars DataFrame; columns {sorted(missing)} missing"
            )
        wanted = frame[frame["tag"].isin([*WINDOW_TAGS, *BEAT_TAGS])]
        series: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        for (run, tag), part in wanted.groupby(["run", "tag"], sort=False):
            walls = part["wall_time"].to_numpy(np.float64)
            series.setdefault(run, {})[tag] = (walls, part["value"].to_numpy(np.float64))
        return cls.from_series(series, _newest_beats(series), window_s=window_s)

    @classmethod
    def from_logdir(
        cls, logdir: str | os.PathLike[str], *, window_s: float | None = None
    ) -> RankGrid:
        """The grid of a logdir (a path or a URL); needs no pandas."""
        from tb_monitor.logdir import readers

        wanted = {*WINDOW_TAGS, *BEAT_TAGS}
        points: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for point in readers.iter_scalars(logdir):
            if point.tag in wanted:
                points.setdefault(point.run, {}).setdefault(point.tag, []).append(point[3:])
        series = {
            run: {tag: tuple(np.array(pairs).reshape(-1, 2).T) for tag, pairs in tags.items()}
            for run, tags in points.items()
        }
        return cls.from_series(series, _newest_beats(series), window_s=window_s)

    @classmethod
    def load(cls, source: Any, *, window_s: float | None = None) -> RankGrid:
        """A grid from a logdir or a ``read_scalars`` DataFrame; anything else is a TypeError."""
        if isinstance(source, (str, os.PathLike)):
            return cls.from_logdir(source, window_s=window_s)
        if hasattr(source, "columns") and hasattr(source, "groupby"):
            return cls.from_scalars(source, window_s=window_s)
        raise TypeError(f"expected a logdir or a read_scalars DataFrame, got {source!r:.100}")

    def with_beats(self, beats: Mapping[str, Mapping[str, float]]) -> RankGrid:
        """The same windows (arrays shared) with newer heartbeats."""
        grid = object.__new__(RankGrid)
        grid.__dict__.update(self.__dict__)
        grid.beats = {run: dict(beat) for run, beat in beats.items() if run in self.runs}
        return grid

    # -- the shape -----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, windows)."""
        return self.compute.shape  # type: ignore[return-value]

    @property
    def extent(self) -> tuple[float, float] | None:
        """Epoch seconds from the first window's start to the last window's end."""
        if not self.shape[1]:
            return None
        return (self.slot0 - 1) * self.window_s, (self.slot0 + self.shape[1] - 1) * self.window_s

    def window_ends(self) -> np.ndarray:
        """Per column, the epoch second its window ends."""
        return (self.slot0 + np.arange(self.shape[1])) * self.window_s

    @property
    def recorded(self) -> int:
        """Cells holding a window, all ranks together."""
        return int(np.count_nonzero(self.steps))

    def merged(self, per: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Relative scores of columns ``start:stop``, ``per`` whole windows to a column (the
        last column may hold fewer): each the mean of the windows its rank recorded there, NaN
        where it recorded none. The heatmap's columns, so two windows with data never have an
        empty column between them."""
        if per < 1:
            raise ValueError(f"per must be a positive number of windows, got {per!r}")
        part = self.relative[:, start:stop]
        if not part.shape[1]:
            return np.zeros((part.shape[0], 0))
        present = ~np.isnan(part)
        edges = np.arange(0, part.shape[1], per)
        sums = np.add.reduceat(np.where(present, part, 0.0), edges, axis=1, dtype=np.float64)
        counts = np.add.reduceat(present, edges, axis=1, dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    # -- the answers ---------------------------------------------------------------------------

    def typical_step_s(self) -> np.ndarray:
        """Per row, its median step time over its windows (NaN: none)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return (
                np.nanmedian(self.step_s, axis=1)
                if self.shape[1]
                else np.full(self.shape[0], np.nan)
            )

    def counted_windows(self) -> np.ndarray:
        """Rows x windows: those a rank's runs of slow windows are counted over
        (:func:`~tb_monitor.analysis.scoring.counted_windows`, with its typical step)."""
        return counted_windows(self.steps, self.typical_step_s(), self.window_s)

    def scores(self, threshold: float = FLAG_THRESHOLD, windows: int = FLAG_WINDOWS) -> list[Score]:
        """Per rank that recorded a window, its score; slowest (highest relative) first."""
        if not self.shape[1]:
            return []
        individual = individual_scores(self.compute)
        counted = self.counted_windows()
        longest = longest_over(self.relative, threshold, present=counted)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # ranks without a window
            medians = [np.nanmedian(a, axis=1) for a in (self.relative, individual, self.compute)]
        share, starved, typical = starved_rows(self.starved, counted, self.cpu_run)
        out = []
        for row, run in enumerate(self.runs):
            if not self.steps[row].any():
                continue
            relative, *rest = (_finite(m[row]) for m in medians)
            cause, reason = None, None
            if starved[row] >= windows:
                cause, reason = "cpu", starved_reason(float(share[row]), typical)
            elif longest[row] >= windows:
                cause, reason = "compute", f"compute x{relative or 0:.2f} the median rank's"
            out.append(
                Score(
                    *(row, self.ranks[row], run, relative, *rest),
                    windows_over=int(longest[row]),
                    flagged=cause is not None,
                    starved=_finite(share[row]),
                    starved_over=int(starved[row]),
                    cause=cause,
                    reason=reason,
                )
            )
        out.sort(key=lambda s: -(s.relative or 0.0))
        return out

    def stragglers(
        self, threshold: float = FLAG_THRESHOLD, windows: int = FLAG_WINDOWS
    ) -> list[Score]:
        """The flagged ranks, slowest first."""
        return [s for s in self.scores(threshold, windows) if s.flagged]

    def stalls(
        self,
        *,
        now: float | None = None,
        factor: float = STALL_FACTOR,
        floor_s: float | None = None,
        seen_silent: Mapping[str, float] | None = None,
        cut_off: Mapping[tuple[str, int], Cut] | None = None,
    ) -> list[Stall]:
        """The stalled ranks (see :func:`stalled_ranks`), the one waited for first. ``now``:
        default the grid's newest heartbeat; ``seen_silent``: runs their agents see silent
        (``agent_views.silent_runs``: with when they were seen so); ``floor_s``: the rule's default
        floors where None (``stalled_ranks``); ``cut_off``: (job, rank) of the nodes whose
        keep-alives to the rendezvous store stopped (``store_contact.cut_off_ranks``), waited for
        unless an agent sees a rank silent. That view explains a stall and makes none, but a run
        seen so that is no row (it recorded nothing: stopped before its first heartbeat) is
        known from it alone: judged as without a step since it was seen so, its stall's ``row``
        -1."""
        typical = self.typical_step_s()
        # In row order: equally stalled ranks come out in the grid's order, whoever reads.
        beats = {
            row: self.beats[run]
            for row, run in enumerate(self.runs)
            if "since_step_s" in self.beats.get(run, {})
        }
        seen_silent = seen_silent or {}
        unheard = [run for run in seen_silent if run not in self.runs]
        if beats:  # a rank recorded nothing: no step since its agent saw it silent, if not longer
            for row, run in enumerate(unheard, start=len(self.runs)):
                beats[row] = {"wall_time": seen_silent[run], "since_step_s": 0.0}
        found = stalled_ranks(
            beats,
            {row: float(np.nan_to_num(typical[row])) for row in beats if row < len(self.runs)},
            now=now,
            factor=factor,
            floor_s=floor_s,
            silent_after_s=SILENT_WINDOWS * self.window_s + SILENT_SLACK_S,
            cut_off=self._rows_of(cut_off or {}),
            seen_silent=[
                row for row, run in enumerate([*self.runs, *unheard]) if run in seen_silent
            ],
        )
        return [self._stall(stall, unheard) for stall in found]

    def _rows_of(self, cuts: Mapping[tuple[str, int], Cut]) -> dict[int, Cut]:
        """The cuts of ``(job, rank)`` keys by row."""
        keys = {
            row: (run.split("/", 1)[0], contract.rank_of(run)) for row, run in enumerate(self.runs)
        }
        return {row: cuts[key] for row, key in keys.items() if key in cuts}

    def _stall(self, stall: dict[str, Any], unheard: list[str]) -> Stall:
        """A ``stalled_ranks`` row as a Stall of this grid (row -1: a run that is no row)."""
        row = stall["rank"]
        run = self.runs[row] if row < len(self.runs) else unheard[row - len(self.runs)]
        row = row if row < len(self.runs) else -1
        return Stall(**{**stall, "row": row, "rank": contract.rank_of(run), "run": run})

    # -- helpers -------------------------------------------------------------------------------

    def _same_columns(self, other: RankGrid | None) -> RankGrid | None:
        """``other`` when its rows are this grid's and its columns a prefix of them, else None."""
        if (
            other is None
            or other.runs != self.runs
            or other.slot0 != self.slot0
            or other.window_s != self.window_s
            or other.shape[1] > self.shape[1]
        ):
            return None
        return other


def _relative(compute: np.ndarray, previous: RankGrid | None) -> np.ndarray:
    """Relative scores of ``compute``; only the windows from the first that changed since
    ``previous`` (same rows and columns) are scored again."""
    if previous is None:
        return relative_scores(compute).astype(np.float32)
    old = previous.compute
    head = compute[:, : old.shape[1]]
    changed = np.flatnonzero(~((head == old) | (np.isnan(head) & np.isnan(old))).all(axis=0))
    dirty = int(changed[0]) if len(changed) else old.shape[1]
    relative = np.empty_like(compute, dtype=np.float32)
    relative[:, :dirty] = previous.relative[:, :dirty]
    relative[:, dirty:] = relative_scores(compute[:, dirty:])
    return relative


def _newest_beats(series: Series) -> dict[str, dict[str, float]]:
    """Per run, each heartbeat's newest value by name, and ``wall_time``: the newest of them."""
    out: dict[str, dict[str, float]] = {}
    for run, tags in series.items():
        for tag, (walls, values) in tags.items():
            name = BEAT_TAGS.get(tag)
            if name is None or not len(walls):
                continue
            newest = len(walls) - 1 - int(np.argmax(walls[::-1]))  # the last of the newest
            beat = out.setdefault(run, {})
            beat[name] = float(values[newest])
            beat["wall_time"] = max(beat.get("wall_time", -math.inf), float(walls[newest]))
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
