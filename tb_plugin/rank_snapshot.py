"""The Ranks view's grid at one generation: what the rank store builds and the route reads.

Its own module, below both :mod:`tb_plugin.ranks` (which builds it) and
:mod:`tb_plugin.rank_jobs` (which cuts it to one job), so neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS

__all__ = ["RankSnapshot"]


@dataclass(frozen=True)
class RankSnapshot:
    """The ranks' grid at one generation, with its scores and stalls as the route sends them."""

    generation: int
    loading: dict[str, int] | None
    grid: RankGrid
    windows_generation: int = -1  # the store's window data it was built from
    scores: list[dict[str, Any]] = field(default_factory=list)  # per rank, slowest first
    stalls: list[dict[str, Any]] = field(default_factory=list)  # the one waited for first
    scoring: tuple[float, int] = (FLAG_THRESHOLD, FLAG_WINDOWS)  # threshold, windows in a row
    #: Each job's own snapshot, made on demand (``tb_plugin.rank_jobs.job_snapshot``).
    jobs: dict[Any, RankSnapshot] = field(default_factory=dict, compare=False, repr=False)

    # The grid's, for the payload.
    window_s = property(lambda self: self.grid.window_s)
    ranks = property(lambda self: self.grid.ranks)
    runs = property(lambda self: self.grid.runs)
    compute = property(lambda self: self.grid.compute)
    relative = property(lambda self: self.grid.relative)
    extent = property(lambda self: self.grid.extent)
    recorded = property(lambda self: self.grid.recorded)
