"""Restarts as tables: one row per attempt of an elastic job, why it ended, for notebooks.

``restarts(source)`` answers "why did it restart" as a pandas DataFrame, ``restart_summary``
in brief. The analysis itself is plain Python elsewhere in this package, named for its job:
``sources`` (what a logdir or a DataFrame holds), ``root_cause`` (one rank's failure),
``attempts`` (every attempt and why it ended), ``restart_marks`` (the timeline drawn with the
ranks stopped by a restart) and ``health`` (the job's whole report). Their names are importable
from here too, as they were before the split. pandas is imported only for the DataFrames.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tb_monitor.analysis.attempts import (
    Attempt,
    attempt_dict,
    attempts,
    finished_jobs,
    restart_starts,
)
from tb_monitor.analysis.restart_marks import STOPPED_BY_RESTART, mark_restarts
from tb_monitor.analysis.root_cause import RootCause
from tb_monitor.analysis.sources import is_frame, timeline_rows
from tb_monitor.logdir import readers

if TYPE_CHECKING:
    import pandas

__all__ = [
    "RESTARTS_COLUMNS",
    "STOPPED_BY_RESTART",
    "SUMMARY_COLUMNS",
    "Attempt",
    "RootCause",
    "attempt_dict",
    "attempts",
    "finished_jobs",
    "mark_restarts",
    "restart_starts",
    "restart_summary",
    "restarts",
    "timeline_rows",
]

_ATTEMPT = ("job", "attempt", "start", "end", "duration_s", "outcome")  # every table starts so

SUMMARY_COLUMNS = (*_ATTEMPT, "failed_ranks", "first_failed_rank", "rendezvous_s")

RESTARTS_COLUMNS = (
    *_ATTEMPT,
    "root_cause_rank",
    "root_cause_host",
    "exception",
    "message",
    "reason",
    "traceback",
    "failed_at",
    "exit_code",
    "signal",
    "time_lost_s",
    "collateral_ranks",
    "failed_ranks",
    "ranks",
    "nodes",
    "nodes_joined",
    "nodes_left",
    "rendezvous_s",
)


def _restarts_row(a: Attempt) -> tuple:
    """RESTARTS_COLUMNS after the attempt's own."""
    cause = a.root_cause
    return (
        cause.rank if cause else None,
        cause.host if cause else None,
        cause.exception if cause else None,
        cause.message if cause else None,
        cause.reason if cause else None,
        cause.traceback if cause else None,
        cause.time if cause else math.nan,
        cause.exit_code if cause else None,
        cause.signal if cause else None,
        a.time_lost_s if a.time_lost_s is not None else math.nan,
        list(a.collateral_ranks),
        list(a.failed_ranks),
        list(a.ranks),
        list(a.nodes),
        list(a.nodes_joined),
        list(a.nodes_left),
        a.rendezvous_s,
    )


def _summary_row(a: Attempt) -> tuple:
    """SUMMARY_COLUMNS after the attempt's own."""
    cause = a.root_cause
    return (list(a.failed_ranks), cause.rank if cause else None, a.rendezvous_s)


