"""The jobs, attempts and intervals the timeline draws, as the restart analysis finds them.

The attempts are those of the job's ``JobReport`` (``tb_monitor.analysis.attempts``: the report
and the notebook show the same), the intervals ``timeline.spans``' with restarts marked, and
jobs that share a run id are told apart (``analysis.jobs``) and drawn on lanes of their own
(:mod:`tb_plugin.job_lanes`). It is Python over every event that may open or close an
interval, so while a first read goes on, the sorts that show its progress reuse the last
analysis: it runs again once the read is done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tb_monitor import timeline
from tb_monitor.analysis.agent_views import AgentView, agent_views
from tb_monitor.analysis.attempts import Attempt, attempt_dict, attempts
from tb_monitor.analysis.captures import Capture, captures
from tb_monitor.analysis.jobs import JobSpan, job_spans, separate_jobs
from tb_monitor.analysis.restart_marks import mark_restarts
from tb_monitor.analysis.roll_call import RollCall, roll_calls
from tb_monitor.analysis.store_contact import cut_off_ranks
from tb_plugin.event_table import EventTable
from tb_plugin.job_lanes import SharedRunIds, intern_job_lanes, shared_run_ids
from tb_plugin.lanes import Lanes

__all__ = [
    "Analysed",
    "JobAnalysis",
    "attempt_payload",
    "draw_collateral_stopped",
    "lane_of_rows",
]

#: The attempts found, and the intervals drawn as columns (``lane``, ``t0``, ``t1``,
#: ``state``, ``label``, ``open``).
Analysed = tuple[list[Attempt], dict[str, np.ndarray]]


class JobAnalysis:
    """What the last analysis found: the attempts (as the payload sends them), what each
    rank's agent saw of it, the jobs, and the run ids several jobs share."""

    def __init__(self) -> None:
        #: Per attempt, ``attempt_dict`` (no traceback); a root cause also names its event id
        #: (``event``) and its lane id (``lane``).
        self.attempts: list[dict[str, Any]] = []
        self.views: dict[tuple[str, int], AgentView] = {}  # what each rank's agent saw of it
        self.calls: dict[str, RollCall] = {}  # each job's newest roll-call of its ranks' stacks
        #: (job, rank) of the nodes whose keep-alives to the rendezvous store stopped while
        #: another node's went on (``store_contact.cut_off_ranks``): a stalled job waits for them
        self.cut_off: dict[tuple[str, int], float] = {}
        self.captures: dict[str, list[Capture]] = {}  # each job's captures (tb-monitor capture)
        self.spans: list[JobSpan] = []  # the jobs, as the last analysis told them apart
        self.shared: SharedRunIds = {}  # run ids several jobs share (``job_lanes``)
        self._analysed: Analysed | None = None

    def run(self, table: EventTable, lanes: Lanes, last_time: float, reading: bool) -> Analysed:
        """The attempts and the intervals drawn (an open one runs to ``last_time``); while
        ``reading``, the last ones, once there are any. It runs on a thread beside the sort,
        which holds the store's lock meanwhile: it must not take that lock, nor change the
        records or the lanes it has (adding lanes is fine)."""
        if reading and self._analysed is not None:
            return self._analysed
        rows = separate_jobs(table.span_rows)  # jobs sharing a run id, told apart
        self.spans = job_spans(rows)
        self.shared = shared_run_ids(self.spans, table.span_rows, rows)
        intern_job_lanes(self.shared, lanes.values, lanes.job_copy)
        marks = timeline.spans(rows, lane_of_rows(table, lanes))
        found = attempts(rows, marks)  # as the report's (``report_of``), without the rest
        self.views = agent_views(table.span_rows)
        self.calls = roll_calls(table.span_rows)
        self.cut_off = cut_off_ranks(table.span_rows)
        self.captures = captures(table.span_rows)
        restarts = mark_restarts(marks, found)
        self._analysed = (found, _intervals(restarts, last_time, table, lanes))
        self.attempts = [attempt_payload(a, lanes) for a in found]
        return self._analysed


def attempt_payload(attempt: Attempt, lanes: Lanes) -> dict[str, Any]:
    """An attempt as the payload sends it: its root cause's event and lane by id."""
    out = attempt_dict(attempt, traceback=False)
    cause = attempt.root_cause
    if cause is not None and cause.record is not None:
        out["root_cause"]["event"] = int(cause.record["_id"])
        out["root_cause"]["lane"] = lanes.drawn_id(timeline.lane_of(cause.record))
    return out


def lane_of_rows(table: EventTable, lanes: Lanes) -> Callable[[Mapping[str, Any]], timeline.Lane]:
    """``timeline.lane_of`` for the table's span rows, as their records' lanes interned
    already; a row made since (a job told apart: its own ``run_id``) has its lane made."""
    values, record_lane = lanes.values, table.records.columns["lane"]
    known = {
        id(row): values[record_lane[rec]]
        for row, rec in zip(table.span_rows, table.span_recs, strict=True)
    }
    return lambda row: known.get(id(row)) or timeline.lane_of(row)


def draw_collateral_stopped(
    found: list[Attempt], ids: np.ndarray, drawn: np.ndarray, table: EventTable
) -> tuple[np.ndarray, np.ndarray]:
    """Draw collateral ranks' ending events (``ids``: the sorted events' ids, ``drawn``: their
    records as drawn) as stopped by the restart (or when the job ended), not as failures: each
    takes its record's twin in that state, in ``drawn`` itself (a copy would cost 4 bytes an
    event). Their positions and former records."""
    stopped = {row["_id"]: a.collateral_state for a in found for row in a.collateral_records}
    wanted = np.zeros(len(ids), dtype=bool)  # event ids are 0 .. len(ids) - 1
    wanted[np.fromiter(stopped, dtype=np.int64, count=len(stopped))] = True
    where = np.flatnonzero(wanted[ids])
    before = drawn[where]
    states = [table.states(stopped[event]) for event in ids[where].tolist()]
    drawn[where] = table.records.twins_of(before, "state", np.asarray(states, dtype=np.int64))
    return where, before


def _intervals(
    marks: list[timeline.Span], last_time: float, table: EventTable, lanes: Lanes
) -> dict[str, np.ndarray]:
    """Worker attempts and rendezvous rounds, as tb_monitor.timeline.spans finds them, and
    collateral ranks' attempts stopped by the restart (``mark_restarts``), as columns; their
    states and labels interned in ``table``."""
    found = [span for span in marks if span.end is not None]
    return {
        "lane": np.asarray([lanes.drawn_id(s.lane) for s in found], dtype=np.int64),
        "t0": np.asarray([s.begin for s in found], dtype=np.float64),
        # An open interval runs to the newest record of the job, not only of its own kind.
        "t1": np.asarray([last_time if s.open else s.end for s in found], dtype=np.float64),
        "state": np.asarray([table.states(s.state or "") for s in found], dtype=np.int64),
        "label": np.asarray([table.labels(s.label) for s in found], dtype=np.int64),
        "open": np.asarray([s.open for s in found], dtype=bool),
    }
