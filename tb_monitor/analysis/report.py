"""The job's health as one document: ``JobReport`` (and each job's ``JobHealth``), its JSON and
its text. ``tb_monitor.analysis.health`` assembles it from a logdir or from the records a reader
holds; ``str(report)`` is what ``tb-monitor report`` prints (in the words of
``tb_monitor.analysis.report_text``) and ``_repr_html_`` what a notebook shows.
``JobReport.to_json()`` is the ``--json`` document, a plain dict:

JSON schema (``schema`` is ``SCHEMA_VERSION``, bumped on an incompatible change; a new key is
not one; times are epoch seconds)::

    {
      "schema": 1,
      "logdir": "runs/exp7",
      "status": "succeeded" | "failed" | "terminated" | "hung" | "running" | "empty",
                                         # "hung": a job hung where its attempt before hung
                                         # and was not restarted (exit code 3)
                                         # report --follow: also "waiting", before the logdir
                                         # exists; "terminated": a signal to its agent ended a job
      "exit_code": 0 | 1,                # 1: a job's last attempt failed, or a job is stalled;
                                         # terminated: torchrun's exit code (1)
      "ranks": null | {                  # rank health of the logdir's one job (or of a logdir
                                         # without job records); null when none was recorded,
                                         # or when the logdir holds several jobs: see jobs[].ranks
        "count": 4, "windows": 36, "window_s": 10.0,
        "stragglers": [                  # flagged ranks, slowest first
          {"rank": 1, "relative": 1.5, "individual": 1.02, "windows_over": 12, "flagged": true,
           "starved": 0.12,              # share of its runnable time waiting for a CPU | null
           "starved_over": 0,            # longest run of windows starved of CPU
           "cause": "compute" | "cpu",   # why flagged (null in "slowest" when not flagged)
           "reason": "compute x1.50 the median rank's"
                   | "starved of CPU: 88% of its time waiting for a CPU (the median rank 20%)"}
        ],
        "slowest": [...],                # the 3 highest relative scores, same fields
        "stalled": true,                 # a rank is stalled and not every job has ended
        "stalls": [                      # the rank the others wait for first
          {"rank": 3, "since_step_s": 45.0, "entered": 5, "left": 5,
           "in_collective": false, "fr_seq": null, "waited_for": true,
           "silent": true,               # its heartbeats stopped while the others' went on
           "cut_off": false,             # its node lost the rendezvous store, another kept it
           "agent": null | {             # what its agent saw (analysis.agent_views)
             "seen": "stopped" | "uninterruptible sleep" | "alive but silent" | null,
             "process_state": "T", "pid": 4242, "host": "node-a", "seen_at": 1.7e9,
             "stacks": "Thread 0x... (most recent call first): ..." | null,
             "stacks_at": 1.7e9 | null, "stacks_reason": "dumped after it went silent" | null,
             "stacks_note": "stopped: no stacks (...)" | null}}
        ],
        "waited_for": [3],
        "roll_call": null | {            # while a stall is named: every rank's stacks, taken
                                         # once per stall by the agents (analysis.roll_call)
          "at": 1.7e9, "stalled_since": 1.7e9 | null,
          "summary": "rank 1 in `sleep` at train.py:40; ranks 0, 2, 3 in `all_reduce` at ...",
          "groups": [                    # the odd one out (the smallest group) first
            {"ranks": [1], "function": "sleep" | null, "where": "train.py:40" | null,
             "method": "py-spy --native" | "py-spy" | "faulthandler",
             "held": "stopped" | "uninterruptible sleep" | null,   # /proc's state then
             "main_thread": [{"name": "all_reduce", "file": "...", "line": 42,
                              "native": false}],   # the first rank's, innermost first
             "stack": "py-spy --native: every thread, innermost frame first ..."}
          ]
        },
        "step_times": [                  # per rank, the median over its windows, by rank
          {"rank": 0, "windows": 36, "step_s": 0.05, "collective_s": 0.01, "compute_s": 0.04}
        ]
      },
      "jobs": [
        {
          "job": "<run id>",
          "status": "<TERMINATED, or the last attempt's outcome: SUCCEEDED, FAILED, ...>",
          "terminated": null | {"signal": "SIGTERM", "exit_code": 1, "time": 1.7e9,
                                "stop_began": 1.7e9 | null},  # the agent began stopping
                                # its workers: an attempt running then is TERMINATED
          "finished": true,           # every agent of the job recorded its verdict (or was
                                      # lost with its node), or one recorded FAILED
          "attempts_total": 2,
          "restarts": 1,
          "time_lost_s": 2.7,         # summed over the attempts a restart followed
          "waiting_ranks": [0, 1],    # a failed job's ranks no record ended while it runs:
                                      # their agent went on, they wait for the failed rank
          "ranks": null | {...},      # this job's rank health, as the top-level "ranks"
          "attempts": [
            {
              "job": "...", "attempt": 0, "start": 1.7e9, "end": 1.7e9, "duration_s": 6.0,
              "outcome": "FAILED",    # SUCCEEDED, RUNNING, TERMINATED (cut short by the
                                      # signal to its agent: its failures then collateral),
                                      # HUNG (its agent ended it: --restart-hung-after; the
                                      # root cause the roll-call's odd rank, source "hung")
              "root_cause": null | {
                "rank": 2, "host": "node-a", "time": 1.7e9,
                "reason": "ValueError: bad batch",   # one line: also "killed by SIGKILL"
                "exception": "ValueError" | null, "message": "bad batch" | null,
                "exit_code": 1 | null, "signal": "SIGKILL" | null,
                "source": "worker" | "error_file" | "agent" | "vanished" | "cut_off",
                "traceback": "Traceback (most recent call last): ..." | null,
                "ranks": [2],         # every rank it names: a lost node's ("vanished") all
                                      # of its ranks, "rank" the lowest; reason "node
                                      # node-a lost: ranks 2, 3", time when a survivor first
                                      # recorded the loss
                "node": "node-a (pid 41)" | null,  # a lost node, as in "nodes"
                "seen_by": "rank 0" | "the agent on node-b (pid 42)" | null  # who dated it
                "cut_off_from": [0, 1],  # a partition ("cut_off"): "ranks" lost the
                                      # rendezvous store these ranks' side kept; else []
              },
              "collateral_ranks": [0, 1, 3], "failed_ranks": [0, 1, 2, 3], "ranks": [0, 1, 2, 3],
              "time_lost_s": 2.7 | null,  # root cause -> next attempt; null: none followed
              "restarted": true,          # a later attempt followed
              "collateral_state": "STOPPED_BY_RESTART" | "STOPPED_AT_END",
              "nodes": ["node-a (pid 41)", ...], "nodes_joined": [], "nodes_left": [],
              "rendezvous_s": 1.1
            }
          ],
          "captures": [               # tb-monitor capture: every rank at once, oldest first
            {"capture": "20260101-120000-ab12cd", "reason": "on request", "seconds": 5.0,
             "at": 1.7e9,
             "ranks": [{"rank": 0, "errors": {},   # kind -> why it is missing
                        "files": {"profile": "<run id>/captures/<id>/rank-0/profile.json",
                                  "stacks": "...", "flight_recorder": "...",
                                  "wait_counters": "..."}}]}   # paths in the logdir
          ]
        }
      ],
      "flight_recorder": [            # per process group, from Flight Recorder dumps imported
                                      # into the logdir (tb-monitor import-fr); [] without
        {"group": "1", "desc": "tp", "ranks": [2, 3],
         "newest": {"2": 5, "3": 4},  # per member with a dump, its newest collective
         "lagging": [3],              # members behind the group's newest collective
         "mismatches": [{"seq": 2, "collective": "gloo:all_reduce",
                         "kind": "type" | "size" | "dtype", "ranks": [3], "detail": "..."}],
         "no_dump": [],               # members whose dump is missing
         "note": null | "mismatches not checked: ..."}
      ]
    }
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from tb_monitor.analysis.attempts import Attempt, Termination, attempt_dict
from tb_monitor.analysis.captures import Capture
from tb_monitor.analysis.flight_recorder import GroupVerdict
from tb_monitor.analysis.fr_text import fr_lines
from tb_monitor.analysis.hung import HUNG
from tb_monitor.analysis.rank_report import RankHealth
from tb_monitor.analysis.report_text import (
    VERDICTS,
    attempt_lines,
    duration,
    plural,
    ranks_lines,
    stalled_line,
    verdict_line,
    visible,
)
from tb_monitor.analysis.root_cause import is_unexplained

__all__ = ["SCHEMA_VERSION", "JobHealth", "JobReport", "html_text", "render"]

#: The version of ``JobReport.to_json()``'s document: bumped on an incompatible change.
SCHEMA_VERSION = 1
_EXIT_OK, _EXIT_FAILED = 0, 1
_EXIT_HUNG = 3  # launcher.hung.HUNG_EXIT_CODE: the reading side does not import the launcher


@dataclass(frozen=True)
class JobHealth:
    """One job of the logdir: its attempts in order, whether it ended (every agent recorded its
    end or was lost with its node), and its ranks' health (None where they recorded none)."""

    job: str
    attempts: tuple[Attempt, ...]
    finished: bool
    ranks: RankHealth | None = None
    terminated: Termination | None = None  # a signal to its agent ended it
    stop_began: float | None = None  # when an agent of it last began stopping its workers
    captures: tuple[Capture, ...] = ()  # every rank captured at once (tb-monitor capture)

    @property
    def stalled(self) -> bool:
        """A rank of it is stalled while it runs."""
        return self.ranks is not None and bool(self.ranks.stalls) and not self.finished

    @property
    def status(self) -> str:
        """TERMINATED when a signal to its agent ended it (its ranks' failures that followed are
        collateral), else the last attempt's outcome: SUCCEEDED, FAILED, RUNNING, ..."""
        return "TERMINATED" if self.terminated else self.attempts[-1].outcome

    @property
    def restarts(self) -> int:
        return len(self.attempts) - 1

    @property
    def waiting_ranks(self) -> tuple[int, ...]:
        """The ranks of a failed last attempt that no record ended, while the job runs: their
        agent went on (torchelastic's agent that holds the rendezvous store learns nothing of a
        host that failed before training), so they wait for the failed rank until ended. None
        while the only failure known may be the echo of another (a lost peer, a bare exit code
        just read): the rank it lost has yet to be recorded (its agent's record comes later), and
        is a suspect, not a rank that waits; nor those whose agent was not heard since the root
        cause (``Attempt.unheard_ranks``: gone with their node, or between keep-alives)."""
        last = self.attempts[-1]
        if self.finished or last.root_cause is None or is_unexplained(last.root_cause):
            return ()
        ended = {row.get("rank") for row in last.collateral_records} | set(last.unheard_ranks)
        return tuple(rank for rank in last.collateral_ranks if rank not in ended)

    @property
    def time_lost_s(self) -> float:
        """Summed over the attempts a restart followed."""
        return sum(a.time_lost_s or 0.0 for a in self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "finished": self.finished,
            "attempts_total": len(self.attempts),
            "restarts": self.restarts,
            "time_lost_s": self.time_lost_s,
            "terminated": None if self.terminated is None else asdict(self.terminated),
            "ranks": None if self.ranks is None else _ranks_json(self.ranks, self.stalled),
            "attempts": [attempt_dict(a) for a in self.attempts],
            "waiting_ranks": list(self.waiting_ranks),
            "captures": [capture.to_json() for capture in self.captures],
        }


