"""Rank-health tags: what ``integrations/rank_health.py`` writes and ``analysis/grid.py`` reads.

Stats in each worker's run (see ``runs.rank_of``), their scalars tagged
``stat_tag(name, aggregation)``.
"""

from __future__ import annotations

from tb_monitor.contract.tags import stat_tag

__all__ = [
    "RANK_BEATS",
    "RANK_COLLECTIVE",
    "RANK_PREFIX",
    "RANK_STEP",
    "RANK_WINDOW_S",
    "beat_tag",
]

RANK_PREFIX = "rank/"
#: Seconds between step boundaries (COUNT, SUM, MIN, MAX) and inside collectives (COUNT, SUM,
#: MAX), one window every ``TB_MONITOR_RANK_WINDOW_S`` (default RANK_WINDOW_S).
RANK_STEP = RANK_PREFIX + "step_s"
RANK_COLLECTIVE = RANK_PREFIX + "collective_s"
RANK_WINDOW_S = 10.0
#: Heartbeat Stats ``rank/<name>`` (VALUE; the newest counts): steps so far, the collectives
#: entered and left, seconds in the current collective and since the last step, Flight Recorder.
RANK_BEATS = ("steps", "entered", "left", "in_collective_s", "since_step_s", "fr_seq")


def beat_tag(name: str) -> str:
    """Scalar tag of the heartbeat ``name`` (one of ``RANK_BEATS``): ``rank/<name>.value``."""
    if name not in RANK_BEATS:
        raise ValueError(f"unknown heartbeat {name!r}; expected one of {RANK_BEATS}")
    return stat_tag(RANK_PREFIX + name, "value")
