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
first long read answers at once with ``loading``. :func:`ranks_payload` answers the ``ranks``
route: the grid bucketed in time to at most about the pixel width asked for (level of detail),
one byte per cell, base64, with each rank's step time median and p95 over the same buckets
(``tb_plugin.step_times``); a poll naming the current ``generation`` gets ``unchanged``.

TensorBoard keeps a sample of each scalar series (``--samples_per_plugin scalars=N``, 1000 by
default, always the newest): the view shows the windows TensorBoard kept, and every window it
has seen once, since the store appends and never forgets.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor import timeline
from tb_monitor.analysis.agent_views import AgentView, silent_runs
from tb_monitor.analysis.captures import Capture
from tb_monitor.analysis.grid import BEAT_TAGS, WINDOW_TAGS, RankGrid
from tb_monitor.analysis.jobs import JobSpan
from tb_monitor.analysis.roll_call import RollCall
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS
from tb_monitor.contract import rank_of
from tb_plugin.payloads import b64, bucket_count
from tb_plugin.provider_store import (
    ChunkRequest,
    ProviderStore,
    Want,
    chunk_requests,
    listed_points,
)
from tb_plugin.rank_jobs import job_view
from tb_plugin.rank_snapshot import RankSnapshot
from tb_plugin.records import MAX_STEPS
from tb_plugin.requests import RankQuery
from tb_plugin.step_times import highlighted_rows, step_times_payload

__all__ = [
    "BEAT_TAGS",
    "LEVEL_SPAN",
    "WINDOW_TAGS",
    "RankSnapshot",
    "RankStore",
    "ranks_payload",
]

SCALARS_PLUGIN = "scalars"
#: About this many window values are read from the provider at a time.
CHUNK_POINTS = 200_000
#: A cell's level 1..255 stands for log2(relative) from -LEVEL_SPAN to +LEVEL_SPAN (0: no data).
LEVEL_SPAN = 1.0


class _Series:
    """One scalar series, append-only: wall times and values."""

    __slots__ = ("values", "wall")

    def __init__(self) -> None:
        self.wall = array.array("d")
        self.values = array.array("d")


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
    ) -> None:
        super().__init__(data_provider, experiment_id, clock)
        self._threshold = threshold
        self._windows = windows
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
                        if datum.step > last:
                            series.wall.append(datum.wall_time)
                            series.values.append(datum.value)
                            added += 1
                    if points:
                        self._last_step[(run, tag)] = max(last, int(points[-1].step))
            if added:
                self.generation += 1
                self._windows_generation += 1

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
                    grid = RankGrid.from_series(series, beats, previous=prev and prev.grid)
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

    def _inputs(self) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """Copies of the window columns a grid is built from (under the data lock)."""
        runs = {run for run, _ in self._series}
        return {run: {tag: self._columns(run, tag) for tag in WINDOW_TAGS} for run in runs}


def _stalls_seen(
    snap: RankSnapshot, views: Mapping[tuple[str, int], AgentView]
) -> list[dict[str, Any]]:
    """The stalls, a rank its agent sees silent counted silent, each with that agent's view."""
    if not views:
        return snap.stalls
    stalls = snap.grid.stalls(seen_silent=silent_runs(snap.runs, views))
    out = []
    for stall in stalls:
        view = views.get((stall.run.split("/", 1)[0], stall.rank))
        out.append({**dataclasses.asdict(stall), "agent": view and view.to_json()})
    return out


def _roll_call(snap: RankSnapshot, calls: Mapping[str, RollCall]) -> dict[str, Any] | None:
    """The newest roll-call of the jobs ``snap`` shows, as ``report --json`` has it."""
    jobs = {run.split("/", 1)[0] for run in snap.runs}
    ours = [call for job, call in calls.items() if job in jobs]
    return max(ours, key=lambda c: c.at).to_json() if ours else None


def captures_payload(runs: Sequence[str], taken: Mapping[str, list[Capture]]) -> list[dict]:
    """The captures of the jobs ``runs`` shows, newest first, as ``report --json`` has them:
    each file's path in the logdir, which the ``capture`` route serves."""
    jobs = {run.split("/", 1)[0] for run in runs}
    ours = [capture for job, found in taken.items() if job in jobs for capture in found]
    return [capture.to_json() for capture in sorted(ours, key=lambda c: -c.at)]


def _dicts(found: list[Any]) -> list[dict[str, Any]]:
    """Scores or stalls as the route's JSON sends them."""
    return [dataclasses.asdict(each) for each in found]


def _empty_snapshot(generation: int) -> RankSnapshot:
    return RankSnapshot(generation=generation, loading=None, grid=RankGrid.from_series({}))


# ---------------------------------------------------------------------------------------------
# The route's payload
# ---------------------------------------------------------------------------------------------


def levels(relative: np.ndarray) -> np.ndarray:
    """Relative scores as one byte each: 0 no data, 128 the median, 1 half, 255 twice or more."""
    relative = np.asarray(relative, dtype=np.float64)
    ok = np.isfinite(relative) & (relative >= 0)
    x = np.log2(np.where(ok, np.maximum(relative, 1e-9), 1.0)) / LEVEL_SPAN
    out = np.rint(128 + np.clip(x, -1.0, 1.0) * 127)
    return np.where(ok, out, 0.0).astype(np.uint8)


