"""A long job's older rank-health windows folded into coarser columns, so what a live reader
keeps per rank stays under a fixed budget (the plugin's Ranks view, ``tb_plugin.ranks``).

The rule (docs/DESIGN.md, "A long job in bounded memory"): a reader keeps each rank's newest
windows whole (at least ``KEEP_WINDOWS``; straggler runs and stalls are read there) and folds
older ones into a :class:`History` of coarse columns of ``factor`` windows each, aligned on the
wall clock (coarse column ``c`` holds the windows ending in slots ``c * factor + 1`` to
``(c + 1) * factor``). A column keeps sums (windows, steps, their seconds, their wait, the
step-weighted median, the relative scores) and the largest p95, so merging two is exact for
those; past ``HISTORY_COLUMNS`` columns neighbours merge and ``factor`` doubles, so a rank
holds at most ``KEEP_WINDOWS + FOLD_EVERY`` windows and ``HISTORY_COLUMNS`` columns however
long the job runs. What each answer keeps:

- flags: each rank's runs of windows above the threshold (longest, leading, trailing, whether
  unbroken), scored on whole windows before they are folded: exact for that threshold;
- medians (relative, compute, step time): the weighted median of the folded columns' means (each
  weighing the windows it holds) and the whole windows' values: approximate for the folded part;
- the best window (``individual``): kept as a minimum, exact;
- the heatmap and step-time curves over folded time: one column per ``factor`` windows.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.jobs import JobSpan, job_grid
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS, Score, longest_over

__all__ = ["FOLD_EVERY", "HISTORY_COLUMNS", "KEEP_WINDOWS", "FoldedGrid", "History", "view_of"]

#: Each rank's newest windows kept whole (an hour of 10-s windows).
KEEP_WINDOWS = 360
#: Windows past KEEP_WINDOWS before the oldest are folded (folding is a rebuild's work).
FOLD_EVERY = 64
#: Coarse columns at most; past it neighbours merge (twice as many windows a column).
HISTORY_COLUMNS = 512

#: Per cell sums, mergeable by addition.
_SUMS = ("windows", "steps", "step_total", "wait_total", "p50_total", "p50_steps", "rel_total",
         "rel_count")  # fmt: skip


@dataclass(frozen=True)
class History:
    """The folded windows of a grid's rows: coarse columns of sums, and per row its best
    window and its runs over the threshold. Immutable: folding makes a new one."""

    runs: tuple[str, ...]
    window_s: float  # the windows' length (a coarse column spans factor of them)
    factor: int
    col0: int  # the absolute coarse index of column 0
    end_slot: int  # the newest slot folded
    sums: dict[str, np.ndarray]  # name -> rows x columns, float32
    p95: np.ndarray  # rows x columns, the largest p95 (NaN: none)
    best: np.ndarray  # per row, its smallest compute of a window (NaN: none)
    over: np.ndarray  # per row: leading, trailing, longest run over the threshold; unbroken
    threshold: float = FLAG_THRESHOLD

    @classmethod
    def fold(
        cls,
        grid: RankGrid,
        stop: int,
        previous: History | None = None,
        *,
        threshold: float = FLAG_THRESHOLD,
        columns: int = HISTORY_COLUMNS,
    ) -> History:
        """``previous`` (None: nothing folded yet) with ``grid``'s columns ``:stop`` folded in;
        its rows become ``grid``'s (a row ``previous`` lacks starts empty)."""
        factor = previous.factor if previous else 1
        sums, p95 = _window_sums(grid, stop)
        slots = grid.slot0 + np.arange(stop)
        index, sums, p95 = _grouped(sums, p95, (slots - 1) // factor)
        over = _runs_over(grid.relative[:, :stop], grid.counted_windows()[:, :stop], threshold)
        best = _nanmin(grid.compute[:, :stop])
        if previous is not None:
            old = previous.rows(grid.runs)
            index, sums, p95 = _grouped(
                {k: np.concatenate([old.sums[k], sums[k]], axis=1) for k in _SUMS},
                np.concatenate([old.p95, p95], axis=1),
                np.concatenate([old.col0 + np.arange(old.p95.shape[1]), index]),
            )
            over, best = _joined(old.over, over), np.fmin(old.best, best)
        while len(index) and index[-1] - index[0] + 1 > columns:
            factor *= 2
            index, sums, p95 = _grouped(sums, p95, index // 2)
        return cls(
            tuple(grid.runs), grid.window_s, factor, int(index[0]) if len(index) else 0,
            int(slots[-1]) if stop else (previous.end_slot if previous else grid.slot0 - 1),
            *_dense(index, sums, p95), best, over, threshold,
        )  # fmt: skip

    def rows(self, runs: list[str]) -> History:
        """The same history with rows ``runs`` (a run it lacks: empty)."""
        if list(self.runs) == list(runs):
            return self
        at = {run: row for row, run in enumerate(self.runs)}
        take = np.array([at.get(run, -1) for run in runs], np.int64)
        has = (take >= 0)[:, None]

        def pick(a: np.ndarray, empty: float) -> np.ndarray:
            got = a[np.maximum(take, 0)] if len(a) else np.zeros((len(take), *a.shape[1:]), a.dtype)
            return np.where(has if a.ndim > 1 else has[:, 0], got, empty).astype(a.dtype)

        return dataclasses.replace(
            self,
            runs=tuple(runs),
            sums={k: pick(v, 0.0) for k, v in self.sums.items()},
            p95=pick(self.p95, np.nan),
            best=pick(self.best, np.nan),
            over=pick(self.over, 0),
        )

    @property
    def start(self) -> float:
        """Epoch seconds where the folded time begins."""
        return self.col0 * self.factor * self.window_s

    def grid(self, fine: RankGrid | None = None) -> RankGrid:
        """The folded columns as a grid of ``factor``-window columns, with ``fine``'s windows
        (after ``end_slot``) folded the same way: the heatmap and step times over the whole
        job at the history's resolution."""
        history = self if fine is None else History.fold(fine, fine.shape[1], self, columns=2**62)
        s = history.sums
        with np.errstate(invalid="ignore", divide="ignore"):
            steps = np.where(s["steps"] > 0, s["steps"], np.nan)
            p50 = np.where(s["p50_steps"] > 0, s["p50_total"] / s["p50_steps"], np.nan)
            out = RankGrid(
                list(history.runs), history.window_s * history.factor, history.col0 + 1,
                s["steps"], s["step_total"] / steps, s["wait_total"] / steps,
                step_quantiles=(p50.astype(np.float32), history.p95),
            )  # fmt: skip
            out.relative = _mean(s["rel_total"], s["rel_count"]).astype(np.float32)
        return out


def _window_sums(grid: RankGrid, stop: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Columns ``:stop`` of ``grid`` as a History's sums (one window each) and p95."""
    steps = grid.steps[:, :stop].astype(np.float32)
    p50 = grid.step_p50[:, :stop]
    relative = grid.relative[:, :stop]
    has_p50, has_rel = np.isfinite(p50) & (steps > 0), np.isfinite(relative)
    sums = {
        "windows": (steps > 0).astype(np.float32),
        "steps": steps,
        "step_total": np.nan_to_num(grid.step_s[:, :stop] * steps),
        "wait_total": np.nan_to_num(grid.collective_s[:, :stop] * steps),
        "p50_total": np.where(has_p50, p50 * steps, 0.0),
        "p50_steps": np.where(has_p50, steps, 0.0),
        "rel_total": np.where(has_rel, relative, 0.0),
        "rel_count": has_rel.astype(np.float32),
    }
    return {k: v.astype(np.float32) for k, v in sums.items()}, grid.step_p95[:, :stop]


def _grouped(
    sums: dict[str, np.ndarray], p95: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Columns with the same coarse ``index`` (ascending) merged: their distinct indices, the
    summed sums and the largest p95."""
    if not len(index):
        return index, sums, p95
    edges = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    merged = {k: np.add.reduceat(v, edges, axis=1) for k, v in sums.items()}
    return index[edges], merged, np.fmax.reduceat(p95, edges, axis=1)


def _dense(
    index: np.ndarray, sums: dict[str, np.ndarray], p95: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Sums and p95 on every coarse column from the first index to the last (gaps: empty)."""
    if not len(index) or index[-1] - index[0] + 1 == len(index):
        return sums, p95
    at = index - index[0]
    width = int(at[-1]) + 1
    out = {}
    for k, v in sums.items():
        out[k] = np.zeros((v.shape[0], width), np.float32)
        out[k][:, at] = v
    wide = np.full((p95.shape[0], width), np.nan, np.float32)
    wide[:, at] = p95
    return out, wide


def _runs_over(relative: np.ndarray, present: np.ndarray, threshold: float) -> np.ndarray:
    """Per row: its leading, trailing and longest run of windows above ``threshold``, and 1
    where no present window breaks one (windows not present neither count nor break)."""
    over = present & (np.nan_to_num(relative, nan=-np.inf) > threshold)
    broken = present & ~over
    width = over.shape[1]
    first = np.where(broken.any(axis=1), np.argmax(broken, axis=1), width)
    last = np.where(broken.any(axis=1), width - 1 - np.argmax(broken[:, ::-1], axis=1), -1)
    count = np.cumsum(over, axis=1)
    total = count[:, -1] if width else np.zeros(len(over), np.int64)
    before = np.take_along_axis(np.c_[np.zeros(len(over), np.int64), count], first[:, None], 1)
    upto = np.take_along_axis(np.c_[np.zeros(len(over), np.int64), count], last[:, None] + 1, 1)
    longest = longest_over(relative, threshold, present) if width else total
    return np.c_[before[:, 0], total - upto[:, 0], longest, ~broken.any(axis=1)].astype(np.int64)


def _joined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Runs over of ``a``'s windows followed by ``b``'s (each from :func:`_runs_over`)."""
    lead = np.where(a[:, 3] > 0, a[:, 0] + b[:, 0], a[:, 0])
    trail = np.where(b[:, 3] > 0, b[:, 1] + a[:, 1], b[:, 1])
    longest = np.maximum.reduce([a[:, 2], b[:, 2], a[:, 1] + b[:, 0]])
    return np.c_[lead, trail, longest, a[:, 3] & b[:, 3]]


def _mean(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1e-30), np.nan)


def _nanmin(a: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmin(a, axis=1) if a.shape[1] else np.full(a.shape[0], np.nan)


def weighted_median(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row, the median of ``values`` each counted ``weights`` times (NaN values skipped;
    NaN where none): with weights of 1, ``np.nanmedian``'s."""
    weights = np.where(np.isfinite(values), weights, 0.0).astype(np.float64)
    values = np.where(weights > 0, values, np.inf)
    order = np.argsort(values, axis=1, kind="stable")
    values, weights = (np.take_along_axis(a, order, 1) for a in (values, weights))
    cum = np.cumsum(weights, axis=1)
    if not cum.shape[1]:
        return np.full(len(values), np.nan)
    half = cum[:, -1:] / 2
    lo = np.argmax(cum >= half, axis=1)[:, None]
    hi = np.argmax(cum > half, axis=1)[:, None]
    mid = (np.take_along_axis(values, lo, 1) + np.take_along_axis(values, hi, 1))[:, 0] / 2
    return np.where(cum[:, -1] > 0, mid, np.nan)


class FoldedGrid(RankGrid):
    """A grid of a rank's newest windows (``fine``, whose arrays it shares) over a
    :class:`History` of the folded ones: every answer over both (``scores``, ``stalls``'
    typical step, ``recorded``, ``extent``); its arrays and columns are the whole windows'."""

    def __init__(self, fine: RankGrid, history: History) -> None:
        self.__dict__.update(fine.__dict__)
        self.fine = fine if type(fine) is RankGrid else fine.fine  # type: ignore[attr-defined]
        self.history = history.rows(fine.runs)
        self._coarse: RankGrid | None = None

    def with_beats(self, beats: Mapping[str, Mapping[str, float]]) -> FoldedGrid:
        """The same windows and history with newer heartbeats."""
        return FoldedGrid(self.fine.with_beats(beats), self.history)

    @property
    def extent(self) -> tuple[float, float] | None:
        """From the folded time's start to the newest window's end."""
        fine = self.fine.extent
        end = fine[1] if fine else self.history.end_slot * self.window_s
        return self.history.start, end

    @property
    def full_since(self) -> float:
        """Epoch seconds from which windows are whole (before: folded)."""
        return self.history.end_slot * self.window_s

    @property
    def recorded(self) -> int:
        """Windows held, folded ones counted as the windows they hold."""
        return self.fine.recorded + int(self.history.sums["windows"].sum())

    def coarse(self) -> RankGrid:
        """The whole job at the history's resolution (made once)."""
        if self._coarse is None:
            self._coarse = self.history.grid(self.fine)
        return self._coarse

    def typical_step_s(self) -> np.ndarray:
        """Per row, its median step time over whole and folded windows."""
        h = self.history.sums
        return weighted_median(
            np.c_[_mean(h["step_total"], h["steps"]), self.step_s],
            np.c_[h["windows"], np.ones(self.shape)],
        )

    def scores(self, threshold: float = FLAG_THRESHOLD, windows: int = FLAG_WINDOWS) -> list[Score]:
        """Per rank that recorded a window, its score over whole and folded windows."""
        h = self.history.sums
        fine_over = _runs_over(self.relative, self.counted_windows(), threshold)
        if threshold == self.history.threshold:
            longest = _joined(self.history.over, fine_over)[:, 2]
        else:  # the folded runs were counted for another threshold: the whole windows' only
            longest = fine_over[:, 2]
        ones = np.ones(self.shape)
        folded_compute = _mean(h["step_total"] - h["wait_total"], h["steps"]).clip(0.0)
        relative = weighted_median(
            np.c_[_mean(h["rel_total"], h["rel_count"]), self.relative],
            np.c_[h["rel_count"], ones],
        )
        compute = weighted_median(np.c_[folded_compute, self.compute], np.c_[h["windows"], ones])
        best = np.fmin(self.history.best, _nanmin(self.compute))
        with np.errstate(invalid="ignore", divide="ignore"):
            individual = compute / np.where(best > 0, best, np.nan)
        held = self.steps.any(axis=1) | (h["windows"].sum(axis=1) > 0)
        out = [
            Score(row, self.ranks[row], run,
                  *(_finite(m[row]) for m in (relative, individual, compute)),
                  windows_over=int(longest[row]), flagged=bool(longest[row] >= windows))
            for row, run in enumerate(self.runs) if held[row]
        ]  # fmt: skip
        out.sort(key=lambda s: -(s.relative or 0.0))
        return out


def view_of(grid: RankGrid, start: float) -> RankGrid:
    """The grid a view from ``start`` reads: the whole windows, or where it reaches folded time
    the whole job at the history's resolution; ``grid`` itself where nothing is folded."""
    if not isinstance(grid, FoldedGrid):
        return grid
    return grid.fine if start >= grid.full_since and grid.shape[1] else grid.coarse()


def folded_job_grid(grid: RankGrid, span: JobSpan) -> RankGrid:
    """:func:`tb_monitor.analysis.jobs.job_grid` of a grid that may hold a history: the job's
    rows of both (a job whose span begins after the folded time has none of it)."""
    if not isinstance(grid, FoldedGrid):
        return job_grid(grid, span)
    fine = job_grid(grid.fine, span)
    if span.shared and span.start >= grid.full_since:
        return fine
    return FoldedGrid(fine, grid.history.rows(fine.runs))


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
