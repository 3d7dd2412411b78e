"""``tb-monitor capture LOGDIR [--seconds N]``: every rank of a running job captured at once.

Writes a request into the logdir, which each agent of ``tb-monitor run`` writing there takes
within a few seconds (``tb_monitor.launcher.capture``): every rank's stacks, Flight Recorder,
torch wait counters and an N-second ``torch.profiler`` trace land in ``<run id>/captures/<id>/
rank-<N>/``, listed by ``tb-monitor report`` and linked from the Ranks view. It prints the
capture's id; the files follow after the profile's seconds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from tb_monitor.cli.parsing import EXIT_2_SAYS_WHY, EXIT_OK, Parser, UsageError, fail
from tb_monitor.launcher.capture import ALIGN_S, POLL_S, request
from tb_monitor.logdir import fs

__all__ = ["main"]

_PROG = "tb-monitor capture"
_EXIT_CODES = (
    "exit codes: 0 the request was written, 2 a usage error or a logdir that could not be "
    f"written {EXIT_2_SAYS_WHY}"
)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 600:
        raise argparse.ArgumentTypeError(f"not a number of seconds in (0, 600]: {text!r}")
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=_PROG, description=__doc__.splitlines()[0], epilog=_EXIT_CODES)
    parser.add_argument("logdir", help="the logdir a running tb-monitor run job writes to")
    parser.add_argument(
        "--seconds", type=_seconds, default=5.0, help="seconds of torch.profiler trace (5)"
    )
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    """``tb-monitor capture``: 0 once the request is written, 2 with one line on stderr."""
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
        logdir = fs.absolute(args.logdir)
        if not fs.isdir(logdir):
            raise UsageError(f"no logdir at {args.logdir!r}")
        capture_id = request(logdir, args.seconds)
    except (UsageError, ValueError, OSError) as exc:
        return fail(_PROG, exc)
    print(capture_id)
    print(
        f"asked every agent writing to {logdir} (they look every {POLL_S:.0f} s and begin "
        f"together {ALIGN_S:.0f} s from now); each rank's files land in "
        f"<run id>/captures/{capture_id}/ {args.seconds:g} s later; "
        f"`tb-monitor report {args.logdir}` lists them",
        file=sys.stderr,
    )
    return EXIT_OK
