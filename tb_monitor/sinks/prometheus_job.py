"""The job's restarts and state on ``/metrics``, worked out when scraped.

``JobReport`` (``tb_monitor.analysis.health``: what ``tb-monitor report`` prints) reads them from
a job's timeline records; a sink that kept every record would grow all day, since most of a long
job's records are rendezvous keep-alives. ``JobRecords`` keeps only the records that can change
the report's restarts or state; ``JobCollector``, a prometheus_client collector, hands the kept
records to ``report_of`` when ``/metrics`` is scraped, and again only once more have come. What is
kept grows with the job's attempts and ranks, never with its length.

Which records can change the answer follows from how the report reads them:

- attempts are the intervals of each rank from a worker's START to its end state (FAILED makes the
  attempt fail), numbered by the rendezvous round its agent joined last ("has joined round N");
- a job ends with its agents' verdicts, and a record that opens a rendezvous after a verdict
  starts another job (``analysis.jobs``);
- any other record (keep-alives, syncs, an agent's progress, what it sees of a rank) shows only
  that its job and agent exist and when the job began: of those, the earliest of each kind of
  each job is kept.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from tb_monitor import contract
from tb_monitor.timeline import END_STATES

if TYPE_CHECKING:
    from tb_monitor.analysis.health import JobReport

__all__ = [
    "AGENT_EVENT",
    "JOB_STATES",
    "JobCollector",
    "JobRecords",
    "changes_the_job",
    "job_state",
]

#: The job states ``tb_monitor_job_state`` tells apart.
JOB_STATES = ("rendezvous", "running", "failed", "terminated", "succeeded")
#: Names of torchelastic's agent records (its own and its workers'): the first one seen makes
#: the job's series appear.
AGENT_EVENT = "torchelastic.worker.status."

_VERDICTS = frozenset(AGENT_EVENT + state for state in ("SUCCEEDED", "FAILED", "TERMINATED"))
_ATTEMPT_STATES = END_STATES | {"START"}
#: What the report reads of a record's metadata: its restart count and how a signal ended it.
_METADATA_KEYS = ("agent_restarts", "restart_count", "exit_code", "signal")
_log = logging.getLogger("tb_monitor")


def job_state(report: JobReport) -> str:
    """The job's state in ``report``: ``succeeded``, ``failed`` or ``terminated`` (a signal to
    its agent: a preemption) once it has ended (its verdict), ``running`` while an attempt runs,
    else ``rendezvous`` (before the first attempt, and between an attempt that ended and the
    restart)."""
    if report.finished:
        return report.status if report.status in ("failed", "terminated") else "succeeded"
    running = any(job.status == "RUNNING" for job in report.jobs)
    return "running" if running else "rendezvous"


def changes_the_job(kind: str, fields: Mapping[str, Any]) -> bool:
    """Whether a decoded timeline record can change its job's restarts or state: a rank's
    attempt starting or ending, an agent joining a round or opening a rendezvous, a verdict."""
    state = fields.get("state")
    if kind == contract.WORKER:
        return state in _ATTEMPT_STATES
    if kind == contract.RENDEZVOUS:
        message = str(fields.get("message") or "")
        if state == "INIT" or "attempts to join the next round" in message:
            return True  # after a verdict: another job begins
        return state != "FAILED" and "has joined round" in message  # numbers the attempts
    return fields.get("source") == "AGENT" and fields.get("name") in _VERDICTS


class JobRecords:
    """The timeline records of one agent's run that can change its job's restarts and state.

    ``add`` takes every record as it comes (on torchelastic's thread); ``rows`` gives the kept
    ones as the report reads them, in the order they came, and ``version`` says whether any
    changed since.
    """

    def __init__(self, run: str) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._arrived = 0  # records taken: orders the kept ones as they came
        self._kept: list[tuple[int, dict[str, Any]]] = []
        # Per (run id, kind), the earliest of the records that change nothing else: its job's
        # start, and that the job has an agent. Those left out could matter only by a time
        # equal, to the last bit, to that of a record opening a later job of the same run.
        self._earliest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        self.version = 0  # bumped whenever what ``rows`` gives changes
        self.first_agent_event: float | None = None  # the wall time of the first one seen

    def add(self, kind: str, wall_time: float, fields: Mapping[str, Any]) -> None:
        """Take one record: keep it, or only what it says about its job's start."""
        if self.first_agent_event is None and str(fields.get("name") or "").startswith(AGENT_EVENT):
            self.first_agent_event = wall_time
        kept = changes_the_job(kind, fields)
        key = (str(fields.get("run_id") or ""), kind)
        with self._lock:
            self._arrived += 1
            if kept:
                self._kept.append((self._arrived, self._row(kind, wall_time, fields)))
            else:
                earliest = self._earliest.get(key)
                if earliest is not None and not wall_time < earliest[1]["wall_time"]:
                    return  # a keep-alive, a sync: most of a long job's records
                self._earliest[key] = (self._arrived, self._row(kind, wall_time, fields))
            self.version += 1

    def rows(self) -> tuple[int, list[dict[str, Any]]]:
        """The version and the kept records, in the order they came (the report sorts them by
        time; records of the same time stay in that order, as they would among all of them)."""
        with self._lock:
            version = self.version
            kept = [*self._kept, *self._earliest.values()]
        kept.sort(key=itemgetter(0))
        return version, [row for _, row in kept]

    def __len__(self) -> int:
        """How many records are kept."""
        with self._lock:
            return len(self._kept) + len(self._earliest)

    def _row(self, kind: str, wall_time: float, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The record as the report reads it, less what only its words would use (tracebacks,
        the agent's other metadata)."""
        row = {name: fields.get(name) for name in contract.FIELDS}
        metadata = fields.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        row["metadata"] = {key: metadata[key] for key in _METADATA_KEYS if key in metadata}
        row["error_trace"] = None
        row.update(kind=kind, run=self._run, wall_time=wall_time)
        return row


class JobCollector:
    """A prometheus_client collector of the job's ``<prefix>restarts_total`` (a counter: it
    only grows) and ``<prefix>job_state{state=...}`` (1 for the current one of ``JOB_STATES``),
    with ``labels``; nothing before the first of torchelastic's agent records.

        records = JobRecords("agent-node-0")
        registry.register(JobCollector(records, "tb_monitor_", {"node": "node-0"}))
    """

    def __init__(self, records: JobRecords, prefix: str, labels: Mapping[str, str]) -> None:
        self._records = records
        self._restarts_name, self._state_name = prefix + "restarts", prefix + "job_state"
        self._labels = dict(labels)
        self._lock = threading.Lock()  # one scrape works it out, concurrent ones wait for it
        self._version = -1
        self._restarts, self._state = 0, JOB_STATES[0]
        self._warned = False  # a failure is reported once

    def describe(self) -> Iterator[Any]:
        """The two families, without samples: the registry refuses another of these names."""
        yield from self._families(None)

    def collect(self) -> Iterator[Any]:
        """The two families as the kept records say now."""
        created = self._records.first_agent_event
        if created is not None:
            yield from self._families(created)

    def answer(self) -> tuple[int, str]:
        """The restarts (the most the report has counted) and the job's state, worked out
        again only where records came since the last time."""
        with self._lock:
            if self._records.version != self._version:
                self._work_out()
            return self._restarts, self._state

    def _work_out(self) -> None:
        from tb_monitor.analysis.health import report_of  # numpy: only when scraped

        self._version, rows = self._records.rows()
        try:
            report = report_of("", rows)
        except Exception:  # a record the report cannot read must not take /metrics down
            if not self._warned:
                self._warned = True
                _log.warning(
                    "tb_monitor: the job's restarts and state on /metrics stay as they were: "
                    "its timeline records could not be read",
                    exc_info=True,
                )
            return
        restarts = sum(job.restarts for job in report.jobs)
        self._restarts, self._state = max(self._restarts, restarts), job_state(report)

    def _families(self, created: float | None) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        names, values = list(self._labels), list(self._labels.values())
        help_text = "Times the job's workers were restarted."
        restarts = CounterMetricFamily(self._restarts_name, help_text, labels=names)
        states = GaugeMetricFamily(
            self._state_name, "1 for the job's current state.", labels=[*names, "state"]
        )
        if created is not None:
            count, current = self.answer()
            restarts.add_metric(values, count, created=created if math.isfinite(created) else None)
            for state in JOB_STATES:
                states.add_metric([*values, state], float(state == current))
        yield restarts
        yield states
