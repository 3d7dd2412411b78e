"""The Ranks view's step-time curves: each rank's median and p95 over the heatmap's buckets.

``tb_monitor.analysis.step_times`` buckets the grid's windows exactly as the heatmap's columns
(``bucketed``) and finds the median rank (``typical``); this module sends them as the ``ranks``
route's ``step_times``. Past :data:`BAND_RANKS` ranks the view draws the ranks' medians as one
min-max band (``static/panels/steptimes.js``), so only the band, the median rank's curves and
the curves of the ranks the view highlights travel: stragglers, stalled ranks, and the rank a
request names (hovered or clicked, fetched on demand).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.step_times import bucketed, typical
from tb_plugin.payloads import b64

__all__ = ["BAND_RANKS", "highlighted_rows", "step_times_payload"]

#: Past this many ranks the step times are one band of the ranks' medians (``steptimes.js``).
BAND_RANKS = 128


def highlighted_rows(payload: dict[str, Any], rank: int | None) -> set[int]:
    """The rows whose own step times the view may draw: stragglers, stalled ranks, and the
    rank the request names (hovered or clicked)."""
    rows = {s["row"] for s in payload["stragglers"]} | {s["row"] for s in payload["stalls"]}
    rows.discard(-1)  # a stalled rank that recorded nothing has no row
    if rank is not None:
        rows.update(row for row, r in enumerate(payload["ranks"]) if r == rank)
    return rows


def step_times_payload(
    grid: RankGrid,
    per: int,
    start: int = 0,
    stop: int | None = None,
    *,
    keep: Collection[int] | None = None,
) -> dict[str, Any]:
    """The step-time curves over the heatmap's buckets (``tb_monitor.analysis.step_times``):
    per rank, in the payload's row order, its median and p95 in seconds as base64 float32 (NaN:
    no window), and the median rank's of both; ``recorded``: false where the logdir has no
    quantiles (the median is then the mean step time, the p95 NaN).

    Past :data:`BAND_RANKS` ranks the view draws the medians as one band, so with ``keep`` only
    the rows in it get their curves (the others ``null``) and ``band`` holds the band: per
    bucket the lowest and highest rank median (every curve of many ranks is megabytes of
    JSON, the band a few kB)."""
    median, tail, recorded = bucketed(grid, per, start, stop)
    out: dict[str, Any] = {
        "recorded": recorded,
        "typical_p50": b64(typical(median), "<f4"),
        "typical_p95": b64(typical(tail), "<f4"),
    }
    if keep is None or len(median) <= BAND_RANKS:
        out["p50"] = [b64(row, "<f4") for row in median]
        out["p95"] = [b64(row, "<f4") for row in tail]
        return out
    out["p50"] = [b64(row, "<f4") if i in keep else None for i, row in enumerate(median)]
    out["p95"] = [b64(row, "<f4") if i in keep else None for i, row in enumerate(tail)]
    # fmin/fmax skip NaN (no window) and give NaN only where no rank has a value.
    lo, hi = (f.reduce(median, axis=0) for f in (np.fmin, np.fmax))
    out["band"] = {"lo": b64(lo, "<f4"), "hi": b64(hi, "<f4")}
    return out
