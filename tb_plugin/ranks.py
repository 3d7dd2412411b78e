"""The Ranks view's data: per-rank compute time as a ranks x time heatmap, stragglers and stalls.

``tb_monitor.rank.health`` records each rank's step and collective timing as Stat
windows and heartbeats (tags in ``tb_monitor.contract``), as plain scalars in the rank's run.
:class:`RankStore` reads them through TensorBoard's data provider (``list_scalars`` /
``read_scalars``, the runs that name a rank), keeps numpy columns per run, and reads again only
the series that grew (the heartbeats: only their newest value). A :class:`RankSnapshot` holds
the :class:`tb_monitor.analysis.grid.RankGrid` built from those columns (rows = ranks, columns =
windows; its window rule, scores and stalls are the ones ``tb-monitor report`` and the notebook
read, so they agree). The grid is scored on the refresh thread (:class:`tb_plugin.refresher.Refresher`), only
the windows that changed; new heartbeats alone re-read only the stalls, and a request during a
first long read answers at once with ``loading``. :func:`ranks_payload`
(``tb_plugin.rank_payload``) answers the ``ranks`` route: the grid bucketed in time to at most about the pixel width asked for (level of detail),
one byte per cell, base64, with each rank's step time median and p95 over the same buckets
(``tb_plugin.step_times``); a poll naming the current ``generation`` gets ``unchanged``.

TensorBoard keeps a sample of each scalar series (``--samples_per_plugin scalars=N``, 1000 by
default, always the newest): the view shows the windows TensorBoard kept. The store keeps each
rank's newest ``keep`` windows whole and folds older ones into coarser columns
(``tb_monitor.analysis.grid_history``), so a long job's view stays within a fixed budget.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor.analysis.grid import BEAT_TAGS, WINDOW_TAGS, RankGrid
from tb_monitor.analysis.grid_history import FOLD_EVERY, KEEP_WINDOWS, FoldedGrid, History
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS
from tb_monitor.contract import rank_of
from tb_plugin.provider_store import (
    ChunkRequest,
    ProviderStore,
    Want,
    chunk_requests,
    listed_points,
)
from tb_plugin.rank_payload import LEVEL_SPAN, levels, ranks_payload, scale
from tb_plugin.rank_snapshot import RankSnapshot
from tb_plugin.records import MAX_STEPS

__all__ = [
    "BEAT_TAGS",
    "LEVEL_SPAN",
    "WINDOW_TAGS",
    "RankSnapshot",
    "RankStore",
    "levels",
    "ranks_payload",
    "scale",
]

SCALARS_PLUGIN = "scalars"
#: About this many window values are read from the provider at a time.
CHUNK_POINTS = 200_000


class _Series:
    """One scalar series, append-only: wall times and values."""

    __slots__ = ("values", "wall")

    def __init__(self) -> None:
        self.wall = array.array("d")
        self.values = array.array("d")

    def trim(self, cutoff: float) -> None:
        """Forget the points logged at or before ``cutoff`` (folded)."""
        wall = np.frombuffer(self.wall, np.float64)
        keep = wall > cutoff
        if keep.all():
            return
        values = np.frombuffer(self.values, np.float64)[keep]
        wall = wall[keep]
        self.wall, self.values = array.array("d"), array.array("d")
        self.wall.frombytes(wall.tobytes())
        self.values.frombytes(values.tobytes())


class RankStore(ProviderStore):
    """Every rank's windows and newest heartbeat of one experiment, extended as files grow.

    Refreshed the way the timeline's store is (:class:`tb_plugin.provider_store.ProviderStore`),
    so a :class:`tb_plugin.refresher.Refresher` keeps it fresh off the request threads.
    """

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        *,
        threshold: float = FLAG_THRESHOLD,
        windows: int = FLAG_WINDOWS,
        keep: int = KEEP_WINDOWS,
    ) -> None:
        super().__init__(data_provider, experiment_id, clock)
        self._threshold = threshold
        self._windows = windows
        self._keep = keep  # windows kept whole per rank; older ones are folded
        self._history: History | None = None
        self.late = 0  # windows read after their time was folded (dropped)
        self._lock = threading.RLock()
        self._series: dict[tuple[str, str], _Series] = {}
        self._beats: dict[str, dict[str, float]] = {}  # run -> newest heartbeat values
        self._snapshot: RankSnapshot | None = None
        self._build_lock = threading.Lock()  # one build at a time
        self._building = False
        self._windows_generation = 0  # bumped when windows (not heartbeats) are added

    # -- ingestion -------------------------------------------------------------------------

    def _list(self, ctx: Any) -> Mapping[str, Mapping[str, Any]]:
        return self._provider.list_scalars(ctx, experiment_id=self._eid, plugin_name=SCALARS_PLUGIN)

    def _wants(self, run: str, tag: str) -> Want | None:
        if rank_of(run) is None:
            return None
        if tag in WINDOW_TAGS:
            return Want.WHOLE
        return Want.NEWEST if tag in BEAT_TAGS else None

    def _read(
        self, ctx: Any, stale: dict[str, list[str]], listing: Mapping[str, Mapping[str, Any]]
    ) -> None:
        beats = {run: [t for t in tags if t in BEAT_TAGS] for run, tags in stale.items()}
        windows = {run: [t for t in tags if t in WINDOW_TAGS] for run, tags in stale.items()}
        if any(beats.values()):
            self._read_beats(ctx, {run: tags for run, tags in beats.items() if tags})
        windows = {run: tags for run, tags in windows.items() if tags}
        if windows:
            chunks = chunk_requests(windows, listed_points(windows, listing), CHUNK_POINTS)
            fetched = map(functools.partial(self._fetch_windows, ctx), chunks)
            self._read_in_chunks(chunks, fetched, self._add_windows)

    def _refreshed(self) -> None:
        # Score what is new here, on the refresh thread, not on a request.
        snap = self._snapshot
        if snap is None or snap.generation != self.generation:
            self._rebuild()

    def _read_beats(self, ctx: Any, stale: dict[str, list[str]]) -> None:
        tags = sorted({tag for run_tags in stale.values() for tag in run_tags})
        # downsample=1: the provider hands back each series' newest point only.
        data = self._provider.read_scalars(
            ctx,
            experiment_id=self._eid,
            plugin_name=SCALARS_PLUGIN,
            downsample=1,
            run_tag_filter=tb_provider.RunTagFilter(runs=sorted(stale), tags=tags),
        )
        with self._lock:
            changed = False
            for run, by_tag in data.items():
                beat = self._beats.setdefault(run, {})
                for tag, points in by_tag.items():
                    if tag not in BEAT_TAGS or not points:
                        continue
                    newest = points[-1]
                    key = (run, tag)
                    self._last_step[key] = max(self._last_step.get(key, -1), int(newest.step))
                    beat[BEAT_TAGS[tag]] = float(newest.value)
                    beat["wall_time"] = max(beat.get("wall_time", 0.0), float(newest.wall_time))
                    changed = True
            if changed:
                self.generation += 1

    def _fetch_windows(self, ctx: Any, chunk: ChunkRequest) -> tuple[list[str], Mapping]:
        data = self._provider.read_scalars(
            ctx,
            experiment_id=self._eid,
            plugin_name=SCALARS_PLUGIN,
            downsample=MAX_STEPS,
            run_tag_filter=tb_provider.RunTagFilter(runs=chunk.runs, tags=chunk.tags),
        )
        return chunk.runs, data

    def _add_windows(self, fetched: tuple[list[str], Mapping[str, Any]]) -> None:
        runs, data = fetched
        with self._lock:
            added = 0
            for run in runs:
                for tag, points in data.get(run, {}).items():
                    if tag not in WINDOW_TAGS:
                        continue
                    series = self._series.setdefault((run, tag), _Series())
                    last = self._last_step.get((run, tag), -1)
                    for datum in points:
                        if datum.step > last and datum.wall_time <= self._folded_until():
                            self.late += 1
                        elif datum.step > last:
                            series.wall.append(datum.wall_time)
                            series.values.append(datum.value)
                            added += 1
                    if points:
                        self._last_step[(run, tag)] = max(last, int(points[-1].step))
            if added:
                self.generation += 1
                self._windows_generation += 1

    def _folded_until(self) -> float:
        """Wall times up to this belong to folded windows (``slot_of``'s rule)."""
        h = self._history
        return -math.inf if h is None else (h.end_slot + 0.5) * h.window_s

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> RankSnapshot:
        """The grid at this generation, or the previous one while the refresh thread builds it
        (scoring a big grid takes seconds, so a request never waits for it when one exists)."""
        with self._lock:
            snap = self._snapshot
            fresh = snap is not None and snap.generation == self.generation
        loading = self.loading()
        if not fresh and loading is not None:
            # A first read in progress: the refresh thread scores it when done (answer now).
            snap = snap or _empty_snapshot(self.generation)
        elif not fresh and (snap is None or not self._building):
            snap = self._rebuild()
        if loading != snap.loading:
            snap = dataclasses.replace(snap, loading=loading)
        return snap

    def _columns(self, run: str, tag: str) -> tuple[np.ndarray, np.ndarray]:
        series = self._series.get((run, tag))
        if series is None:
            return np.zeros(0), np.zeros(0)
        return np.frombuffer(series.wall, np.float64).copy(), np.frombuffer(
            series.values, np.float64
        ).copy()

    def _rebuild(self) -> RankSnapshot:
        """Build the snapshot of the current generation (once), from the previous one where the
        older windows did not change."""
        with self._build_lock:
            self._building = True
            try:
                with self._lock:
                    prev = self._snapshot
                    if prev is not None and prev.generation == self.generation:
                        return prev
                    generation, windows_generation = self.generation, self._windows_generation
                    beats = {run: dict(beat) for run, beat in self._beats.items()}
                    # Only heartbeats new (every few seconds of a live job): the grid stands.
                    beats_only = (
                        prev is not None
                        and prev.windows_generation == windows_generation
                        and set(prev.runs) >= set(beats)
                    )
                    series = None if beats_only else self._inputs()
                if series is None:
                    grid = prev.grid.with_beats(beats)
                    snap = dataclasses.replace(
                        prev,
                        generation=generation,
                        grid=grid,
                        stalls=_dicts(grid.stalls()),
                        jobs={},
                    )
                else:
                    grid = RankGrid.from_series(
                        series, beats, window_s=self._window_s(), previous=prev and prev.grid
                    )
                    grid = self._bounded(grid, beats)
                    snap = RankSnapshot(
                        generation=generation,
                        loading=self.loading(),
                        grid=grid,
                        windows_generation=windows_generation,
                        scores=_dicts(grid.scores(self._threshold, self._windows)),
                        stalls=_dicts(grid.stalls()),
                        scoring=(self._threshold, self._windows),
                    )
                with self._lock:
                    self._snapshot = snap
                return snap
            finally:
                self._building = False

    def _window_s(self) -> float | None:
        return self._history.window_s if self._history else None

    def _bounded(self, grid: RankGrid, beats: dict[str, dict[str, float]]) -> RankGrid:
        """``grid`` over the folded history; once a rank holds ``FOLD_EVERY`` windows more than
        ``keep`` (and the first read is done), its oldest are folded and forgotten here."""
        history = self._history
        fine = grid
        if history is not None:
            grid = FoldedGrid(fine, history)
        if self.loading() is not None or fine.shape[1] <= self._keep + FOLD_EVERY:
            return grid
        history = History.fold(fine, fine.shape[1] - self._keep, history, threshold=self._threshold)
        with self._lock:
            self._history = history
            cutoff = self._folded_until()
            for series in self._series.values():
                series.trim(cutoff)
            series = self._inputs()
        return FoldedGrid(RankGrid.from_series(series, beats, window_s=history.window_s), history)

    def _inputs(self) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """Copies of the window columns a grid is built from (under the data lock)."""
        runs = {run for run, _ in self._series}
        return {run: {tag: self._columns(run, tag) for tag in WINDOW_TAGS} for run in runs}


def _dicts(found: list[Any]) -> list[dict[str, Any]]:
    """Scores or stalls as the route's JSON sends them."""
    return [dataclasses.asdict(each) for each in found]


def _empty_snapshot(generation: int) -> RankSnapshot:
    return RankSnapshot(generation=generation, loading=None, grid=RankGrid.from_series({}))