@dataclass(frozen=True)
class JobReport:
    """The health of the jobs in one logdir: their attempts, and their ranks where recorded."""

    logdir: str
    jobs: tuple[JobHealth, ...]
    ranks: RankHealth | None  # None where no rank recorded its health
    #: Per process group, the Flight Recorder's verdict, where dumps were imported into the
    #: logdir (``tb-monitor import-fr``); empty otherwise.
    flight_recorder: tuple[GroupVerdict, ...] = ()

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every job's attempts, by job and attempt (``tb_monitor.analysis.attempts.attempts``)."""
        return tuple(attempt for job in self.jobs for attempt in job.attempts)

    @property
    def finished(self) -> bool:
        """Every job has ended (and there is at least one)."""
        return bool(self.jobs) and all(job.finished for job in self.jobs)

    @property
    def status(self) -> str:
        """``empty``, ``hung`` (a job hung where its attempt before hung, and its agent gave
        up), ``failed`` (a job's last attempt failed), ``terminated`` (a signal to its agent
        ended a job: a preemption), ``succeeded`` or ``running``."""
        if not self.jobs:
            return "empty"
        if any(job.status == HUNG and job.finished for job in self.jobs):
            return "hung"
        if any(job.status == "FAILED" for job in self.jobs):
            return "failed"
        if any(job.terminated for job in self.jobs):
            return "terminated"
        return "succeeded" if self.finished else "running"

    @property
    def stalled(self) -> bool:
        """A rank is stalled while its job runs (a job that has ended lists no stall)."""
        if self.jobs:
            return any(job.stalled for job in self.jobs)
        return self.ranks is not None and bool(self.ranks.stalls)

    def pick(self, job: str) -> JobReport:
        """The report of one job: ``job`` is its id, or its run id (every job of that run id).
        A ValueError names the jobs there are when none matches."""
        ours = tuple(j for j in self.jobs if job in (j.job, j.job.split("@", 1)[0]))
        if not ours:
            there = ", ".join(visible(j.job) for j in self.jobs) or "none"
            raise ValueError(f"no job {job!r} in {self.logdir} (jobs: {there})")
        ranks = ours[0].ranks if len(ours) == 1 else None
        return JobReport(self.logdir, ours, ranks, self.flight_recorder)

    @property
    def exit_code(self) -> int:
        """1 when a job's last attempt failed or a rank is stalled, torchrun's (1) when a signal
        ended a job, 3 when one hung again and was not restarted (``tb-monitor run``'s), else 0."""
        if self.status == "hung":
            return _EXIT_HUNG
        if self.status == "terminated":
            codes = [job.terminated.exit_code for job in self.jobs if job.terminated]
            return next((code for code in codes if code), _EXIT_FAILED)
        return _EXIT_FAILED if self.status == "failed" or self.stalled else _EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (the module docstring gives the schema)."""
        ranks = None if self.ranks is None else _ranks_json(self.ranks, self.stalled)
        return {
            "schema": SCHEMA_VERSION,
            "logdir": self.logdir,
            "status": self.status,
            "exit_code": self.exit_code,
            "ranks": ranks,
            "jobs": [job.to_json() for job in self.jobs],
            "flight_recorder": [verdict.to_json() for verdict in self.flight_recorder],
        }

    def __str__(self) -> str:
        """The text ``tb-monitor report`` prints (``tb_monitor.analysis.report_text``)."""
        return render(self)

    def _repr_html_(self) -> str:
        """A notebook shows the same text, escaped."""
        return html_text(self)


def capture_paths(capture: Capture) -> list[tuple[int, str]]:
    """Each rank's profile (else its first file), by rank: the lines the report lists."""
    out = []
    for rank in sorted(capture.files):
        files = capture.files[rank]
        path = files.get("profile") or next(iter(files.values()), None)
        out.append((rank, path or "nothing: " + "; ".join(capture.errors.get(rank, {}).values())))
    return out


