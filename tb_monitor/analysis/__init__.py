"""What the reading side computes from a logdir, as plain functions returning DataFrames.

Shared by the notebooks, the plugin, the exports and the command line. Each analysis is one
module: ``restarts`` (one row per attempt of an elastic job). pandas is imported only when an
analysis runs (the ``pandas`` extra).
"""

from tb_monitor.analysis.restarts import restart_summary

__all__ = ["restart_summary"]
