"""What the reading side computes from a logdir, as plain functions returning DataFrames.

Shared by the notebooks, the plugin, the exports and the command line. Each analysis is one
module: ``restarts`` (one row per attempt of an elastic job: why it ended, its root cause and
the ranks that went down with it) and ``stragglers`` (slow ranks, and the rank a stalled job
waits for, from per-rank step and collective timing). pandas is imported only when an analysis runs (the ``pandas``
extra); the module's plain-Python core (``tb_monitor.analysis.restarts.attempts``) serves the
Timeline plugin and ``tb-monitor report`` without it.

Each function takes a logdir (a path or an ``s3://`` / ``gs://`` URL) or the DataFrame
``tb_monitor.read_events`` returns.
"""

from tb_monitor.analysis.restarts import restart_summary, restarts
from tb_monitor.analysis.stragglers import rank_windows, stalls, stragglers

__all__ = ["rank_windows", "restart_summary", "restarts", "stalls", "stragglers"]
