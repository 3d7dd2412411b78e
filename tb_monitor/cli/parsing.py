"""What every ``tb-monitor`` subcommand's parser shares: a usage error is one clear line."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["Parser", "UsageError"]


class UsageError(Exception):
    """A command line that cannot be run; the message says why (exit code 2)."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``UsageError`` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)