def _markers(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rendezvous rounds, failures and restarts of the jobs' attempts, as vertical marks."""
    out = []
    for a in attempts:
        job, n = a.get("job"), a.get("attempt", 0)
        start = a.get("start")
        if start is not None:
            kind = "restart" if n else "rendezvous"
            out.append(
                {
                    "t": float(start),
                    "kind": kind,
                    "state": "RENDEZVOUS",
                    "label": f"{job} · attempt {n} {'restarted' if n else 'started'}",
                }
            )
        cause = a.get("root_cause")
        if cause and cause.get("time") is not None:
            out.append(
                {
                    "t": float(cause["time"]),
                    "kind": "failure",
                    "state": "FAILED",
                    "label": f"{job} · attempt {n}: rank {cause.get('rank')} {cause.get('reason')}",
                }
            )
    for marker in out:
        marker["color"] = timeline.state_color(marker["state"])
    return out


def ranks_payload(
    snap: RankSnapshot,
    q: RankQuery,
    attempts: list[dict[str, Any]] | None = None,
    views: Mapping[tuple[str, int], AgentView] | None = None,
    jobs: Sequence[JobSpan] = (),
    calls: Mapping[str, RollCall] | None = None,
) -> dict[str, Any]:
    """The heatmap for the window ``q`` asks for, bucketed to about its pixel width.

    ``cells`` is rows x bins bytes (row-major; see :func:`levels`), each the mean relative score
    of the rank's windows in that time bucket; bucket ``i`` spans ``t0 + i * bin_s`` to
    ``t0 + (i + 1) * bin_s``, a whole number of windows; ``step_times`` holds each rank's
    step times over the same buckets (``tb_plugin.step_times``). A query naming the
    snapshot's generation (a poll with nothing new) gets only ``{"generation", "unchanged": true}``.
    ``views``: what the ranks' agents saw (``tb_monitor.analysis.agent_views``), each stall's
    ``agent`` (as ``tb-monitor report --json`` has it). ``jobs``: the logdir's jobs; where
    it holds several, the payload is one job's (``tb_plugin.rank_jobs``: ``jobs``, ``job``).
    ``calls``: the jobs' roll-calls (``tb_monitor.analysis.roll_call``): the shown job's
    newest is ``roll_call`` while a rank is stalled, as ``report --json`` has it.
    """
    if q.generation == snap.generation and snap.loading is None:
        return {"generation": snap.generation, "unchanged": True}
    snap, attempts, shown = job_view(snap, jobs, q.job, attempts or [])
    payload: dict[str, Any] = {
        "generation": snap.generation,
        "loading": snap.loading,
        "window_s": snap.window_s,
        "extent": snap.extent,
        "ranks": snap.ranks,
        "runs": snap.runs,
        "recorded": int(snap.recorded),  # windows held, all ranks together
        "scale": scale(),
        "threshold": FLAG_THRESHOLD,
        "scores": snap.scores,
        "stragglers": [s for s in snap.scores if s["flagged"]],
        "stalls": _stalls_seen(snap, views or {}),
        "markers": _markers(attempts),
        **shown,
    }
    payload["roll_call"] = _roll_call(snap, calls or {}) if payload["stalls"] else None
    payload.update(_cells(snap, q, highlighted_rows(payload, q.rank)))
    return payload


def _cells(snap: RankSnapshot, q: RankQuery, highlighted: Any) -> dict[str, Any]:
    """The heatmap's cells and the step-time curves over the window ``q`` asks for: whole
    windows per bucket, about as many buckets as its pixel width."""
    width = snap.compute.shape[1]
    if not width:
        empty = step_times_payload(snap.grid, 1, keep=highlighted)
        return dict(
            bins=0, bin_s=snap.window_s, t0=0.0, window=[0.0, 1.0], cells="", step_times=empty
        )
    lo, hi = snap.extent
    start = q.start if q.start is not None else lo
    end = q.end if q.end is not None else hi
    # The columns (windows) whose span meets [start, end].
    c0 = int(np.clip(math.floor((start - lo) / snap.window_s), 0, width - 1))
    c1 = int(np.clip(math.ceil((end - lo) / snap.window_s), c0 + 1, width))
    per_bin = max(1, math.ceil((c1 - c0) / bucket_count(q.width)))
    mean = snap.grid.merged(per_bin, c0, c1)
    return dict(
        bins=int(mean.shape[1]),
        bin_s=per_bin * snap.window_s,
        t0=lo + c0 * snap.window_s,
        window=[start, end],
        per_bin=per_bin,
        cells=b64(levels(mean), "u1"),
        step_times=step_times_payload(snap.grid, per_bin, c0, c1, keep=highlighted),
    )


def scale() -> dict[str, Any]:
    """The diverging colour scale of relative slowness (``tb_monitor.timeline.SLOWNESS_COLORS``)."""
    return {
        "min": 2.0**-LEVEL_SPAN,
        "max": 2.0**LEVEL_SPAN,
        "colors": list(timeline.SLOWNESS_COLORS),
    }
