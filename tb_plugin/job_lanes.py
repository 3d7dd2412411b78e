"""Each job on its own lanes where several jobs share a torchelastic run id.

``tb_monitor.analysis.jobs`` tells apart jobs that share a run id (torchrun's default
``"none"``) and names each ``<run id>@HH:MM:SS``. A lane is decoded once per record, by its run
id, and one record may stand for events of both jobs (a keep-alive payload repeats), so the
timeline store moves the events, not the records: each event of a shared run id goes to a twin
of its record on its job's lane (one twin per record and job), as the columns are sorted.
Logdirs with one job per run id take none of this (the common case costs one set lookup).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tb_monitor import timeline
from tb_monitor.analysis.jobs import JobSpan, job_of
from tb_plugin.interned import Records, column

__all__ = ["SharedRunIds", "intern_job_lanes", "job_lanes", "shared_run_ids"]

#: Per run id several jobs share: its jobs' starts and ids, in time order.
SharedRunIds = dict[str, tuple[np.ndarray, list[str]]]
#: Interns a lane (a job's copy of lane ``from_id``) and gives its id.
LaneOf = Callable[[timeline.Lane, int], int]


def shared_run_ids(
    spans: Sequence[JobSpan],
    given: Sequence[Mapping[str, Any]],
    separated: Sequence[Mapping[str, Any]],
) -> SharedRunIds:
    """The run ids ``jobs.separate_jobs`` split (``given`` its input, ``separated`` its
    output), with each of their jobs' starts and ids."""
    if not any("@" in span.job for span in spans):  # one job per run id: no pass over rows
        return {}
    of: dict[str, str] = {}  # a job told apart -> its run id
    for old, new in zip(given, separated, strict=True):
        if old is not new:
            of[job_of(new)] = job_of(old)
    by_run: dict[str, list[tuple[float, str]]] = {}
    for span in spans:
        if span.job in of:
            by_run.setdefault(of[span.job], []).append((span.start, span.job))
    return {
        run_id: (np.asarray([t for t, _ in sorted(jobs)]), [job for _, job in sorted(jobs)])
        for run_id, jobs in by_run.items()
    }


def intern_job_lanes(shared: SharedRunIds, lanes: Sequence[timeline.Lane], lane_of: LaneOf) -> None:
    """Every lane of a shared run id copied into each of its jobs' groups, so the intervals
    drawn from the separated records find their lanes."""
    for lane_id, lane in enumerate(list(lanes)):  # a copy: ``lane_of`` adds lanes
        for job in shared.get(lane.group, ((), []))[1]:
            lane_of(replace(lane, group=job), lane_id)


def job_lanes(
    t: np.ndarray,
    rec: np.ndarray,
    shared: SharedRunIds,
    records: Records,
    lanes: Sequence[timeline.Lane],
    lane_of: LaneOf,
) -> np.ndarray:
    """``rec`` (each event's record) with every event of a shared run id on its job's lanes:
    the job of that run id that started last at or before it (the first, before any), as
    ``jobs.separate_jobs`` assigns records."""
    event_lane = column(records.columns["lane"], np.int64)[rec]
    out = rec.copy()
    for run_id, (starts, jobs) in shared.items():
        ours = [i for i, lane in enumerate(lanes) if lane.group == run_id]
        events = np.flatnonzero(np.isin(event_lane, ours))
        which = np.maximum(np.searchsorted(starts, t[events], side="right") - 1, 0)
        key = rec[events].astype(np.int64) * len(jobs) + which
        pairs, inverse = np.unique(key, return_inverse=True)
        twins = []
        for pair in pairs.tolist():
            r, job = divmod(pair, len(jobs))
            lane_id = records.get("lane", r)
            moved = lane_of(replace(lanes[lane_id], group=jobs[job]), lane_id)
            twins.append(records.twin(r, "lane", moved))
        out[events] = np.asarray(twins, dtype=out.dtype)[inverse.reshape(-1)]
    return out
