"""What answers the frontend: a validated window and filters, and the compact payload for it.

A browser cannot draw a million marks a frame, nor parse a million JSON objects, so a query
filters a :class:`~tb_plugin.columns.Snapshot`'s columns with numpy and returns either every event
in the visible window or, when too many, per-lane time buckets (level of detail), as base64
typed arrays the browser maps straight onto ``Float64Array``/``Uint32Array``. States come with
their colours from :func:`tb_monitor.timeline.state_color`, so the frontend defines none. Every
payload also carries the jobs' attempts with their root causes (``attempts``, from
:mod:`tb_monitor.analysis.attempts`), so the tab, ``tb-monitor report`` and the notebook agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tb_monitor import contract, timeline
from tb_plugin.columns import Columns, LaneFields, Snapshot
from tb_plugin.payloads import b64, bucket_count, narrow
from tb_plugin.requests import Query
from tb_plugin.runlength import ranges

__all__ = [
    "DETAIL_LIMIT",
    "Shown",
    "UnknownRunError",
    "frame_payload",
    "shown_of",
    "timeline_payload",
    "window_payload",
]

#: Most events sent one by one for a window; above it, the window is bucketed per lane.
DETAIL_LIMIT = 150_000


class UnknownRunError(LookupError):
    """A run filter naming a run that holds no timeline records."""


def timeline_payload(snap: Snapshot, q: Query) -> dict[str, Any]:
    """The window ``q`` asks for, as the JSON-ready columnar payload the frontend draws."""
    shown = shown_of(snap, q)
    return {**frame_payload(snap, q, shown), **window_payload(snap, q, shown)}


@dataclass(frozen=True)
class Shown:
    """What a query's filters show of a snapshot: its lanes in order, each lane's position
    among them (-1: not shown), and the events shown (None: every one)."""

    lane_ids: np.ndarray
    position: np.ndarray
    events: np.ndarray | None


def shown_of(snap: Snapshot, q: Query) -> Shown:
    """The lanes and events ``q``'s filters show; an unknown run is an error once loaded."""
    if q.run is not None and q.run not in snap.runs and snap.loading is None:
        # While loading, the run may simply not be decoded yet: it matches nothing so far.
        raise UnknownRunError(f"unknown run {q.run!r:.200}")
    cols = snap.columns
    if q.filtered:
        wanted = _wanted_records(cols, q, snap.states, snap.texts, snap.runs, snap.lanes)
        wanted &= cols.rec_count > 0
        lane_ids = np.unique(cols.rec_lane[wanted])
        lane_ids = lane_ids[np.argsort(cols.lane_rank[lane_ids])]
        # Filters are per record: an event is shown when its record is wanted.
        every = bool(wanted.all()) or not cols.rec_count[~wanted].any()
    else:  # a big job's events are never indexed, only searched by time
        lane_ids, every = cols.lanes_shown, True
    position = np.full(len(snap.lanes), -1, dtype=np.int64)
    position[lane_ids] = np.arange(len(lane_ids))
    return Shown(lane_ids, position, None if every else cols.rec.per_event(wanted))


def frame_payload(snap: Snapshot, q: Query, shown: Shown) -> dict[str, Any]:
    """What a payload says whatever its window: its lanes, states, colours, labels, facets
    and attempts (the same for every window of one snapshot and filters: the plugin keeps
    it encoded)."""
    payload = _description(snap, shown.lane_ids)
    payload["attempts"] = _attempts_payload(snap.attempts, shown.position, q, snap.lanes)
    return payload


def window_payload(snap: Snapshot, q: Query, shown: Shown) -> dict[str, Any]:
    """What a payload says of its window: the events or buckets in it, and its intervals."""
    cols, position = snap.columns, shown.position
    if shown.events is None:
        total, extent = len(cols.t), cols.extent
    else:
        times = cols.t[shown.events]
        total = int(len(times))
        extent = (float(times.min()), float(times.max())) if total else None
    start, end = _window(q, extent)
    in_window, inside, inside_records = _inside(cols, shown.events, start, end)
    payload: dict[str, Any] = {"generation": snap.generation, "total": total, "extent": extent}
    payload.update(window=[start, end], in_window=in_window, loading=snap.loading)
    if in_window <= DETAIL_LIMIT:
        payload["mode"] = "events"
        payload["events"] = _events(cols, inside(), position, snap.names, snap.msgs)
    else:
        payload["mode"] = "buckets"
        window = (start, end, q.width)
        payload["buckets"] = _window_buckets(
            cols,
            shown.events,
            (inside, inside_records),
            in_window,
            position,
            shown.lane_ids,
            window,
        )
    payload["intervals"] = _intervals_payload(cols.intervals, position, start, end)
    return payload


