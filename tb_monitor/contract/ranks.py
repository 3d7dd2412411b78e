"""Rank-health tags: what ``rank/health.py`` writes and ``analysis/grid.py`` reads.

Stats in each worker's run (see ``runs.rank_of``), their scalars tagged
``stat_tag(name, aggregation)``.
"""

from __future__ import annotations

from tb_monitor.contract.tags import stat_tag

__all__ = [
    "NODE_STALLED",
    "NODE_STALLED_GROUP",
    "RANK_BEATS",
    "RANK_COLLECTIVE",
    "RANK_CPU_RUN",
    "RANK_CPU_THROTTLED",
    "RANK_CPU_WAIT",
    "RANK_GRAD_WAIT",
    "RANK_PREFIX",
    "RANK_STEP",
    "RANK_STEP_QUANTILES",
    "RANK_WINDOW_S",
    "STACKS_DIR_ENV",
    "STACKS_SIGNAL_ENV",
    "beat_tag",
]

RANK_PREFIX = "rank/"
#: The torchelastic metric (in group NODE_STALLED_GROUP) an agent under ``tb-monitor run`` puts
#: at each look while its workers are stalled by the stall rule: seconds since their newest
#: step, and 0 once when they step again. Prometheus serves it as
#: ``tb_monitor_metric_node_stalled_seconds``, what operators' stall alert reads.
NODE_STALLED = "node.stalled_s"
NODE_STALLED_GROUP = "tb_monitor"
#: Seconds between step boundaries (COUNT, SUM, MIN, MAX) and inside collectives (COUNT, SUM,
#: MAX), one window every ``TB_MONITOR_RANK_WINDOW_S`` (default RANK_WINDOW_S).
RANK_STEP = RANK_PREFIX + "step_s"
RANK_COLLECTIVE = RANK_PREFIX + "collective_s"
RANK_WINDOW_S = 10.0
#: Seconds each backward of a DistributedDataParallel module waited, once its own gradients were
#: ready, for DDP's gradient all-reduces (COUNT, SUM, MAX): wait, like RANK_COLLECTIVE.
RANK_GRAD_WAIT = RANK_PREFIX + "grad_wait_s"
#: Per window, quantiles of the step times, logged as aggregations of RANK_STEP
#: (``rank/step_s.p50``, ``rank/step_s.p95``): (aggregation name, quantile).
RANK_STEP_QUANTILES = (("p50", 0.5), ("p95", 0.95))
#: Per window, logged as SUM aggregations with the step window: seconds the rank's threads
#: waited for a CPU while runnable, ran on one, and its cgroup was throttled (where readable):
#: what names a rank starved of CPU (``rank/cpu_wait.py``).
RANK_CPU_WAIT = RANK_PREFIX + "cpu_wait_s"
RANK_CPU_RUN = RANK_PREFIX + "cpu_run_s"
RANK_CPU_THROTTLED = RANK_PREFIX + "cpu_throttled_s"
#: Heartbeat Stats ``rank/<name>`` (VALUE; the newest counts): steps so far, the collectives
#: entered and left, seconds in the current collective and since the last step, Flight Recorder;
#: seconds since the last progress of any kind (a step, a batch, a collective left, a save) and
#: inside the current checkpoint save (older logdirs have neither: the stall rule then counts
#: steps alone).
RANK_BEATS = (
    "steps",
    "entered",
    "left",
    "in_collective_s",
    "since_step_s",
    "fr_seq",
    "since_progress_s",
    "in_save_s",
)

#: The directory where each worker of ``tb-monitor run`` dumps its stacks (``<pid>.stacks``),
#: and the signal that asks it to (``tb_monitor.rank.stacks``).
STACKS_DIR_ENV = "TB_MONITOR_STACKS_DIR"
STACKS_SIGNAL_ENV = "TB_MONITOR_STACKS_SIGNAL"


def beat_tag(name: str) -> str:
    """Scalar tag of the heartbeat ``name`` (one of ``RANK_BEATS``): ``rank/<name>.value``."""
    if name not in RANK_BEATS:
        raise ValueError(f"unknown heartbeat {name!r}; expected one of {RANK_BEATS}")
    return stat_tag(RANK_PREFIX + name, "value")
