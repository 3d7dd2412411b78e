"""The ranks' part of the job report: step times, stragglers and stalls, as typed values.

Read from the per-rank Stat windows and heartbeats ``tb_monitor.rank.health``
records, through the one ``tb_monitor.analysis.grid.RankGrid`` (its ``Score`` and ``Stall``,
its window rule), so ``tb-monitor report``, the notebook and the plugin's Ranks view name the
same stragglers and stalls. Needs no pandas.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tb_monitor.analysis.agent_views import AgentView, silent_runs
from tb_monitor.analysis.grid import RankGrid, Score, Stall
from tb_monitor.analysis.roll_call import RollCall
from tb_monitor.analysis.scoring import Cut

__all__ = ["RankHealth", "StepTime", "rank_health"]

_SLOWEST = 3  # how many of the slowest ranks the report names
#: A Score's and a Stall's fields in the report's JSON (schema 1): without the grid's row and
#: run, and without the score's compute_s (the step times hold it).
_SCORE_FIELDS = tuple(f.name for f in fields(Score) if f.name not in ("row", "run", "compute_s"))
_STALL_FIELDS = tuple(f.name for f in fields(Stall) if f.name not in ("row", "run"))


@dataclass(frozen=True)
class StepTime:
    """One rank's typical step: the medians over the windows it recorded."""

    rank: int
    windows: int
    step_s: float  # mean step time
    collective_s: float  # waiting in collectives and DDP's gradient all-reduces, per step
    compute_s: float  # step minus that wait: what separates ranks
    median_s: float | None  # the step times' median in a window (None: not recorded)
    p95_s: float | None  # their 95th percentile in a window

    def to_json(self) -> dict[str, Any]:
        return _pick(self, tuple(f.name for f in fields(self)))


@dataclass(frozen=True)
class RankHealth:
    """What the ranks' own records say: how many, their step times, who is slow, who stalled."""

    count: int  # ranks that recorded a window or a heartbeat
    windows: int  # windows that hold data (of any rank)
    window_s: float
    scores: tuple[Score, ...]  # every rank with a window, slowest first
    stalls: tuple[Stall, ...]  # the waited-for first, then the longest stalled
    step_times: tuple[StepTime, ...]  # by rank
    #: What each rank's agent saw of its process, by (job, rank) (``analysis.agent_views``).
    views: Mapping[tuple[str, int], AgentView] = field(default_factory=dict)
    #: Every rank's stacks in the stall, grouped, while one is named (``analysis.roll_call``).
    roll_call: RollCall | None = None

    def view_of(self, stall: Stall) -> AgentView | None:
        """What the stalled rank's agent saw of it, if it recorded anything."""
        return self.views.get((stall.run.split("/", 1)[0], stall.rank))

    @property
    def stragglers(self) -> tuple[Score, ...]:
        return tuple(s for s in self.scores if s.flagged)

    @property
    def slowest(self) -> tuple[Score, ...]:
        return self.scores[:_SLOWEST]

    @property
    def waited_for(self) -> tuple[int, ...]:
        return tuple(s.rank for s in self.stalls if s.waited_for)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values; ``stalled`` here means a rank is stalled, whatever the job's state
        (``JobReport.to_json`` says whether that matters)."""
        return {
            "count": self.count,
            "windows": self.windows,
            "window_s": self.window_s,
            "stragglers": [_pick(s, _SCORE_FIELDS) for s in self.stragglers],
            "slowest": [_pick(s, _SCORE_FIELDS) for s in self.slowest],
            "stalled": bool(self.stalls),
            "stalls": [
                {**_pick(s, _STALL_FIELDS), "agent": _view_json(self.view_of(s))}
                for s in self.stalls
            ],
            "waited_for": list(self.waited_for),
            "roll_call": None if self.roll_call is None else self.roll_call.to_json(),
            "step_times": [s.to_json() for s in self.step_times],
        }


def _view_json(view: AgentView | None) -> dict[str, Any] | None:
    return None if view is None else view.to_json()


def _pick(value: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(value, name) for name in fields}


def _step_times(grid: RankGrid) -> tuple[StepTime, ...]:
    """Per rank with a window, the medians over its windows of its mean step time, wait,
    compute, and of its windows' step time median and p95."""
    arrays = (grid.step_s, grid.collective_s, grid.compute, grid.step_p50, grid.step_p95)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ranks without a window
        medians = [np.nanmedian(a, axis=1) for a in arrays]
    recorded = np.count_nonzero(grid.steps > 0, axis=1)
    found = [
        StepTime(
            rank,
            int(recorded[row]),
            *(float(m[row]) for m in medians[:3]),
            *(float(m[row]) if np.isfinite(m[row]) else None for m in medians[3:]),
        )
        for row, rank in enumerate(grid.ranks)
        if recorded[row] and rank is not None
    ]
    return tuple(sorted(found, key=lambda s: s.rank))


def rank_health(
    grid: RankGrid,
    *,
    now: float | None = None,
    views: Mapping[tuple[str, int], AgentView] | None = None,
    calls: Mapping[str, RollCall] | None = None,
    cut_off: Mapping[tuple[str, int], Cut] | None = None,
) -> RankHealth | None:
    """The ranks' health on ``grid``, or None when no rank recorded it. ``now``: when stalls
    are judged (default: the grid's newest heartbeat); ``views``: what the ranks' agents saw
    (``agent_views``), attached to each stall as its explanation (a rank that recorded nothing
    is known from them alone); ``calls``: the jobs' roll-calls (``roll_calls``), the newest of
    the grid's jobs attached while a stall is named; ``cut_off``: the ranks of nodes whose
    keep-alives to the rendezvous store stopped (``store_contact.cut_off_ranks``), the ones waited
    for."""
    if not grid.runs:
        return None
    views = views or {}
    silent = silent_runs(grid.runs, views)
    stalls = tuple(grid.stalls(now=now, seen_silent=silent, cut_off=cut_off))
    jobs = {run.split("/", 1)[0] for run in grid.runs}
    ours = [call for job, call in (calls or {}).items() if job in jobs]
    return RankHealth(
        count=len(grid.runs),
        windows=int(np.count_nonzero((grid.steps > 0).any(axis=0))) if grid.shape[1] else 0,
        window_s=grid.window_s,
        scores=tuple(grid.scores()),
        stalls=stalls,
        step_times=_step_times(grid),
        views=views,
        roll_call=max(ours, key=lambda c: c.at) if ours and stalls else None,
    )
