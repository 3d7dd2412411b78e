"""``tb-monitor report LOGDIR [--json] [--follow [--interval S]]``: why a job restarted, in a terminal.

A summary readable in a CI log or over ssh, in the spirit of ``git status``: each job in the logdir
(local, or an ``s3://`` / ``gs://`` URL), its attempts with outcome and duration, each failed
attempt's root cause (rank, host, the exception's last line or the signal that killed it), the
ranks that went down with it, the time lost to restarts and the nodes that left or joined. The
analysis is ``tb_monitor.analysis.restarts`` (the Timeline tab and the notebook show the same).

``--follow`` redraws every ``--interval`` seconds (default 5) until every job in the logdir has
ended (each agent recorded its verdict), or Ctrl-C; on a terminal the screen is redrawn, in a
log each refresh is appended. With ``--json``, each refresh is one JSON document on one line.

Where the ranks record their health (``init(torch=True)`` or ``tb-monitor run``: see
``tb_monitor.integrations.rank_health``), the report also lists the stragglers (a rank whose
compute time stays above 1.2x the median rank's for 3 windows in a row, with its relative score)
and the stalled ranks, naming the rank the others wait for; the analysis is
``tb_monitor.analysis.stragglers`` (the Timeline tab's Ranks view shows the same). It needs pandas
(``pip install 'tb-monitor[pandas]'``); without it ``ranks`` is null.

Exit code: 0 when every job's last attempt succeeded or still runs (or nothing was recorded
yet), 1 when a job's last attempt failed or a rank is stalled while the job runs, 2 for a usage
error or a logdir that cannot be read.

JSON schema (``--json``; ``schema`` is 1, bumped on incompatible change; times are epoch seconds)::

    {
      "schema": 1,
      "logdir": "runs/exp7",
      "status": "succeeded" | "failed" | "running" | "empty",   # --follow: also "waiting",
                                                               # before the logdir exists
      "exit_code": 0 | 1,                # 1: a job's last attempt failed, or ranks.stalled
      "ranks": null | {                  # rank health; null when none was recorded (or no pandas)
        "count": 4, "windows": 36, "window_s": 10.0,
        "stragglers": [                  # flagged ranks, slowest first
          {"rank": 1, "relative": 1.5, "individual": 1.02, "windows_over": 12, "flagged": true}
        ],
        "slowest": [...],                # the 3 highest relative scores, same fields
        "stalled": true,                 # a rank is stalled and not every job has ended
        "stalls": [                      # the rank the others wait for first
          {"rank": 3, "since_step_s": 45.0, "entered": 5, "left": 5,
           "in_collective": false, "fr_seq": null, "waited_for": true}
        ],
        "waited_for": [3]
      },
      "jobs": [
        {
          "job": "<run id>",
          "status": "<the last attempt's outcome: SUCCEEDED, FAILED, RUNNING, ...>",
          "finished": true,           # every agent of the job recorded its verdict
          "attempts_total": 2,
          "restarts": 1,
          "time_lost_s": 2.7,         # summed over the attempts with a root cause
          "attempts": [
            {
              "job": "...", "attempt": 0, "start": 1.7e9, "end": 1.7e9, "duration_s": 6.0,
              "outcome": "FAILED",
              "root_cause": null | {
                "rank": 2, "host": "node-a", "time": 1.7e9,
                "reason": "ValueError: bad batch",   # one line: also "killed by SIGKILL"
                "exception": "ValueError" | null, "message": "bad batch" | null,
                "exit_code": 1 | null, "signal": "SIGKILL" | null,
                "source": "worker" | "error_file" | "agent",
                "traceback": "Traceback (most recent call last): ..." | null
              },
              "collateral_ranks": [0, 1, 3], "failed_ranks": [0, 1, 2, 3], "ranks": [0, 1, 2, 3],
              "time_lost_s": 2.7 | null,
              "nodes": ["node-a (pid 41)", ...], "nodes_joined": [], "nodes_left": [],
              "rendezvous_s": 1.1
            }
          ]
        }
      ]
    }
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import IO, Any

from tb_monitor.analysis.restarts import (
    Attempt,
    attempt_dict,
    attempts,
    finished_jobs,
    timeline_rows,
)
from tb_monitor.cli.parsing import Parser, UsageError
from tb_monitor.logdir import readers

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "SCHEMA_VERSION", "main", "report"]

_PROG = "tb-monitor report"
SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_CLEAR = "\x1b[H\x1b[2J"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=_PROG, description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("logdir", help="logdir written by tb-monitor (a path, s3:// or gs://)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (schema 1)")
    parser.add_argument("--follow", action="store_true", help="refresh until the job ends")
    parser.add_argument(
        "--interval", type=_positive, default=5.0, help="seconds between refreshes (default 5)"
    )
    return parser


# ---------------------------------------------------------------------------------------------
# The report as data
# ---------------------------------------------------------------------------------------------


def report(logdir: str) -> dict[str, Any]:
    """The report of a logdir as the ``--json`` document (see the module docstring).

    Raises ``FileNotFoundError`` / ``OSError`` / ``ValueError`` when the logdir cannot be read.
    """
    rows = timeline_rows(logdir, "report")
    found = attempts(rows)
    finished = finished_jobs(rows)
    jobs: dict[str, list[Attempt]] = {}
    for attempt in found:
        jobs.setdefault(attempt.job, []).append(attempt)
    out_jobs = []
    for job, job_attempts in jobs.items():
        out_jobs.append(
            {
                "job": job,
                "status": job_attempts[-1].outcome,
                "finished": finished.get(job, False),
                "attempts_total": len(job_attempts),
                "restarts": len(job_attempts) - 1,
                "time_lost_s": sum(a.time_lost_s or 0.0 for a in job_attempts),
                "attempts": [attempt_dict(a) for a in job_attempts],
            }
        )
    ranks = rank_health(logdir)
    if ranks is not None:
        ranks["stalled"] = bool(ranks["stalls"]) and not (
            out_jobs and all(job["finished"] for job in out_jobs)
        )
    if not out_jobs:
        status = "empty"
    elif any(job["status"] == "FAILED" for job in out_jobs):
        status = "failed"
    elif all(job["finished"] for job in out_jobs):
        status = "succeeded"
    else:
        status = "running"
    return {
        "schema": SCHEMA_VERSION,
        "logdir": logdir,
        "status": status,
        "exit_code": EXIT_FAILED if status == "failed" or (ranks or {}).get("stalled") else EXIT_OK,
        "ranks": ranks,
        "jobs": out_jobs,
    }


def rank_health(logdir: str) -> dict[str, Any] | None:
    """The ``ranks`` part of the report (see the module docstring), or None when no rank recorded
    its health or pandas is missing."""
    try:
        pd = readers.need_pandas()
    except ImportError:
        return None
    from tb_monitor.analysis.stragglers import rank_windows, stalls, stragglers

    rows = [s for s in readers.iter_scalars(logdir) if s.tag.startswith("rank/")]
    if not rows:
        return None
    scalars = pd.DataFrame.from_records(rows, columns=readers.SCALAR_COLUMNS)
    windows = rank_windows(scalars)
    scores = stragglers(scalars)
    stalled = stalls(scalars)

    def score(row: Any) -> dict[str, Any]:
        return {
            "rank": int(row.rank),
            "relative": _number(row.relative),
            "individual": _number(row.individual),
            "windows_over": int(row.windows_over),
            "flagged": bool(row.flagged),
        }

    return {
        "count": int(scalars["run"].nunique()),
        "windows": int((windows["window_end"] / 10.0).round().nunique()) if len(windows) else 0,
        "window_s": 10.0,
        "stragglers": [score(r) for r in scores.itertuples() if r.flagged],
        "slowest": [score(r) for r in scores.head(3).itertuples()],
        "stalled": bool(len(stalled)),
        "stalls": [
            {
                "rank": int(r.rank),
                "since_step_s": float(r.since_step_s),
                "entered": int(r.entered),
                "left": int(r.left),
                "in_collective": bool(r.in_collective),
                "fr_seq": None if pd.isna(r.fr_seq) else int(r.fr_seq),
                "waited_for": bool(r.waited_for),
            }
            for r in stalled.itertuples()
        ],
        "waited_for": [int(r.rank) for r in stalled.itertuples() if r.waited_for],
    }


def _number(value: Any) -> float | None:
    value = float(value)
    return value if value == value else None  # NaN -> None


# ---------------------------------------------------------------------------------------------
# The report as text
# ---------------------------------------------------------------------------------------------


def _clock(t: float, ms: bool = False) -> str:
    when = datetime.fromtimestamp(t, tz=timezone.utc)
    return when.strftime("%H:%M:%S.%f")[:-3] if ms else when.strftime("%H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {round(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {round(seconds % 3600 / 60)} min"


def _ranks(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render(doc: dict[str, Any]) -> str:
    """The report document as the terminal text."""
    lines = [f"logdir {doc['logdir']}"]
    if not doc["jobs"]:
        lines.append("  no elastic job attempts recorded yet")
    for job in doc["jobs"]:
        attempts = job["attempts"]
        first = attempts[0]["start"]
        day = datetime.fromtimestamp(first, tz=timezone.utc).strftime("%Y-%m-%d")
        state = "finished" if job["finished"] else "still running"
        lines.append("")
        lines.append(
            f"job {job['job']}: {job['status']} · {_plural(job['attempts_total'], 'attempt')}, "
            f"{_plural(job['restarts'], 'restart')} · {_duration(job['time_lost_s'])} lost to "
            f"restarts · {state} (times UTC, {day})"
        )
        for a in attempts:
            lines.append(
                f"  attempt {a['attempt']:<3} {a['outcome']:<10} {_duration(a['duration_s']):>9}"
                f"   {_clock(a['start'])} → {_clock(a['end'])}"
                f"   {_plural(len(a['ranks']), 'rank')} on {_plural(len(a['nodes']), 'node')}"
            )
            cause = a["root_cause"]
            if cause is not None:
                host = f" on {cause['host']}" if cause["host"] else ""
                lines.append(
                    f"    root cause      rank {cause['rank']}{host} at {_clock(cause['time'], True)}"
                )
                lines.append(f"                    {cause['reason']}")
                code = []
                if cause["signal"] and cause["signal"] not in cause["reason"]:
                    code.append(f"signal {cause['signal']}")
                if cause["exit_code"] is not None:
                    code.append(f"exit code {cause['exit_code']}")
                if code:
                    lines.append(f"                    ({', '.join(code)})")
            if a["collateral_ranks"]:
                lines.append(
                    f"    went down with  {_ranks(a['collateral_ranks'])} (stopped by restart)"
                )
            if a["time_lost_s"] is not None:
                later = [b for b in attempts if b["attempt"] > a["attempt"]]
                until = f"attempt {later[0]['attempt']} started" if later else "the job ended"
                lines.append(f"    time lost       {_duration(a['time_lost_s'])} (until {until})")
            if a["nodes_left"]:
                lines.append(f"    nodes left      {', '.join(a['nodes_left'])}")
            if a["nodes_joined"]:
                lines.append(f"    nodes joined    {', '.join(a['nodes_joined'])}")
    ranks = doc.get("ranks")
    if ranks is not None:
        lines.extend(_render_ranks(ranks))
    lines.append("")
    if ranks is not None and ranks["stalled"]:
        waited = ranks["waited_for"]
        who = f"the job waits for {_ranks(waited)}" if waited else "progress stopped"
        lines.append(f"STALLED: {who} (exit code 1)")
        if doc["status"] != "failed":
            return "\n".join(lines) + "\n"
    verdict = {
        "empty": "nothing to report",
        "failed": "FAILED: the last attempt failed (exit code 1)",
        "running": "running",
        "succeeded": "healthy: every job succeeded",
    }[doc["status"]]
    lines.append(verdict)
    return "\n".join(lines) + "\n"


def _score(s: dict[str, Any]) -> str:
    relative = "?" if s["relative"] is None else f"x{s['relative']:.2f}"
    return f"rank {s['rank']} {relative}"


def _render_ranks(ranks: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"ranks: {_plural(ranks['count'], 'rank')} recorded their health, "
        f"{_plural(ranks['windows'], 'window')} (compute time relative to the median rank)",
    ]
    if ranks["stragglers"]:
        for s in ranks["stragglers"]:
            lines.append(
                f"  straggler       {_score(s)} the median rank "
                f"({s['windows_over']} windows in a row over x1.2)"
            )
    else:
        lines.append("  stragglers      none")
    if ranks["slowest"]:
        lines.append(f"  slowest         {', '.join(_score(s) for s in ranks['slowest'])}")
    label = "STALLED" if ranks["stalled"] else "stalled"
    for s in ranks["stalls"]:
        if s["waited_for"]:
            what = "the others wait for it: it has not entered their collective"
        elif s["in_collective"]:
            what = "waiting inside a collective"
        else:
            what = "no progress"
        lines.append(
            f"  {label:<15} rank {s['rank']}: {what} · no step for {_duration(s['since_step_s'])}"
            f" · collectives entered {s['entered']}, left {s['left']}"
            + ("" if s["fr_seq"] is None else f" · Flight Recorder at collective {s['fr_seq']}")
        )
    return lines


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _write(out: IO[str], doc: dict[str, Any], as_json: bool) -> None:
    out.write(json.dumps(doc) + "\n" if as_json else render(doc))
    out.flush()


def _follow(
    args: argparse.Namespace,
    out: IO[str],
    sleep: Callable[[float], Any],
    max_refreshes: int | None,
) -> int:
    code = EXIT_OK
    refreshes = 0
    tty = not args.json and out.isatty()
    try:
        while True:
            refreshes += 1
            try:
                doc = report(args.logdir)
            except FileNotFoundError:  # the job may not have written anything yet
                doc = None
            if tty:
                out.write(_CLEAR)
            elif refreshes > 1 and not args.json:
                out.write(f"--- {_clock(time.time())} UTC ---\n")
            if doc is None:
                if args.json:
                    waiting = {"schema": SCHEMA_VERSION, "logdir": args.logdir, "jobs": []}
                    out.write(json.dumps({**waiting, "status": "waiting", "exit_code": 0}) + "\n")
                else:
                    out.write(f"logdir {args.logdir}\n  waiting for it to appear\n")
                out.flush()
            else:
                _write(out, doc, args.json)
                code = doc["exit_code"]
                if doc["jobs"] and all(job["finished"] for job in doc["jobs"]):
                    return code
            if max_refreshes is not None and refreshes >= max_refreshes:
                return code
            sleep(args.interval)
    except KeyboardInterrupt:
        return code


def main(
    argv: Iterable[str] | None = None,
    *,
    out: IO[str] | None = None,
    sleep: Callable[[float], Any] = time.sleep,
    max_refreshes: int | None = None,
) -> int:
    """``tb-monitor report``; returns the exit code (see the module docstring).

    ``out``, ``sleep`` and ``max_refreshes`` are for tests: where the report goes, how
    ``--follow`` waits between refreshes, and how many refreshes it makes at most.
    """
    out = sys.stdout if out is None else out
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
    except UsageError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.follow:
        return _follow(args, out, sleep, max_refreshes)
    try:
        doc = report(args.logdir)
    except (OSError, ValueError) as exc:
        print(f"{_PROG}: cannot read {args.logdir!r}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _write(out, doc, args.json)
    return doc["exit_code"]
