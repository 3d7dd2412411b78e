"""``tb-monitor report LOGDIR [--job JOB] [--json] [--follow [--interval S]]``: why a job restarted.

A summary readable in a CI log or over ssh, in the spirit of ``git status``: each job in the logdir
(local, or an ``s3://`` / ``gs://`` URL), its attempts with outcome and duration, each failed
attempt's root cause (rank, host, the exception's last line or the signal that killed it), the
ranks that went down with it, the time lost to restarts and the nodes that left or joined.
It prints ``tb_monitor.analysis.health.job_report``, the one value of a job's health, as
``tb_monitor.analysis.report_text`` renders it (the notebook shows the same text, the Timeline
tab the same attempts).

Each job of the logdir has its own section, its ranks scored among themselves: jobs are told
apart by their torchelastic run id and, where two share one (torchrun's default run id is
"none"), by their start (``tb_monitor.analysis.jobs``: such a job is named
``<run id>@HH:MM:SS``). ``--job`` shows one: its id, or a run id (every job of that run id).

``--follow`` redraws every ``--interval`` seconds (default 5) until every job in the logdir has
ended (each agent recorded its verdict), or Ctrl-C; on a terminal the screen is redrawn, in a
log each refresh is appended. With ``--json``, each refresh is one JSON document on one line.

Where the ranks record their health (``init(torch=True)`` or ``tb-monitor run``: see
``tb_monitor.rank.health``), the report also lists the stragglers (a rank whose
compute time stays above 1.2x the median rank's for 3 windows in a row, with its relative score)
and the stalled ranks, naming the rank the others wait for; the scoring is the Timeline tab's
Ranks view's (``tb_monitor.analysis.grid.RankGrid``).

Exit code: 0 when every job's last attempt succeeded or still runs (or nothing was recorded
yet), 1 when a job's last attempt failed or a rank is stalled while its job runs, 2 for a usage
error, a logdir that cannot be read, or a ``--job`` it does not hold. A logdir that cannot be
read is one line on stderr naming it and the cause (missing, a malformed URL, an object store
that refused the credentials, did not answer or cannot be reached), never a traceback; remote
reads have a deadline (``TB_MONITOR_REMOTE_TIMEOUT_S``, ``tb_monitor.logdir.fs``), so a store
that never answers ends the report within ~30 s. ``--follow`` waits for a logdir that does not
exist yet, and stops with exit code 2 on any other failure to read it.

The ``--json`` document is ``tb_monitor.analysis.health.JobReport.to_json()``: its schema, and
its version ``SCHEMA_VERSION``, are documented in ``tb_monitor.analysis.health``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

from tb_monitor.analysis.health import SCHEMA_VERSION, JobReport, job_report
from tb_monitor.analysis.report import render
from tb_monitor.cli.parsing import (
    EXIT_2_SAYS_WHY,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Parser,
    UsageError,
    fail,
)
from tb_monitor.logdir.fs import LogdirError

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "SCHEMA_VERSION", "main", "render", "report"]

_PROG = "tb-monitor report"
_EXIT_CODES = (
    "exit codes: 0 healthy, 1 a job failed or a rank is stalled, 2 a usage error, a logdir "
    f"that could not be read or a --job it does not hold {EXIT_2_SAYS_WHY}"
)
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
    parser = Parser(
        prog=_PROG, description=__doc__.splitlines()[0].split(": ", 1)[1], epilog=_EXIT_CODES
    )
    parser.add_argument("logdir", help="logdir written by tb-monitor (a path, s3:// or gs://)")
    parser.add_argument(
        "--json", action="store_true", help=f"machine-readable output (schema {SCHEMA_VERSION})"
    )
    parser.add_argument(
        "--job", metavar="JOB", help="only this job: its run id, or <run id>@HH:MM:SS"
    )
    parser.add_argument("--follow", action="store_true", help="refresh until the job ends")
    parser.add_argument(
        "--interval", type=_positive, default=5.0, help="seconds between refreshes (default 5)"
    )
    return parser


def report(logdir: str, job: str | None = None) -> dict[str, Any]:
    """The report of a logdir as the ``--json`` document (``job_report(logdir).to_json()``),
    of ``job`` only where given.

    Raises ``FileNotFoundError`` / ``OSError`` / ``ValueError`` when the logdir cannot be read,
    ``ValueError`` naming the jobs there are when ``job`` is not one of them.
    """
    return _job_report(logdir, job).to_json()


def _job_report(logdir: str, job: str | None) -> JobReport:
    doc = job_report(logdir)
    return doc if job is None else doc.pick(job)


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
                doc = _job_report(args.logdir, args.job)
            except FileNotFoundError:  # the job may not have written anything yet
                doc = None
            except LogdirError:  # a malformed URL: it will never appear
                raise
            except ValueError:  # --job: not started yet, or not there
                doc = None
            if tty:
                out.write(_CLEAR)
            elif refreshes > 1 and not args.json:
                out.write(f"--- {time.strftime('%H:%M:%S', time.gmtime())} UTC ---\n")
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
        return fail(_PROG, exc)
    try:
        if args.follow:
            return _follow(args, out, sleep, max_refreshes)
        doc = job_report(args.logdir)
    except (OSError, ValueError) as exc:  # fs's errors name the URL that failed and why
        return fail(_PROG, exc if args.logdir in str(exc) else f"cannot read {args.logdir}: {exc}")
    try:
        doc = doc if args.job is None else doc.pick(args.job)
    except ValueError as exc:  # names the jobs there are
        return fail(_PROG, exc)
    _write(out, doc, args.json)
    return doc.exit_code
