"""What every ``tb-monitor`` subcommand shares: its exit codes, and that a usage error or a
logdir it cannot read is one clear line on stderr, never a traceback.

Exit codes: 0 healthy (or done), 1 a job failed or a rank is stalled (``report``), 2 the
command could not run: a usage error, or a logdir that could not be read (missing, a malformed
URL, an object store that refused the credentials, did not answer within its deadline
``TB_MONITOR_REMOTE_TIMEOUT_S`` or could not be reached).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = [
    "EXIT_2_SAYS_WHY",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Parser",
    "UsageError",
    "fail",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: How each command's --help ends its list of exit codes.
EXIT_2_SAYS_WHY = (
    "(one line on stderr says why; a remote read gives up after TB_MONITOR_REMOTE_TIMEOUT_S, "
    "default 10 s, per attempt)"
)


class UsageError(Exception):
    """A command line that cannot be run; the message says why (exit code 2)."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``UsageError`` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def fail(prog: str, problem: object) -> int:
    """Print ``prog: problem`` as one line on stderr (an exception's text may span lines);
    return ``EXIT_USAGE``, the code of a command that could not run."""
    print(f"{prog}: {' '.join(str(problem).split())}", file=sys.stderr)
    return EXIT_USAGE