def _description(snap: Snapshot, lane_ids: np.ndarray) -> dict[str, Any]:
    """What a payload says besides its events: its lanes, states, colours, labels, facets."""
    states = snap.states
    fields = snap.lane_fields or LaneFields.of(snap.lanes, snap.lane_runs, snap.runs)
    return {
        # Columns, not an object per lane: a big job's lanes are a fraction of the JSON.
        "lanes": {
            "count": len(lane_ids),
            **{name: values[lane_ids].tolist() for name, values in fields.columns.items()},
        },
        "states": states,
        "colors": [timeline.state_color(state) for state in states],
        "labels": snap.labels,
        "kinds": list(contract.KINDS),
        "facets": {
            "runs": sorted(snap.runs),
            "run_ids": fields.run_ids,
            "states": sorted({states[s] for s in snap.columns.states_shown} - {""}),
        },
    }


def _inside(
    cols: Columns, shown: np.ndarray | None, start: float, end: float
) -> tuple[int, Callable[[], np.ndarray], Callable[[], np.ndarray]]:
    """How many shown events the window holds, and functions listing their positions
    (ascending) and their records (in that order). Unfiltered, each lane's sorted times are
    bisected and its records taken run by run: no pass over every event."""
    if shown is None:
        firsts, lasts = cols.between(start, end)
        count = int((lasts - firsts).sum())
        return count, lambda: ranges(firsts, lasts), lambda: cols.rec.spans(firsts, lasts)
    inside = (cols.t >= start) & (cols.t <= end) & shown
    return int(np.count_nonzero(inside)), lambda: np.flatnonzero(inside), lambda: cols.rec[inside]


def _window_buckets(
    cols: Columns,
    shown,
    inside: tuple[Callable[[], np.ndarray], Callable[[], np.ndarray]],
    in_window: int,
    position,
    lane_ids,
    window,
) -> dict[str, Any]:
    """The window's level-of-detail buckets (``window``: start, end, width), the cheaper of
    the two ways to the same buckets."""
    start, end, width = window
    # A binary search per lane and bucket edge beats a pass over the window's events when
    # there are fewer edges than events (a long job zoomed out).
    if shown is None and len(lane_ids) * (bucket_count(width) + 1) < in_window:
        buckets = _lane_buckets(cols, lane_ids, start, end, width)
        if buckets is not None:
            return buckets
    if in_window == len(cols.t):
        t, rec = cols.t, cols.rec[:]
    else:
        rows, records = inside
        t, rec = cols.t[rows()], records()
    return _buckets(cols, t, rec, position, start, end, width)


def _attempts_payload(attempts, position, q: Query, lanes) -> list[dict[str, Any]]:
    """Every attempt of the jobs shown (``tb_monitor.analysis.attempts``), whatever the window.

    A root cause's ``lane`` becomes its lane's position in this payload (-1: filtered out).
    """
    out = []
    for attempt in attempts:
        # A job told apart from another of its run id is "<run id>@HH:MM:SS" (analysis.jobs).
        if q.run_id is not None and q.run_id not in (attempt["job"], _run_id(attempt["job"])):
            continue
        attempt = dict(attempt)
        cause = attempt["root_cause"]
        if cause is not None and "lane" in cause:
            cause = attempt["root_cause"] = dict(cause)
            lane = cause["lane"]
            cause["lane"] = int(position[lane]) if 0 <= lane < len(lanes) else -1
        out.append(attempt)
    return out


def _run_id(job: str) -> str:
    """The run id of a job told apart from others of it (``<run id>@HH:MM:SS``)."""
    return job.rsplit("@", 1)[0]


