"""``tb-monitor export LOGDIR --format {chrome-trace,jsonl,csv} -o FILE`` (see ``tb_monitor.export``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from tb_monitor import export
from tb_monitor.cli.parsing import EXIT_2_SAYS_WHY, EXIT_OK, Parser, UsageError, fail

__all__ = ["main"]

_PROG = "tb-monitor export"
_EXIT_CODES = (
    "exit codes: 0 written, 2 a usage error, a logdir that could not be read or an output that "
    f"could not be written {EXIT_2_SAYS_WHY}"
)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=_PROG, description=export.__doc__.splitlines()[0], epilog=_EXIT_CODES)
    parser.add_argument("logdir", help="TensorBoard logdir written by tb-monitor")
    parser.add_argument("--format", required=True, choices=export.FORMATS, help="output format")
    parser.add_argument("-o", "--output", required=True, help="output file ('-' for stdout)")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always show progress",
    )
    progress.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never show progress"
    )
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    """``tb-monitor export``: 0 on success, 2 with one line on stderr for bad input or a logdir
    that cannot be read (the error names the logdir or the URL that failed, and the cause)."""
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
        count = export.WRITERS[args.format](args.logdir, args.output, progress=args.progress)
    except (UsageError, ValueError, OSError) as exc:
        return fail(_PROG, exc)
    if args.output != "-":
        print(f"wrote {count} {args.format} records to {args.output}", file=sys.stderr)
    return EXIT_OK