def restarts(source: Any) -> pandas.DataFrame:
    """Why each attempt of an elastic job ended: one row per job and attempt, sorted.

    ``source`` is a logdir (a local path, or an ``s3://`` / ``gs://`` URL) or the DataFrame
    ``tb_monitor.read_events`` returns; anything else is a TypeError naming it.

    Columns:

    - ``job``, ``attempt`` (the rendezvous round it followed: the same number on every node),
      ``start``, ``end`` (UTC timestamps: first worker start, last worker end), ``duration_s``;
    - ``outcome``: FAILED when a rank failed, RUNNING while a rank runs, RESTARTED when a later
      attempt began with no end recorded (a membership change), else the end states recorded
      (SUCCEEDED);
    - the **root cause**, the failure that brought the attempt down (all NA without one):
      ``root_cause_rank`` (Int64), ``root_cause_host``, ``exception`` (its type, "ValueError"),
      ``message`` (the exception message's last line), ``reason`` (one line for humans:
      "ValueError: ...", "killed by SIGKILL", "exited with code 3"), ``traceback``,
      ``failed_at`` (UTC timestamp), ``exit_code`` (Int64: the exit code its agent saw, negative
      for a signal) and ``signal`` ("SIGKILL"). The root cause is the earliest real failure
      (``tb_monitor.analysis.root_cause``): a node that vanished (``root_cause_rank`` its lowest
      rank; its other ranks are not collateral), a failure that reads as
      a lost peer (a collective's connection error, a timeout) and the agent's own shutdown of
      the group (its stop signal, and the SIGKILL it sends a rank that ignored it after another
      of its ranks failed) count only when no real failure is known: a rank killed by SIGKILL
      records nothing itself, and its peers' connection errors are recorded before its agent
      notices it is gone;
    - ``time_lost_s``: from the root cause to the next attempt's first worker start (NaN without
      a root cause, or when no restart followed);
    - ``collateral_ranks``: the other ranks of a failed attempt that did not succeed (failed
      later, terminated by their agent, or cut short): drawn as ``STOPPED_BY_RESTART``, or
      ``STOPPED_AT_END`` in the job's last attempt;
    - ``failed_ranks`` (every rank with a FAILED record), ``ranks`` (every rank started);
    - ``nodes`` (the agents that joined this attempt's round, "host (pid N)"), ``nodes_joined``
      and ``nodes_left`` (against the previous attempt's round; empty for the first);
    - ``rendezvous_s``: from the first node starting to join this round until the last one
      joined it.
    """
    frame = _attempt_frame(source, "restarts", _restarts_row, RESTARTS_COLUMNS, "failed_at")
    return frame.astype(
        {
            "attempt": "int64",
            "root_cause_rank": "Int64",
            "exit_code": "Int64",
            "duration_s": "float64",
            "time_lost_s": "float64",
            "rendezvous_s": "float64",
        }
    )


def restart_summary(source: Any) -> pandas.DataFrame:
    """One row per job and attempt: when it ran, its outcome, the failed ranks, rendezvous time.

    ``source`` is a logdir or ``read_events``' DataFrame (see :func:`restarts`, which says why
    each attempt ended). Columns: job, attempt (the rendezvous round it followed), start, end
    (UTC timestamps), duration_s, outcome (FAILED when a rank failed; RUNNING while one is open;
    RESTARTED when a later attempt began before any end was recorded; else the end states
    recorded), failed_ranks (sorted list), first_failed_rank (the root cause: see
    :func:`restarts`; None without failures), rendezvous_s (from the first node starting to join
    the round before this attempt until the last node joined it: time the job spent not
    training).
    """
    frame = _attempt_frame(source, "restart_summary", _summary_row, SUMMARY_COLUMNS)
    return frame.astype({"attempt": "int64", "first_failed_rank": "Int64"})  # Int64: NA, not NaN


def _attempt_frame(
    source: Any, caller: str, row: Callable[[Attempt], tuple], columns: tuple, *times: str
) -> pandas.DataFrame:
    """One row per attempt: its job, attempt, start, end, duration and outcome, then ``row``'s
    columns; ``start``, ``end`` and ``times`` as UTC timestamps (readable in a notebook, still
    exact to the microsecond)."""
    pandas_module = readers.need_pandas() if not is_frame(source) else sys.modules["pandas"]
    records = [
        (a.job, a.attempt, a.start, a.end, a.duration_s, a.outcome, *row(a))
        for a in attempts(timeline_rows(source, caller))
    ]
    frame = pandas_module.DataFrame.from_records(records, columns=columns)
    for column in ("start", "end", *times):
        frame[column] = pandas_module.to_datetime(frame[column], unit="s", utc=True)
    return frame