def _wanted_records(cols: Columns, q: Query, states, texts, runs, lanes) -> np.ndarray:
    """Per record, whether the query's filters keep its events."""
    wanted = np.ones(len(cols.rec_lane), dtype=bool)
    if q.run is not None:
        wanted &= cols.rec_run == (runs.index(q.run) if q.run in runs else -1)
    if q.kind is not None:
        wanted &= cols.rec_kind == contract.KINDS.index(q.kind)
    if q.state is not None:
        matching = [i for i, s in enumerate(states) if s.upper() == q.state.upper()]
        wanted &= np.isin(cols.rec_state, matching)
    if q.run_id is not None:
        # A run id picks every job of it (``<run id>@HH:MM:SS``, ``analysis.jobs``).
        matching = [
            i for i, lane in enumerate(lanes) if q.run_id in (lane.group, _run_id(lane.group))
        ]
        wanted &= np.isin(cols.rec_lane, matching)
    if q.text is not None:
        needle = q.text.lower()
        hits = [i for i, text in enumerate(texts) if needle in text]
        lane_hits = [i for i, lane in enumerate(lanes) if needle in lane.label.lower()]
        wanted &= np.isin(cols.rec_text, hits) | np.isin(cols.rec_lane, lane_hits)
    return wanted


def _window(q: Query, extent: tuple[float, float] | None) -> tuple[float, float]:
    if extent is None:
        lo, hi = 0.0, 1.0
    else:
        lo, hi = extent
        pad = max((hi - lo) * 0.02, 0.5)
        lo, hi = lo - pad, hi + pad
    start = q.start if q.start is not None else lo
    end = q.end if q.end is not None else hi
    if not start < end:
        end = start + 1.0
    return start, end


def _events(cols: Columns, rows: np.ndarray, position, names, msgs) -> dict[str, Any]:
    rec = cols.rec[rows]
    used_names, name_idx = np.unique(cols.rec_name[rec], return_inverse=True)
    used_msgs, msg_idx = np.unique(cols.rec_msg[rec], return_inverse=True)
    return {
        "count": int(len(rows)),
        "t": b64(cols.t[rows], "<f8"),
        "lane": b64(position[cols.rec_lane[rec]], "<u4"),
        "state": b64(cols.rec_state[rec], "<u2"),
        "id": b64(cols.ids[rows], "<u4"),
        "name": b64(name_idx, "<u4"),
        "msg": b64(msg_idx, "<u4"),
        "names": [names[i] for i in used_names.tolist()],
        "msgs": [msgs[i][:300] for i in used_msgs.tolist()],
    }


def _buckets(cols: Columns, t, rec, position, start: float, end: float, width: int) -> dict:
    """Per lane and bucket of ``payloads.BUCKET_PX`` pixels: how many events and the most
    severe state."""
    bins, scale = _bins(start, end, width)
    runs = _bucket_runs(cols, t, rec, position[cols.rec_lane][rec], start, scale, bins)
    return _buckets_payload(start, end, bins, int(position.max(initial=-1)) + 1, *runs)


def _bucket_runs(cols: Columns, t, rec, lane, start: float, scale: float, bins: int):
    """(lane, bucket, events, most severe state) of the buckets of some events sorted by (lane,
    time), ``lane`` their lanes' positions: (lane, bucket) keys never decrease, so buckets are
    runs of equal keys, found in one pass, not by sorting millions of keys."""
    key = lane * bins + _bucket_of(t, start, scale, bins)
    starts = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate(([0], starts)) if len(key) else starts
    keys = key[starts]
    counts = np.diff(np.append(starts, len(key)))
    severity = cols.rec_severity[rec]
    worst = np.maximum.reduceat(severity, starts) if len(key) else severity[:0]
    return keys // bins, keys % bins, counts, worst


def _lane_buckets(cols: Columns, lane_ids, start: float, end: float, width: int) -> dict | None:
    """``_buckets`` of every event of the window, from each lane's sorted times. A lane with
    more events than buckets (a node's keep-alives over a long job) is searched, a binary search
    per bucket edge; the others' few events are bucketed one by one. The same buckets, to the
    event; None in the rare window too narrow for its bucket edges to be found, which
    ``_buckets`` then serves."""
    bins, scale = _bins(start, end, width)
    inner = _bucket_edges(start, scale, bins)
    if inner is None:
        return None
    ranks = cols.lane_rank[lane_ids]
    firsts, lasts = cols.rank_start[ranks], cols.rank_start[ranks + 1]
    big = lasts - firsts > bins
    edges = np.concatenate(([start], inner, [np.nextafter(end, np.inf)]))
    searched = _searched_runs(cols, np.flatnonzero(big), firsts[big], lasts[big], edges)
    rows, firsts, lasts = np.flatnonzero(~big), firsts[~big], lasts[~big]
    events = ranges(firsts, lasts)
    lane = np.repeat(rows, lasts - firsts)
    t = cols.t[events]
    kept = (t >= start) & (t <= end)
    events, t, lane = events[kept], t[kept], lane[kept]
    passed = _bucket_runs(cols, t, cols.rec[events], lane, start, scale, bins)
    lanes, bucket, counts, worst = (np.concatenate(p) for p in zip(searched, passed, strict=True))
    order = np.argsort(lanes * bins + bucket, kind="stable")  # by lane, then time: as _buckets
    return _buckets_payload(
        start, end, bins, len(lane_ids), lanes[order], bucket[order], counts[order], worst[order]
    )


