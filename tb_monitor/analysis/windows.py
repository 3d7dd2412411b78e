"""The window rule of rank health: which wall-clock window a logged point belongs to, and how
long the recorder's windows are (``tb_monitor.analysis.grid.RankGrid`` lays ranks' windows on
columns by it).

Stat windows end at multiples of the window length on the wall clock and are logged a moment
after the boundary; a window closed early (``close()``, a process ending) is logged before it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["infer_window_s", "slot_of"]

#: A run's newest this many windows tell its window length (the rest would only cost time).
_GAPS_READ = 256


def slot_of(wall: np.ndarray | float, window_s: float) -> np.ndarray:
    """The slot (window end / ``window_s``) a point logged at ``wall`` belongs to."""
    return np.ceil(np.asarray(wall, dtype=np.float64) / window_s - 0.5).astype(np.int64)


def infer_window_s(walls: Iterable[np.ndarray]) -> float | None:
    """The recording window from the spacing of each run's window ends, or None with no gaps.

    Windows end on multiples of the window, so the gaps between a run's windows are whole
    windows, give or take the timer's latency (ms): one where every window is kept, any
    number where TensorBoard kept a sample or the rank idled. A short window (a process
    closing its Stats) makes gaps that are not. So the window is the largest common gap (or
    its half or third) of which most gaps are whole multiples."""
    gaps = [np.diff(np.sort(w[-_GAPS_READ:])) for w in walls if len(w) > 1]
    pooled = np.concatenate(gaps) if gaps else np.zeros(0)
    pooled = pooled[pooled > 1e-3]
    pooled = pooled[:: max(1, len(pooled) // 4096)]  # a sample tells as well
    if not len(pooled):
        return None
    scale = 10.0 ** (np.floor(np.log10(pooled)) - 1)  # candidates to 2 significant digits
    values, counts = np.unique(np.round(pooled / scale) * scale, return_counts=True)
    common = values[np.argsort(counts)[-16:]]
    for window in np.unique(np.concatenate([common, common / 2, common / 3]))[::-1]:
        multiple = np.rint(pooled / window)
        fits = (multiple >= 1) & (np.abs(pooled - multiple * window) <= 0.1 * window + 0.02)
        if fits.mean() >= 0.6:
            return _round(float(np.median(pooled[fits] / multiple[fits])))
    return None


def _round(window_s: float) -> float:
    """A measured window as the setting it most likely was: one significant digit (0.5, 10,
    60) where that is within 3%, else three."""
    one = float(f"{window_s:.1g}")
    return one if abs(one - window_s) <= 0.03 * window_s else float(f"{window_s:.3g}")
