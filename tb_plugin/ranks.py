"""The Ranks view's data: per-rank compute time as a ranks x time heatmap, stragglers and stalls.

``tb_monitor.integrations.rank_health`` records each rank's step and collective timing as Stat
windows (``rank/step_s``, ``rank/collective_s``) and heartbeats (``rank/steps``,
``rank/entered``, ``rank/left``, ``rank/in_collective_s``, ``rank/since_step_s``), as plain
scalars in the rank's run. :class:`RankStore` reads them through TensorBoard's data provider
(``list_scalars`` / ``read_scalars``, the runs whose tags start with ``rank/``), keeps numpy
columns per run, and reads again only the series that grew (the heartbeats: only their newest
value). A :class:`RankSnapshot` lays them on one grid, rows = ranks, columns = windows, with
compute time (step minus collective wait) and the relative score (over the median of all ranks
in that window); the scoring, the straggler flags and the stalls are
:mod:`tb_monitor.analysis.stragglers`' own numpy core, so the tab and ``tb-monitor report``
agree. The grid is scored on the refresh thread (:class:`tb_plugin.refresher.Refresher`), only
the windows that changed; new heartbeats alone re-read only the stalls, and a request during a
first long read answers at once with ``loading``. :func:`ranks_payload` answers the ``ranks``
route: the grid bucketed in time to at most about the pixel width asked for (level of detail),
one byte per cell, base64; a poll naming the current ``generation`` gets ``unchanged``.

TensorBoard keeps a sample of each scalar series (``--samples_per_plugin scalars=N``, 1000 by
default, always the newest): the view shows the windows TensorBoard kept, and every window it
has seen once, since the store appends and never forgets.
"""

from __future__ import annotations

import array
import base64
import dataclasses
import functools
import json
import math
import re
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider as tb_provider
from werkzeug import wrappers

from tb_monitor import timeline
from tb_monitor.analysis.stragglers import (
    FLAG_THRESHOLD,
    FLAG_WINDOWS,
    individual_scores,
    longest_over,
    rank_of,
    relative_scores,
    stalled_ranks,
)
from tb_plugin.records import MAX_STEPS
from tb_plugin.refresher import Refresher
from tb_plugin.store import ProviderStore

__all__ = [
    "BEAT_TAGS",
    "BUCKET_PX",
    "LEVEL_SPAN",
    "WINDOW_TAGS",
    "RankQuery",
    "RankSnapshot",
    "RankStore",
    "ranks_payload",
]

SCALARS_PLUGIN = "scalars"
#: The Stat windows read whole: a rank's steps, their summed time and summed collective wait.
WINDOW_TAGS = ("rank/step_s.count", "rank/step_s.sum", "rank/collective_s.sum")
#: The heartbeats, of which only the newest value counts.
BEAT_TAGS = {
    "rank/steps.value": "steps",
    "rank/entered.value": "entered",
    "rank/left.value": "left",
    "rank/in_collective_s.value": "in_collective_s",
    "rank/since_step_s.value": "since_step_s",
    "rank/fr_seq.value": "fr_seq",
}
#: A refresh lists the provider's series at most this often (seconds).
REFRESH_INTERVAL_S = 1.0
#: About this many window values are read from the provider at a time.
CHUNK_POINTS = 200_000
#: Width, in pixels, of one level-of-detail bucket.
BUCKET_PX = 2
#: A cell's level 1..255 stands for log2(relative) from -LEVEL_SPAN to +LEVEL_SPAN (0: no data).
LEVEL_SPAN = 1.0
_DEFAULT_WINDOW_S = 10.0


class RankQueryError(ValueError):
    """A request parameter the Ranks view cannot honour; the message names it."""