def _searched_runs(cols: Columns, rows, firsts, lasts, edges: np.ndarray):
    """``_bucket_runs`` of whole lanes (``rows``: their positions), by binary search."""
    bounds = np.empty((len(rows), len(edges)), dtype=np.int64)
    for row, (lo, hi) in enumerate(zip(firsts.tolist(), lasts.tolist(), strict=True)):
        bounds[row] = np.searchsorted(cols.t[lo:hi], edges)
    bounds += firsts[:, None]
    row, bucket = np.nonzero(np.diff(bounds, axis=1))
    begin, stop = bounds[row, bucket], bounds[row, bucket + 1]
    # The most severe state of each bucket's events: a max over the runs of records its events
    # [begin, stop) are in, the ranges between buckets (every other one) dropped.
    severity = cols.run_severity
    runs = np.column_stack((cols.rec.run_of(begin), cols.rec.run_of(stop - 1) + 1)).ravel()
    worst = np.maximum.reduceat(severity, runs)[::2] if len(runs) else severity[:0]
    return rows[row], bucket, stop - begin, worst


def _bins(start: float, end: float, width: int) -> tuple[int, float]:
    """Buckets across the window, and buckets per second."""
    bins = bucket_count(width)
    return bins, bins / (end - start)


def _bucket_of(t, start: float, scale: float, bins: int) -> np.ndarray:
    """The bucket of each time: the one definition both ways of bucketing share."""
    return np.minimum(((t - start) * scale).astype(np.int64), bins - 1)


def _bucket_edges(start: float, scale: float, bins: int) -> np.ndarray | None:
    """For k = 1 .. bins-1 the first time ``_bucket_of`` puts in bucket k or later, found to
    the last bit (the estimate is a few units in the last place off), or None when that takes
    long: a window only a few units wide."""
    k = np.arange(1, bins)
    edges = start + k / scale
    for _ in range(64):
        early = _bucket_of(edges, start, scale, bins) < k
        below = np.nextafter(edges, -np.inf)
        late = _bucket_of(below, start, scale, bins) >= k
        if not (early.any() or late.any()):
            return edges
        edges = np.where(early, np.nextafter(edges, np.inf), np.where(late, below, edges))
    return None


def _buckets_payload(start, end, bins, shown: int, lanes, bucket, counts, worst) -> dict:
    """Buckets sorted by (lane, bin) of ``shown`` lanes: each lane's first bucket
    (``lane_start``, one more: the end), then per bucket its bin, events and worst state."""
    lane_start = np.zeros(shown + 1, dtype=np.int64)
    np.cumsum(np.bincount(lanes, minlength=shown), out=lane_start[1:])
    return {
        "count": int(len(counts)),
        "bins": bins,
        "bin_width": (end - start) / bins,
        **narrow(lane_start=lane_start, bin=bucket, n=counts, state=worst),
    }


def _intervals_payload(iv: dict[str, np.ndarray], position, start: float, end: float) -> dict:
    pos = position[iv["lane"]] if len(iv["lane"]) else np.zeros(0, dtype=np.int64)
    keep = (pos >= 0) & (iv["t1"] >= start) & (iv["t0"] <= end)
    return {
        "count": int(keep.sum()),
        "lane": b64(pos[keep], "<u4"),
        "t0": b64(iv["t0"][keep], "<f8"),
        "t1": b64(iv["t1"][keep], "<f8"),
        "state": b64(iv["state"][keep], "<u2"),
        "label": b64(iv["label"][keep], "<u4"),
        "open": b64(iv["open"][keep], "<u2"),
    }
