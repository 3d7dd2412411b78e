"""``tb-monitor import-fr DUMPS LOGDIR [--run NAME]``: a job's Flight Recorder dumps, into a logdir.

``DUMPS`` is a directory or an ``s3://`` / ``gs://`` prefix holding one file per rank, as torch
writes them (``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: ``<prefix><rank>``,
pickled, or the debug server's JSON). Each rank's collectives become its own lane of the
Timeline, each collective an interval; ``tb-monitor report LOGDIR`` then names, per process
group, the rank behind and the collectives the ranks disagree on (``tb_monitor.fr_import``).
It prints that verdict too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from tb_monitor.analysis.fr_text import fr_lines
from tb_monitor.cli.parsing import EXIT_2_SAYS_WHY, EXIT_OK, Parser, UsageError, fail
from tb_monitor.fr_import import DEFAULT_RUN, import_dumps

__all__ = ["main"]

_PROG = "tb-monitor import-fr"
_EXIT_CODES = (
    "exit codes: 0 imported, 2 a usage error, no dumps where DUMPS points, or a logdir that "
    f"could not be written {EXIT_2_SAYS_WHY}"
)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=_PROG, description=__doc__.splitlines()[0], epilog=_EXIT_CODES)
    parser.add_argument("dumps", help="directory or s3:// / gs:// prefix of per-rank dumps")
    parser.add_argument("logdir", help="TensorBoard logdir to write the records into")
    parser.add_argument(
        "--run", default=DEFAULT_RUN, help=f"run the ranks' records go under ({DEFAULT_RUN})"
    )
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    """``tb-monitor import-fr``: 0 once written, 2 with one line on stderr for bad input."""
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
        imported = import_dumps(args.dumps, args.logdir, run=args.run)
    except (UsageError, ValueError, OSError) as exc:
        return fail(_PROG, exc)
    total = sum(imported.collectives.values())
    print(
        f"imported {total} collectives of {len(imported.runs)} ranks into {args.logdir}",
        file=sys.stderr,
    )
    print("\n".join(fr_lines(imported.verdicts)))
    return EXIT_OK
