"""The order the timeline draws events in, by lane and then time, and searching it.

The store sorts every event by its lane's display position and its time
(:func:`lane_time_order`, then :func:`exact_time_order` where whole microseconds tie); a query
finds a window's events lane by lane by bisecting each lane's sorted times at once
(:func:`search_segments`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exact_time_order", "lane_time_order", "search_segments"]


def search_segments(
    t: np.ndarray, firsts: np.ndarray, lasts: np.ndarray, value: float, side: str = "left"
) -> np.ndarray:
    """Per segment ``t[first:last]`` (each sorted), ``first + np.searchsorted(t[first:last],
    value, side)``: every segment bisected at once, a few numpy calls a step and as many steps
    as the longest segment has bits, not a Python call per segment."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    lo = np.array(firsts, dtype=np.int64)
    hi = np.array(lasts, dtype=np.int64)
    if not len(t):
        return lo
    last = len(t) - 1
    while True:
        searching = lo < hi
        if not searching.any():
            return lo
        mid = (lo + hi) >> 1
        probe = t[np.minimum(mid, last)]  # a finished segment's mid may be past the end
        before = probe < value if side == "left" else probe <= value
        lo = np.where(searching & before, mid + 1, lo)
        hi = np.where(searching & ~before, mid, hi)


def exact_time_order(t: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> None:
    """Sort each segment ``t[bounds[i]:bounds[i + 1]]``, and ``order`` with it, exactly by time,
    in place, where it is not: :func:`lane_time_order` keys whole microseconds, so events less
    than one apart keep the order they were read in (two records' events on one lane, each
    record's times offsets from its own start). Bisecting a lane needs its times sorted. One
    pass finds them (rarely any); only their lanes are sorted again."""
    if len(t) < 2:
        return
    back = t[1:] < t[:-1]  # one pass, no float difference of every neighbour made
    between = bounds[(bounds > 0) & (bounds < len(t))] - 1  # a lane's first after another's last
    back[between] = False
    if not back.any():
        return
    for lane in np.unique(np.searchsorted(bounds, np.flatnonzero(back), side="right") - 1):
        a, b = int(bounds[lane]), int(bounds[lane + 1])
        fix = np.argsort(t[a:b], kind="stable")
        t[a:b], order[a:b] = t[a:b][fix], order[a:b][fix]


def lane_time_order(
    t: np.ndarray, rec: np.ndarray, rec_lane: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The order sorting events (times ``t``, records ``rec``) by their record's lane
    (``rec_lane``, per record) and time, and their times in that order: one stable sort of a
    64-bit key of lane and microseconds (events arrive in runs already sorted, which a stable
    sort merges in near linear time; ``np.lexsort`` sorts by each key in turn), unless the
    key would not fit."""
    if not len(t):  # a copy: ``t`` may be a view of the store's append-only column
        return np.zeros(0, dtype=np.int64), np.empty(0, dtype=t.dtype)
    lo, hi = float(t.min()), float(t.max())
    time_bits = max(1, math.ceil(math.log2((hi - lo) * 1e6 + 2)))
    lane_bits = max(1, int(rec_lane.max()).bit_length())
    if time_bits + lane_bits > 62 or not math.isfinite(hi - lo):
        order = np.lexsort((t, rec_lane[rec]))
        return order, t[order]
    # Whole columns in few numpy calls (the analysis, Python, runs beside this sort, and each
    # call's end waits for the GIL), in place from here (each pass over a big job's events costs), in
    # doubles whatever ``t`` is: the buffer takes the 64-bit lanes below.
    micros = np.subtract(t, lo, dtype=np.float64)
    micros *= 1e6
    key = micros.astype(np.int64)  # truncated: in time order, ties kept as read (see
    # exact_time_order for events less than a microsecond apart)
    # Below 2**time_bits: no carry into the lane. Shifted per record, gathered once per event
    # into the times' buffer, done with: a new array costs its first touch (page faults
    # over all of it), so the sorted times take that buffer too.
    # "clip": every id is in range, and the default ("raise") copies through a buffer when
    # given ``out``.
    shifted = rec_lane.astype(np.int64) << time_bits
    key |= np.take(shifted, rec, out=micros.view(np.int64), mode="clip")
    order = np.argsort(key, kind="stable")
    reuse = micros if t.dtype == micros.dtype else None  # else the times keep their own type
    return order, np.take(t, order, out=reuse, mode="clip")