@dataclass(frozen=True)
class RankQuery:
    """A window of the heatmap, as validated from a request."""

    start: float | None = None
    end: float | None = None
    width: int = 1000
    #: The generation the client holds: a poll answered with ``unchanged`` when it is current.
    generation: int | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> RankQuery:
        """Validate request arguments; raise :class:`RankQueryError` naming the bad one."""
        bounds = []
        for name in ("start", "end"):
            raw = args.get(name)
            if raw in (None, ""):
                bounds.append(None)
                continue
            try:
                value = float(raw)
            except ValueError:
                raise RankQueryError(f"{name} must be a number, got {raw!r:.80}") from None
            if not math.isfinite(value):
                raise RankQueryError(f"{name} must be finite, got {raw!r:.80}")
            bounds.append(value)
        start, end = bounds
        if start is not None and end is not None and not start < end:
            raise RankQueryError(f"start {start!r} must be before end {end!r}")
        width = args.get("width", "1000")
        if not re.fullmatch(r"[0-9]{1,5}", width) or not 1 <= int(width) <= 20000:
            raise RankQueryError(f"width must be an integer from 1 to 20000, got {width!r:.80}")
        generation = args.get("generation") or None
        if generation is not None and not re.fullmatch(r"[0-9]{1,18}", generation):
            raise RankQueryError(
                f"generation must be a non-negative integer, got {generation!r:.80}"
            )
        return cls(
            start=start,
            end=end,
            width=int(width),
            generation=None if generation is None else int(generation),
        )


class _Series:
    """One scalar series, append-only: wall times and values."""

    __slots__ = ("last_step", "values", "wall")

    def __init__(self) -> None:
        self.wall = array.array("d")
        self.values = array.array("d")
        self.last_step = -1


@dataclass(frozen=True)
class RankSnapshot:
    """The ranks' windows on one grid at one generation, and what the analysis found."""

    generation: int
    loading: dict[str, int] | None
    window_s: float
    ranks: list[int]  # per row
    runs: list[str]  # per row
    slot0: int  # the first column's window end is slot0 * window_s
    compute: np.ndarray  # rows x columns, float32 seconds, NaN: no window
    relative: np.ndarray  # rows x columns, float32, NaN: no window or no median
    steps: np.ndarray  # per row: steps in all its windows
    recorded: int = 0  # cells holding a window
    windows_generation: int = -1  # the store's window data it was built from
    typical: dict[int, float] = field(default_factory=dict)  # per rank: its median step (s)
    scores: list[dict[str, Any]] = field(default_factory=list)  # per row, slowest first
    stalls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def extent(self) -> tuple[float, float] | None:
        """Epoch seconds from the first window's start to the last window's end."""
        if not self.compute.shape[1]:
            return None
        return (
            (self.slot0 - 1) * self.window_s,
            (self.slot0 + self.compute.shape[1] - 1) * self.window_s,
        )


def _window_s(walls: list[np.ndarray]) -> float:
    """The recording window (``TB_MONITOR_RANK_WINDOW_S``) from the spacing of window ends."""
    gaps = [np.diff(w) for w in walls if len(w) > 1]
    if not gaps:
        return _DEFAULT_WINDOW_S
    gap = float(np.min(np.concatenate(gaps)))
    return max(1.0, float(round(gap))) if gap > 0.5 else _DEFAULT_WINDOW_S


