"""The ``ranks`` route's payload: the Ranks view's grid bucketed to the pixel width asked for.

Built from a :class:`tb_plugin.rank_snapshot.RankSnapshot` (``tb_plugin.ranks`` keeps it fresh):
the heatmap as one byte per cell (:func:`levels`), each rank's step times over the same buckets
(``tb_plugin.step_times``), the scores, stalls, markers and roll-call. Where the query reaches
time the store has folded (``tb_monitor.analysis.grid_history``), the buckets are the history's
coarser columns and ``folded`` says from when windows are whole.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tb_monitor import timeline
from tb_monitor.analysis.agent_views import AgentView, silent_runs
from tb_monitor.analysis.captures import Capture
from tb_monitor.analysis.grid_history import FoldedGrid, view_of
from tb_monitor.analysis.jobs import JobSpan
from tb_monitor.analysis.roll_call import RollCall
from tb_monitor.analysis.scoring import FLAG_THRESHOLD
from tb_plugin.payloads import b64, bucket_count
from tb_plugin.rank_jobs import job_view
from tb_plugin.rank_snapshot import RankSnapshot
from tb_plugin.requests import RankQuery
from tb_plugin.step_times import highlighted_rows, step_times_payload

__all__ = ["LEVEL_SPAN", "captures_payload", "levels", "ranks_payload", "scale"]

#: A cell's level 1..255 stands for log2(relative) from -LEVEL_SPAN to +LEVEL_SPAN (0: no data).
LEVEL_SPAN = 1.0


def _stalls_seen(
    snap: RankSnapshot,
    views: Mapping[tuple[str, int], AgentView],
    cut_off: Mapping[tuple[str, int], float],
) -> list[dict[str, Any]]:
    """The stalls, a rank its agent sees silent counted silent, a rank of a node whose
    keep-alives to the rendezvous store stopped waited for (``store_contact``), each with its
    agent's view."""
    if not views and not cut_off:
        return snap.stalls
    silent = silent_runs(snap.runs, views)
    stalls = snap.grid.stalls(seen_silent=silent, cut_off=cut_off)
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


# ---------------------------------------------------------------------------------------------
# The route's payload
# ---------------------------------------------------------------------------------------------


def captures_payload(runs: Sequence[str], taken: Mapping[str, list[Capture]]) -> list[dict]:
    """The captures of the jobs ``runs`` shows, newest first, as ``report --json`` has them:
    each file's path in the logdir, which the ``capture`` route serves."""
    jobs = {run.split("/", 1)[0] for run in runs}
    ours = [capture for job, found in taken.items() if job in jobs for capture in found]
    return [capture.to_json() for capture in sorted(ours, key=lambda c: -c.at)]


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
    cut_off: Mapping[tuple[str, int], float] | None = None,
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
    newest is ``roll_call`` while a rank is stalled, as ``report --json`` has it. ``cut_off``:
    the ranks of nodes whose keep-alives to the rendezvous store stopped
    (``store_contact.cut_off_ranks``).
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
        "stalls": _stalls_seen(snap, views or {}, cut_off or {}),
        "markers": _markers(attempts),
        **shown,
    }
    payload["roll_call"] = _roll_call(snap, calls or {}) if payload["stalls"] else None
    payload.update(_cells(snap, q, highlighted_rows(payload, q.rank)))
    return payload


def _cells(snap: RankSnapshot, q: RankQuery, highlighted: Any) -> dict[str, Any]:
    """The heatmap's cells and the step-time curves over the window ``q`` asks for: whole
    windows per bucket, about as many buckets as its pixel width; where it reaches folded time
    (``folded``: from when windows are whole, and how many a folded column holds), the
    history's columns."""
    if snap.extent is None:
        empty = step_times_payload(snap.grid, 1, keep=highlighted)
        return dict(
            bins=0, bin_s=snap.window_s, t0=0.0, window=[0.0, 1.0], cells="", step_times=empty
        )
    start = q.start if q.start is not None else snap.extent[0]
    end = q.end if q.end is not None else snap.extent[1]
    grid = view_of(snap.grid, start)
    lo, width, window_s = grid.extent[0], grid.shape[1], grid.window_s  # type: ignore[index]
    # The columns (windows) whose span meets [start, end].
    c0 = int(np.clip(math.floor((start - lo) / window_s), 0, width - 1))
    c1 = int(np.clip(math.ceil((end - lo) / window_s), c0 + 1, width))
    per_bin = max(1, math.ceil((c1 - c0) / bucket_count(q.width)))
    folded = snap.grid.history if isinstance(snap.grid, FoldedGrid) else None
    return dict(
        bins=math.ceil((c1 - c0) / per_bin),
        bin_s=per_bin * window_s,
        t0=lo + c0 * window_s,
        window=[start, end],
        per_bin=per_bin * round(window_s / snap.window_s),  # whole windows a bucket
        folded=folded and {"since": snap.grid.full_since, "windows": folded.factor},
        cells=b64(levels(grid.merged(per_bin, c0, c1)), "u1"),
        step_times=step_times_payload(grid, per_bin, c0, c1, keep=highlighted),
    )


def scale() -> dict[str, Any]:
    """The diverging colour scale of relative slowness (``tb_monitor.timeline.SLOWNESS_COLORS``)."""
    return {
        "min": 2.0**-LEVEL_SPAN,
        "max": 2.0**LEVEL_SPAN,
        "colors": list(timeline.SLOWNESS_COLORS),
    }
