"""The window rule of rank health: which wall-clock window a logged point belongs to, and how
long the recorder's windows are (``tb_monitor.analysis.grid.RankGrid`` lays ranks' windows on
columns by it).

Stat windows end at multiples of the window length on the wall clock and are logged a moment
after the boundary; a window closed early (``close()``, a process ending) is logged before it.
Each rank's wall clock is its host's: where hosts' clocks differ by a window or more,
:func:`clock_shifts` tells by how many windows, from the ranks' step counts (in synchronous
training every rank takes its n-th step at the same moment, whatever its clock reads).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["clock_shifts", "infer_window_s", "slot_of"]

#: A run's newest this many windows tell its window length (the rest would only cost time).
_GAPS_READ = 256
#: Step counts a rank must share with the reference rank before its clock is judged.
_MIN_MATCHED = 3
#: A clock is judged off only past this many of the heartbeats' blur (``_job_shifts``).
_BLURS = 1.5


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


def clock_shifts(
    progress: Mapping[str, tuple[np.ndarray, np.ndarray] | None], window_s: float
) -> dict[str, float]:
    """Per run whose wall clock runs whole windows ahead of (or behind) the first run of its
    job's (its folder's), the seconds to take from its times (a multiple of ``window_s``); runs
    within half a window of it are left out. ``progress``: run -> (wall times, step counts so
    far) of its heartbeats.

    A rank's offset is the median, over the counts both ranks reached, of when it reached a
    count by its clock minus when the first run did (each the first heartbeat to show it,
    interpolated on the first run's). Ranks that do not step together (their offsets spread
    over more than a window) are left as they are: their steps tell nothing of their clocks."""
    jobs: dict[str, list[str]] = {}
    for run, pair in progress.items():
        if pair is not None and len(pair[0]):
            jobs.setdefault(posixpath.dirname(run), []).append(run)
    shifts: dict[str, float] = {}
    for runs in jobs.values():
        shifts.update(_job_shifts(progress, runs, window_s))
    return shifts


def _job_shifts(
    progress: Mapping[str, tuple[np.ndarray, np.ndarray] | None], runs: list[str], window_s: float
) -> dict[str, float]:
    """``clock_shifts`` of one job's ``runs``, against the first of them."""
    ref_walls, ref_steps = _first_reached(*progress[runs[0]])  # type: ignore[misc]
    if len(ref_steps) < 2:
        return {}
    shifts = {}
    for run in runs[1:]:
        walls, steps = _first_reached(*progress[run])  # type: ignore[misc]
        shared = (steps >= ref_steps[0]) & (steps <= ref_steps[-1])
        if np.count_nonzero(shared) < _MIN_MATCHED:
            continue
        offsets = walls[shared] - np.interp(steps[shared], ref_steps, ref_walls)
        offset = float(np.median(offsets))
        if np.median(np.abs(offsets - offset)) > window_s:
            continue
        # A beat is a count sampled up to a heartbeat (or a window) before its window is
        # logged, at each process's own phase: offsets within that blur are no skew.
        blur = max(window_s, *(float(np.median(np.diff(w))) for w in (walls, ref_walls)))
        if abs(offset) >= _BLURS * blur:
            shifts[run] = round(offset / window_s) * window_s
    return shifts


def _first_reached(walls: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wall, count) where a run's heartbeats first show each new step count above 0, of its
    newest attempt (counts start again from 0 in a restarted process)."""
    order = np.argsort(walls, kind="stable")
    walls, steps = np.asarray(walls, np.float64)[order], np.asarray(steps, np.float64)[order]
    restarts = np.flatnonzero(np.diff(steps) < 0)
    if len(restarts):
        walls, steps = walls[restarts[-1] + 1 :], steps[restarts[-1] + 1 :]
    new = np.concatenate([[True], np.diff(steps) > 0]) & (steps > 0)
    return walls[new], steps[new]
