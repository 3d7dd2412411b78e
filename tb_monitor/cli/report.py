"""``tb-monitor report LOGDIR [--json] [--follow [--interval S]]``: why a job restarted, in a terminal.

A summary readable in a CI log or over ssh, in the spirit of ``git status``: each job in the logdir
(local, or an ``s3://`` / ``gs://`` URL), its attempts with outcome and duration, each failed
attempt's root cause (rank, host, the exception's last line or the signal that killed it), the
ranks that went down with it, the time lost to restarts and the nodes that left or joined.
It prints ``tb_monitor.analysis.health.job_report``, the one value of a job's health (the
Timeline tab and the notebook show the same).

``--follow`` redraws every ``--interval`` seconds (default 5) until every job in the logdir has
ended (each agent recorded its verdict), or Ctrl-C; on a terminal the screen is redrawn, in a
log each refresh is appended. With ``--json``, each refresh is one JSON document on one line.

Where the ranks record their health (``init(torch=True)`` or ``tb-monitor run``: see
``tb_monitor.integrations.rank_health``), the report also lists the stragglers (a rank whose
compute time stays above 1.2x the median rank's for 3 windows in a row, with its relative score)
and the stalled ranks, naming the rank the others wait for; the scoring is the Timeline tab's
Ranks view's (``tb_monitor.analysis.grid.RankGrid``).

Exit code: 0 when every job's last attempt succeeded or still runs (or nothing was recorded
yet), 1 when a job's last attempt failed or a rank is stalled while the job runs, 2 for a usage
error or a logdir that cannot be read.

The ``--json`` document is ``tb_monitor.analysis.health.JobReport.to_json()``: its schema, and
its version ``SCHEMA_VERSION``, are documented in ``tb_monitor.analysis.health``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import IO, Any

from tb_monitor.analysis.attempts import Attempt
from tb_monitor.analysis.grid import Score, Stall
from tb_monitor.analysis.health import SCHEMA_VERSION, JobHealth, JobReport, job_report
from tb_monitor.analysis.rank_report import RankHealth
from tb_monitor.analysis.root_cause import RootCause
from tb_monitor.analysis.scoring import FLAG_THRESHOLD
from tb_monitor.cli.parsing import Parser, UsageError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "SCHEMA_VERSION", "main", "render", "report"]

_PROG = "tb-monitor report"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_CLEAR = "\x1b[H\x1b[2J"
_VERDICTS = {
    "empty": "nothing to report",
    "failed": "FAILED: the last attempt failed (exit code 1)",
    "running": "running",
    "succeeded": "healthy: every job succeeded",
}


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
    parser.add_argument(
        "--json", action="store_true", help=f"machine-readable output (schema {SCHEMA_VERSION})"
    )
    parser.add_argument("--follow", action="store_true", help="refresh until the job ends")
    parser.add_argument(
        "--interval", type=_positive, default=5.0, help="seconds between refreshes (default 5)"
    )
    return parser


def report(logdir: str) -> dict[str, Any]:
    """The report of a logdir as the ``--json`` document (``job_report(logdir).to_json()``).

    Raises ``FileNotFoundError`` / ``OSError`` / ``ValueError`` when the logdir cannot be read.
    """
    return job_report(logdir).to_json()


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


def _render_cause(cause: RootCause) -> list[str]:
    host = f" on {cause.host}" if cause.host else ""
    lines = [
        f"    root cause      rank {cause.rank}{host} at {_clock(cause.time, True)}",
        f"                    {cause.reason}",
    ]
    code = []
    if cause.signal and cause.signal not in cause.reason:
        code.append(f"signal {cause.signal}")
    if cause.exit_code is not None:
        code.append(f"exit code {cause.exit_code}")
    if code:
        lines.append(f"                    ({', '.join(code)})")
    return lines


def _render_attempt(a: Attempt, later: Attempt | None) -> list[str]:
    lines = [
        f"  attempt {a.attempt:<3} {a.outcome:<10} {_duration(a.duration_s):>9}"
        f"   {_clock(a.start)} → {_clock(a.end)}"
        f"   {_plural(len(a.ranks), 'rank')} on {_plural(len(a.nodes), 'node')}"
    ]
    if a.root_cause is not None:
        lines.extend(_render_cause(a.root_cause))
    if a.collateral_ranks:
        lines.append(f"    went down with  {_ranks(a.collateral_ranks)} (stopped by restart)")
    if a.time_lost_s is not None:
        until = f"attempt {later.attempt} started" if later else "the job ended"
        lines.append(f"    time lost       {_duration(a.time_lost_s)} (until {until})")
    if a.nodes_left:
        lines.append(f"    nodes left      {', '.join(a.nodes_left)}")
    if a.nodes_joined:
        lines.append(f"    nodes joined    {', '.join(a.nodes_joined)}")
    return lines


def _render_job(job: JobHealth) -> list[str]:
    day = datetime.fromtimestamp(job.attempts[0].start, tz=timezone.utc).strftime("%Y-%m-%d")
    state = "finished" if job.finished else "still running"
    lines = [
        "",
        f"job {job.job}: {job.status} · {_plural(len(job.attempts), 'attempt')}, "
        f"{_plural(job.restarts, 'restart')} · {_duration(job.time_lost_s)} lost to "
        f"restarts · {state} (times UTC, {day})",
    ]
    for a, later in zip(job.attempts, [*job.attempts[1:], None], strict=True):
        lines.extend(_render_attempt(a, later))
    return lines


def _score(s: Score) -> str:
    relative = "?" if s.relative is None else f"x{s.relative:.2f}"
    return f"rank {s.rank} {relative}"


def _render_stall(stall: Stall, label: str) -> str:
    if stall.waited_for:
        what = "the others wait for it: it has not entered their collective"
    elif stall.in_collective:
        what = "waiting inside a collective"
    else:
        what = "no progress"
    recorder = "" if stall.fr_seq is None else f" · Flight Recorder at collective {stall.fr_seq}"
    return (
        f"  {label:<15} rank {stall.rank}: {what} · no step for {_duration(stall.since_step_s)}"
        f" · collectives entered {stall.entered}, left {stall.left}{recorder}"
    )


def _render_ranks(ranks: RankHealth, stalled: bool) -> list[str]:
    lines = [
        "",
        f"ranks: {_plural(ranks.count, 'rank')} recorded their health, "
        f"{_plural(ranks.windows, 'window')} (compute time relative to the median rank)",
    ]
    for s in ranks.stragglers:
        lines.append(
            f"  straggler       {_score(s)} the median rank "
            f"({s.windows_over} windows in a row over x{FLAG_THRESHOLD:g})"
        )
    if not ranks.stragglers:
        lines.append("  stragglers      none")
    if ranks.slowest:
        lines.append(f"  slowest         {', '.join(_score(s) for s in ranks.slowest)}")
    label = "STALLED" if stalled else "stalled"
    lines.extend(_render_stall(s, label) for s in ranks.stalls)
    return lines


def _verdict(doc: JobReport) -> str:
    if doc.stalled:
        waited = doc.ranks.waited_for if doc.ranks else ()
        who = f"the job waits for {_ranks(waited)}" if waited else "progress stopped"
        stall = f"STALLED: {who} (exit code 1)"
        return stall if doc.status != "failed" else f"{stall}\n{_VERDICTS['failed']}"
    return _VERDICTS[doc.status]


def render(doc: JobReport) -> str:
    """The report as the terminal text."""
    lines = [f"logdir {doc.logdir}"]
    if not doc.jobs:
        lines.append("  no elastic job attempts recorded yet")
    for job in doc.jobs:
        lines.extend(_render_job(job))
    if doc.ranks is not None:
        lines.extend(_render_ranks(doc.ranks, doc.stalled))
    lines.extend(["", _verdict(doc)])
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _write(out: IO[str], doc: JobReport, as_json: bool) -> None:
    out.write(json.dumps(doc.to_json()) + "\n" if as_json else render(doc))
    out.flush()


def _write_waiting(out: IO[str], logdir: str, as_json: bool) -> None:
    """What --follow shows before the logdir exists."""
    if as_json:
        waiting = {"schema": SCHEMA_VERSION, "logdir": logdir, "jobs": []}
        out.write(json.dumps({**waiting, "status": "waiting", "exit_code": EXIT_OK}) + "\n")
    else:
        out.write(f"logdir {logdir}\n  waiting for it to appear\n")
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
                doc = job_report(args.logdir)
            except FileNotFoundError:  # the job may not have written anything yet
                doc = None
            if tty:
                out.write(_CLEAR)
            elif refreshes > 1 and not args.json:
                out.write(f"--- {_clock(time.time())} UTC ---\n")
            if doc is None:
                _write_waiting(out, args.logdir, args.json)
            else:
                _write(out, doc, args.json)
                code = doc.exit_code
                if doc.finished:
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
        doc = job_report(args.logdir)
    except (OSError, ValueError) as exc:
        print(f"{_PROG}: cannot read {args.logdir!r}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _write(out, doc, args.json)
    return doc.exit_code
