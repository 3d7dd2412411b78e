"""Synthetic logdirs of torchelastic jobs, for the plugin's tests, benchmarks and demos.

- ``generate_job(...)``: a whole job, simulated node by node and attempt by attempt, producing
  the records a real ``torchrun`` job leaves in a logdir: the agents' rendezvous events (torch's
  ``RdzvEvent`` JSON with the messages ``dynamic_rendezvous`` writes), the agents'
  ``torchelastic.worker.status.*`` events (torch's ``Event`` JSON with its nested metadata
  string) and the workers' ``torch.monitor``-style events. Restarts, a failing worker with its
  traceback and a straggler node are part of the story; keep-alive heartbeats fill the job up
  to the number of events asked for.
- ``generate_rank_windows(...)``: the per-rank step and collective windows and heartbeats that
  ``init(torch=True)`` records (``tb_monitor.rank.health``), for any number of
  ranks and hours, with chosen slow ranks: the Ranks view's tests and benchmark.

- ``join_round(...)``, ``keep_alive_round(...)``: the records torch's c10d rendezvous makes for
  a node joining a round and for one keep-alive (``generate_job(keep_alive_rounds=True)``
  writes the whole round for every keep-alive).

All are deterministic for a seed. ``tb_monitor.testing`` re-exports the two generators.

    >>> job = generate_job("runs/demo", nodes=8, workers_per_node=2, events=5_000)
    >>> job.total_events
    5000
"""

from __future__ import annotations

from tb_monitor.synthetic._plan import DEFAULT_START
from tb_monitor.synthetic.jobs import SyntheticJob, generate_job, job_records
from tb_monitor.synthetic.ranks import (
    generate_rank_windows,
    rank_heartbeat_scalars,
    rank_window_scalars,
)
from tb_monitor.synthetic.rendezvous import KEEP_ALIVE_NAMES, join_round, keep_alive_round

__all__ = [
    "DEFAULT_START",
    "KEEP_ALIVE_NAMES",
    "SyntheticJob",
    "generate_job",
    "generate_rank_windows",
    "job_records",
    "join_round",
    "keep_alive_round",
    "rank_heartbeat_scalars",
    "rank_window_scalars",
]
