"""What the reading side computes from a logdir: the job's health, and tables for notebooks.

Shared by the notebooks, the plugin, the exports and the command line. One module per job:

- ``grid``: ``RankGrid``, the ranks x windows grid of rank health built once (numpy), whose
  scores and stalls (``scoring``) every reader of rank health reads;
- ``health``: ``job_report(logdir)``, which assembles the one ``JobReport`` of a job's health
  (``report``: attempts, root causes, ranks, stragglers, stalls, step times; its JSON and its
  text, in the words of ``report_text``) that ``tb-monitor report`` and the notebook show; its
  ``rank_report`` part reads the ranks' own records;
- ``jobs``: the jobs a logdir holds (torchelastic run id and start, so two jobs that share a run
  id stay apart), and each job's own grid; ``step_times``: the ranks' step-time curves;
- ``attempts``: every attempt of an elastic job and why it ended (plain Python), reading one
  rank's failure with ``root_cause``; ``restart_marks``: the timeline drawn with the ranks a
  restart stopped; ``sources``: what a logdir or a DataFrame holds;
- ``restarts`` (one row per attempt: why it ended) and ``stragglers`` (slow ranks, and the rank
  a stalled job waits for) as pandas DataFrames.

pandas is imported only when a DataFrame is made (the ``pandas`` extra). The tables take a
logdir (a path or an ``s3://`` / ``gs://`` URL) or the DataFrame ``tb_monitor.read_events``
returns.
"""

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.health import JobReport, job_report
from tb_monitor.analysis.restarts import restart_summary, restarts
from tb_monitor.analysis.stragglers import rank_windows, stalls, stragglers

__all__ = [
    "JobReport",
    "RankGrid",
    "job_report",
    "rank_windows",
    "restart_summary",
    "restarts",
    "stalls",
    "stragglers",
]