def _ranks_json(ranks: RankHealth, stalled: bool) -> dict[str, Any]:
    return {**ranks.to_json(), "stalled": stalled}


def _job_lines(job: JobHealth, several: bool) -> list[str]:
    day = datetime.fromtimestamp(job.attempts[0].start, tz=timezone.utc).strftime("%Y-%m-%d")
    state = "finished" if job.finished else "still running"
    lost = f" · {duration(job.time_lost_s)} lost to restarts" if job.restarts else ""
    lines = [
        "",
        f"job {visible(job.job)}: {job.status} · {plural(len(job.attempts), 'attempt')}, "
        f"{plural(job.restarts, 'restart')}{lost} · {state} (times UTC, {day})",
    ]
    for a, later in zip(job.attempts, [*job.attempts[1:], None], strict=True):
        lines.extend(attempt_lines(a, later, job.waiting_ranks if later is None else ()))
    for capture in job.captures:
        lines.append(f"  {visible(capture.words())}")
        lines.extend(f"    rank {r:<4} {visible(p)}" for r, p in capture_paths(capture))
    if several and job.ranks is not None:  # each job's ranks under it, scored on their own
        lines.extend(ranks_lines(job.ranks, job.stalled))
    return lines


def _verdict(doc: JobReport) -> str:
    if doc.stalled:
        if len(doc.jobs) > 1:
            stalls = [stalled_line(f"job {visible(j.job)}", j.ranks) for j in doc.jobs if j.stalled]
        else:
            stalls = [stalled_line("the job", doc.ranks)]
        if doc.status == "failed":
            stalls.append(VERDICTS["failed"])
        return "\n".join(stalls)
    return verdict_line(doc.status, [rank for job in doc.jobs for rank in job.waiting_ranks])


def render(doc: JobReport) -> str:
    """The report as the terminal text (``tb-monitor report``; ``str(doc)``)."""
    lines = [f"logdir {visible(str(doc.logdir))}"]
    if not doc.jobs:
        lines.append("  no elastic job attempts recorded yet")
    for job in doc.jobs:
        lines.extend(_job_lines(job, len(doc.jobs) > 1))
    if doc.ranks is not None and len(doc.jobs) <= 1:
        lines.extend(ranks_lines(doc.ranks, doc.stalled))
    lines.extend(fr_lines(doc.flight_recorder))
    lines.extend(["", _verdict(doc)])
    return "\n".join(lines) + "\n"


def html_text(doc: JobReport) -> str:
    """``render(doc)`` as HTML for a notebook: the text escaped in a ``<pre>``, so nothing an
    event recorded (an exception message, a host name) is ever read as markup."""
    return f"<pre>{html.escape(render(doc))}</pre>"