class RankStore(ProviderStore):
    """Every rank's windows and newest heartbeat of one experiment, extended as files grow.

    Has the refresh interface of :class:`tb_plugin.store.TimelineStore`, so a
    :class:`tb_plugin.refresher.Refresher` keeps it fresh off the request threads.
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
        self._refresh_lock = threading.Lock()
        self._listed: dict[tuple[str, str], int] = {}
        self._series: dict[tuple[str, str], _Series] = {}
        self._beats: dict[str, dict[str, float]] = {}  # run -> newest heartbeat values
        self._snapshot: RankSnapshot | None = None
        self._build_lock = threading.Lock()  # one build at a time
        self._building = False
        self._windows_generation = 0  # bumped when windows (not heartbeats) are added
        self.generation = 0

    # -- ingestion -------------------------------------------------------------------------

    def refresh(self, ctx: Any, force: bool = False, settled_only: bool = False) -> int:
        """Read what is new since the last refresh; return the generation (bumped on change)."""
        with self._refresh_lock:
            now = self._clock()
            if not force and now - self._last_refresh < REFRESH_INTERVAL_S:
                return self.generation
            if not settled_only:
                self._last_refresh = now
            listing = self._provider.list_scalars(
                ctx, experiment_id=self._eid, plugin_name=SCALARS_PLUGIN
            )
            windows: dict[str, list[str]] = {}
            beats: dict[str, list[str]] = {}
            expected = 0
            for run, tags in listing.items():
                if rank_of(run) is None:
                    continue
                for tag, series in tags.items():
                    wanted = tag in WINDOW_TAGS
                    if not wanted and tag not in BEAT_TAGS:
                        continue
                    key = (run, tag)
                    listed, self._listed[key] = self._listed.get(key), series.max_step
                    known = self._series.get(key)
                    if known is not None and series.max_step <= known.last_step:
                        continue
                    if wanted and settled_only and listed != series.max_step:
                        continue
                    if wanted:
                        windows.setdefault(run, []).append(tag)
                        expected += series.max_step + 1
                    else:
                        beats.setdefault(run, []).append(tag)
            if beats:
                self._read_beats(ctx, beats)
            if windows:
                read = functools.partial(self._read_windows, ctx)
                self._read_in_chunks(windows, listing, CHUNK_POINTS, expected, read)
            # Score what is new here, on the refresh thread, not on a request.
            snap = self._snapshot
            if snap is None or snap.generation != self.generation:
                self._rebuild()
            self._read_all = self._read_all or not settled_only
            return self.generation

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
                    series = self._series.setdefault((run, tag), _Series())
                    series.last_step = max(series.last_step, int(newest.step))
                    beat[BEAT_TAGS[tag]] = float(newest.value)
                    beat["wall_time"] = max(beat.get("wall_time", 0.0), float(newest.wall_time))
                    changed = True
            if changed:
                self.generation += 1

    def _read_windows(self, ctx: Any, runs: list[str], tags: list[str]) -> None:
        data = self._provider.read_scalars(
            ctx,
            experiment_id=self._eid,
            plugin_name=SCALARS_PLUGIN,
            downsample=MAX_STEPS,
            run_tag_filter=tb_provider.RunTagFilter(runs=runs, tags=tags),
        )
        with self._lock:
            added = 0
            for run in runs:
                for tag, points in data.get(run, {}).items():
                    if tag not in WINDOW_TAGS:
                        continue
                    series = self._series.setdefault((run, tag), _Series())
                    last = series.last_step
                    for datum in points:
                        if datum.step > last:
                            series.wall.append(datum.wall_time)
                            series.values.append(datum.value)
                            added += 1
                    if points:
                        series.last_step = max(last, int(points[-1].step))
            if added:
                self.generation += 1
                self._windows_generation += 1

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> RankSnapshot:
        """The grid at this generation, or the previous one while the refresh thread builds it
        (scoring 9M cells takes seconds, so a request never waits for it when one exists)."""
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
            snap = RankSnapshot(**{**snap.__dict__, "loading": loading})
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
                    if (
                        prev is not None
                        and prev.windows_generation == windows_generation
                        and set(prev.runs) >= set(self._beats)
                    ):
                        # Only heartbeats are new (every few seconds of a live job): the grid
                        # and scores stand, the stalls are read again.
                        beats = {run: dict(beat) for run, beat in self._beats.items()}
                        inputs = None
                    else:
                        inputs = self._inputs()
                if inputs is None:
                    stalls = _stall_rows(prev.runs, prev.typical, beats)
                    snap = dataclasses.replace(prev, generation=generation, stalls=stalls)
                else:
                    snap = self._build(generation, windows_generation, *inputs, prev)
                with self._lock:
                    self._snapshot = snap
                return snap
            finally:
                self._building = False

    def _inputs(self) -> tuple[list[str], dict[str, tuple], dict[str, dict[str, float]]]:
        """Copies of what a snapshot is built from (under the data lock)."""
        runs = sorted(
            {run for run, tag in self._series if tag == WINDOW_TAGS[0]} | set(self._beats),
            key=lambda run: (rank_of(run), run),
        )
        per_run = {}
        for run in runs:
            wall, count = self._columns(run, "rank/step_s.count")
            swall, total = self._columns(run, "rank/step_s.sum")
            # One window's Stat tags share its wall time; TensorBoard may have kept a different
            # sample of each series, so windows are paired by it.
            wall, i, j = np.intersect1d(wall, swall, assume_unique=False, return_indices=True)
            per_run[run] = (wall, count[i], total[j], *self._columns(run, WINDOW_TAGS[2]))
        return runs, per_run, {run: dict(beat) for run, beat in self._beats.items()}

    def _build(
        self,
        generation: int,
        windows_generation: int,
        runs: list[str],
        per_run: dict[str, tuple],
        beats: dict[str, dict[str, float]],
        prev: RankSnapshot | None,
    ) -> RankSnapshot:
        window_s = _window_s([cols[0] for cols in per_run.values()])
        slots_of = {
            run: np.rint(cols[0] / window_s).astype(np.int64) for run, cols in per_run.items()
        }
        present = [s for s in slots_of.values() if len(s)]
        slot0 = int(min(s.min() for s in present)) if present else 0
        width = int(max(s.max() for s in present)) - slot0 + 1 if present else 0
        compute = np.full((len(runs), width), np.nan, dtype=np.float32)
        steps = np.zeros(len(runs), dtype=np.int64)
        for row, run in enumerate(runs):
            wall, count, total, cwall, csum = per_run[run]
            slots = slots_of[run]
            if not len(slots):
                continue
            wait = np.zeros(len(slots))
            if len(cwall):
                cslots = np.rint(cwall / window_s).astype(np.int64)
                order = np.argsort(cslots, kind="stable")
                cslots, csum = cslots[order], csum[order]
                at = np.clip(np.searchsorted(cslots, slots), 0, len(cslots) - 1)
                wait = np.where(cslots[at] == slots, csum[at], 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                cell = np.clip((total - wait) / count, 0.0, None)
            cell[~(count > 0)] = np.nan
            compute[row, slots - slot0] = cell
            steps[row] = int(np.nansum(count))
        relative = _relative(compute, prev, runs, slot0, window_s)
        scores = self._scores(runs, compute, relative, steps)
        typical = _typical_steps(runs, per_run)
        stalls = _stall_rows(runs, typical, beats)
        return RankSnapshot(
            generation=generation,
            windows_generation=windows_generation,
            typical=typical,
            loading=self.loading(),
            window_s=window_s,
            ranks=[rank_of(run) for run in runs],
            runs=runs,
            slot0=slot0,
            compute=compute,
            relative=relative,
            steps=steps,
            recorded=int(np.count_nonzero(~np.isnan(compute))),
            scores=scores,
            stalls=stalls,
        )

    def _scores(self, runs, compute, relative, steps) -> list[dict[str, Any]]:
        if not compute.shape[1]:
            return []
        individual = individual_scores(compute)
        longest = longest_over(relative, self._threshold, present=~np.isnan(compute))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # ranks without a window
            rel = np.nanmedian(relative, axis=1)
            ind = np.nanmedian(individual, axis=1)
            median_compute = np.nanmedian(compute, axis=1)
        out = []
        for row, run in enumerate(runs):
            if not steps[row]:
                continue
            out.append(
                {
                    "row": row,
                    "rank": rank_of(run),
                    "run": run,
                    "relative": _finite(rel[row]),
                    "individual": _finite(ind[row]),
                    "compute_s": _finite(median_compute[row]),
                    "windows_over": int(longest[row]),
                    "flagged": bool(longest[row] >= self._windows),
                }
            )
        out.sort(key=lambda s: -(s["relative"] or 0.0))
        return out


def _typical_steps(runs: list[str], per_run: dict[str, tuple]) -> dict[int, float]:
    """Per rank, its median step time over its windows."""
    typical = {}
    for run in runs:
        _, count, total, *_ = per_run[run]
        with np.errstate(invalid="ignore", divide="ignore"):
            step = total / count
        step = step[np.isfinite(step)]
        if len(step):
            typical[rank_of(run)] = float(np.median(step))
    return typical


def _stall_rows(
    runs: list[str], typical: dict[int, float], beats_of_run: dict[str, dict[str, float]]
) -> list[dict[str, Any]]:
    """``stalled_ranks`` from each run's newest heartbeat, with each rank's row and run."""
    known = set(runs)
    beats = {
        rank_of(run): beat
        for run, beat in beats_of_run.items()
        if run in known and "since_step_s" in beat
    }
    rows = stalled_ranks(beats, typical)
    row_of = {rank_of(run): row for row, run in enumerate(runs)}
    for stall in rows:
        stall["row"] = row_of[stall["rank"]]
        stall["run"] = runs[stall["row"]]
    return rows


def _empty_snapshot(generation: int) -> RankSnapshot:
    return RankSnapshot(
        generation=generation,
        loading=None,
        window_s=_DEFAULT_WINDOW_S,
        ranks=[],
        runs=[],
        slot0=0,
        compute=np.zeros((0, 0), dtype=np.float32),
        relative=np.zeros((0, 0), dtype=np.float32),
        steps=np.zeros(0, dtype=np.int64),
    )


def _relative(
    compute: np.ndarray, prev: RankSnapshot | None, runs: list[str], slot0: int, window_s: float
) -> np.ndarray:
    """Relative scores of the grid; only the windows from the first one that changed since
    ``prev`` are scored again (a live job adds windows at the end)."""
    same_grid = (
        prev is not None
        and prev.runs == runs
        and prev.slot0 == slot0
        and prev.window_s == window_s
        and prev.compute.shape[1] <= compute.shape[1]
    )
    if not same_grid:
        return relative_scores(compute).astype(np.float32)
    old = prev.compute
    head = compute[:, : old.shape[1]]
    changed = np.flatnonzero(~((head == old) | (np.isnan(head) & np.isnan(old))).all(axis=0))
    dirty = int(changed[0]) if len(changed) else old.shape[1]
    relative = np.empty_like(compute, dtype=np.float32)
    relative[:, :dirty] = prev.relative[:, :dirty]
    relative[:, dirty:] = relative_scores(compute[:, dirty:])
    return relative


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# The route's payload
# ---------------------------------------------------------------------------------------------


def _b64(values: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


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
    snap: RankSnapshot, q: RankQuery, attempts: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The heatmap for the window ``q`` asks for, bucketed to about its pixel width.

    ``cells`` is rows x bins bytes (row-major; see :func:`levels`), each the mean relative score
    of the rank's windows in that time bucket; bucket ``i`` spans ``t0 + i * bin_s`` to
    ``t0 + (i + 1) * bin_s``, a whole number of windows. A query naming the snapshot's
    generation (a poll with nothing new) gets only ``{"generation", "unchanged": true}``.
    """
    if q.generation == snap.generation and snap.loading is None:
        return {"generation": snap.generation, "unchanged": True}
    rows, width = snap.compute.shape
    extent = snap.extent
    payload: dict[str, Any] = {
        "generation": snap.generation,
        "loading": snap.loading,
        "window_s": snap.window_s,
        "extent": extent,
        "ranks": snap.ranks,
        "runs": snap.runs,
        "recorded": int(snap.recorded),  # windows held, all ranks together
        "scale": scale(),
        "threshold": FLAG_THRESHOLD,
        "scores": snap.scores,
        "stragglers": [s for s in snap.scores if s["flagged"]],
        "stalls": snap.stalls,
        "markers": _markers(attempts or []),
    }
    if not width:
        payload.update(bins=0, bin_s=snap.window_s, t0=0.0, window=[0.0, 1.0], cells="")
        return payload
    lo, hi = extent
    start = q.start if q.start is not None else lo
    end = q.end if q.end is not None else hi
    # The columns (windows) whose span meets [start, end].
    c0 = int(np.clip(math.floor((start - lo) / snap.window_s), 0, width - 1))
    c1 = int(np.clip(math.ceil((end - lo) / snap.window_s), c0 + 1, width))
    n = c1 - c0
    most = max(1, q.width // BUCKET_PX)
    per_bin = max(1, math.ceil(n / most))
    edges = np.arange(c0, c1, per_bin)
    part = snap.relative[:, c0:c1]
    present = ~np.isnan(part)
    sums = np.add.reduceat(np.where(present, part, 0.0), edges - c0, axis=1, dtype=np.float64)
    counts = np.add.reduceat(present, edges - c0, axis=1, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    payload.update(
        bins=int(len(edges)),
        bin_s=per_bin * snap.window_s,
        t0=lo + c0 * snap.window_s,
        window=[start, end],
        per_bin=per_bin,
        cells=_b64(levels(mean), "u1"),
    )
    return payload


def scale() -> dict[str, Any]:
    """The diverging colour scale of relative slowness (``tb_monitor.timeline.SLOWNESS``)."""
    return {
        "min": 2.0**-LEVEL_SPAN,
        "max": 2.0**LEVEL_SPAN,
        "colors": list(timeline.SLOWNESS_COLORS),
    }


class RanksApp:
    """The ``ranks`` route: one :class:`RankStore` per experiment, each kept fresh by a
    :class:`tb_plugin.refresher.Refresher`, and the timeline's attempts for the markers."""

    def __init__(
        self,
        data_provider: tb_provider.DataProvider | None,
        attempts: Callable[[Any], list[dict[str, Any]]] | None = None,
        max_experiments: int = 8,
    ) -> None:
        self._provider = data_provider
        self._attempts = attempts
        self._max = max_experiments
        self._refreshers: dict[str, Any] = {}
        self._lock = threading.Lock()
        if data_provider is not None:
            self._refresher("")  # a local TensorBoard's one experiment: warm it up now

    def _refresher(self, eid: str) -> Refresher:
        with self._lock:
            refresher = self._refreshers.get(eid)
            if refresher is None:
                # Any experiment id in a URL reaches here: keep a few, like the timeline's stores.
                if len(self._refreshers) >= self._max:
                    self._refreshers.pop(next(iter(self._refreshers))).stop(timeout=0)
                refresher = Refresher(RankStore(self._provider, eid))  # type: ignore[arg-type]
                self._refreshers[eid] = refresher.start()
            return refresher

    def store(self, eid: str, ctx: Any) -> RankStore:
        """The experiment's store. Once it holds windows, a request answers from them at once
        and has a refresh run behind it, for the view's next poll: TensorBoard's data server
        takes ~0.5 s to list a 1,024-rank day's series, every time. Before, it waits a little
        for the first full read (and gets what is read so far)."""
        refresher = self._refresher(eid)
        refresher.request_behind_once_read(ctx)
        return refresher.store

    def serve(self, environ: Any, start_response: Any) -> Any:
        """The WSGI app of the route (``?start=&end=&width=``)."""
        request = wrappers.Request(environ)

        def respond(body: Any, code: int = 200) -> Any:
            return http_util.Respond(request, json.dumps(body), "application/json", code=code)

        try:
            query = RankQuery.from_args(request.args)
        except RankQueryError as exc:
            return respond({"error": str(exc)}, 400)(environ, start_response)
        ctx = plugin_util.context(environ)
        store = self.store(plugin_util.experiment_id(environ), ctx)
        attempts = self._attempts(request) if self._attempts is not None else []
        body = ranks_payload(store.snapshot(), query, attempts)
        return respond(body)(environ, start_response)
