"""One rank's row of the rank-health grid, from its scalar series: the windows paired and
summed into the grid's slots (``analysis/grid.py`` lays the rows out and scores them).

Apart from the grid so that each stays readable: this module knows the window tags and how a
run's windows become cells (steps, mean step time, mean wait, the step times' quantiles, and
the share of the rank's runnable time spent waiting for a CPU); the grid knows the window rule,
the rows and the answers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tb_monitor import contract

__all__ = ["WINDOW_TAGS", "cells", "paired"]

_COUNT = contract.stat_tag(contract.RANK_STEP, "count")
_SUM = contract.stat_tag(contract.RANK_STEP, "sum")
_WAIT = contract.stat_tag(contract.RANK_COLLECTIVE, "sum")
_GRAD_WAIT = contract.stat_tag(contract.RANK_GRAD_WAIT, "sum")
_P50, _P95 = (contract.stat_tag(contract.RANK_STEP, q) for q, _ in contract.RANK_STEP_QUANTILES)
_CPU = tuple(
    contract.stat_tag(name, "sum")
    for name in (contract.RANK_CPU_WAIT, contract.RANK_CPU_RUN, contract.RANK_CPU_THROTTLED)
)
#: The window scalars read whole: a rank's steps, their summed time, its summed wait in
#: collectives and in DDP's gradient all-reduces, its step times' median and p95, and its
#: threads' seconds waiting for a CPU, on one, and throttled.
WINDOW_TAGS = (_COUNT, _SUM, _WAIT, _GRAD_WAIT, _P50, _P95, *_CPU)


def cells(
    windows: list[tuple[np.ndarray, ...]],
    slots: list[np.ndarray],
    slot0: int,
    out: list[np.ndarray],
) -> None:
    """One rank's row: windows in one slot summed (their quantiles: the larger), then ``out``
    = steps, mean step time, mean wait per step, step time median, p95, CPU starved share,
    seconds on a CPU per step."""
    (_, count, total), (_, wait), (_, cpu_wait, cpu_run), *quantiles = windows
    at, wait_at, cpu_at, *quantiles_at = slots
    if not len(at):
        return
    width = len(out[0])
    keep = (wait_at >= slot0) & (wait_at < slot0 + width)
    steps = np.bincount(at - slot0, weights=count, minlength=width)
    seconds = np.bincount(at - slot0, weights=total, minlength=width)
    waited = np.bincount(wait_at[keep] - slot0, weights=wait[keep], minlength=width)
    has = steps > 0
    out[0][:] = steps
    out[1][has] = seconds[has] / steps[has]
    out[2][has] = waited[has] / steps[has]
    for (_, values), where, row in zip(quantiles, quantiles_at, out[3:5], strict=True):
        keep = (where >= slot0) & (where < slot0 + width)
        np.fmax.at(row, where[keep] - slot0, values[keep])
        row[~has] = np.nan
    keep = (cpu_at >= slot0) & (cpu_at < slot0 + width)
    waited, ran = (
        np.bincount(cpu_at[keep] - slot0, weights=w[keep], minlength=width)
        for w in (cpu_wait, cpu_run)
    )
    busy = has & (waited + ran > 0)
    out[5][busy] = waited[busy] / (waited[busy] + ran[busy])
    out[6][busy] = ran[busy] / steps[busy]  # per step: two windows in one slot stay comparable


def paired(tags: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, ...]]:
    """One run's windows: (wall, count, summed step time) paired by wall time (TensorBoard may
    keep a different sample of each series); (wall, summed wait) of the collectives and DDP's
    gradient waits together; (wall, CPU wait, CPU run) (``_cpu``); (wall, value) of the step
    times' median, and of their p95."""
    wall, count = _series(tags, _COUNT)
    swall, total = _series(tags, _SUM)
    if not np.array_equal(wall, swall):  # the usual case needs no pairing (a sort)
        wall, i, j = np.intersect1d(wall, swall, return_indices=True)
        count, total = count[i], total[j]
    ok = count > 0
    waits = [_series(tags, tag) for tag in (_WAIT, _GRAD_WAIT)]
    waited = tuple(np.concatenate(parts) for parts in zip(*waits, strict=True))
    return [
        (wall[ok], count[ok], total[ok]),
        waited,
        _cpu(tags),
        _series(tags, _P50),
        _series(tags, _P95),
    ]


def _cpu(tags: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """(wall, seconds waiting for a CPU, seconds on one) per window logged: the wait is the
    threads' run delay, or the cgroup's throttled time where that is longer (a kernel that
    does not count throttling as run delay), paired by wall time as the step windows are."""
    wall, wait = _series(tags, _CPU[0])
    rwall, run = _series(tags, _CPU[1])
    if not np.array_equal(wall, rwall):
        wall, i, j = np.intersect1d(wall, rwall, return_indices=True)
        wait, run = wait[i], run[j]
    twall, throttled = _series(tags, _CPU[2])
    _, i, j = np.intersect1d(wall, twall, return_indices=True)
    wait = wait.copy()
    wait[i] = np.maximum(wait[i], throttled[j])
    return wall, wait, run


def _series(tags: Mapping[str, tuple[np.ndarray, np.ndarray]], tag: str) -> tuple[np.ndarray, ...]:
    walls, values = tags.get(tag, (np.zeros(0), np.zeros(0)))
    return np.asarray(walls, np.float64), np.asarray(values, np.float64)
