"""The ``tb-monitor`` command: ``run`` (torchrun with TensorBoard capture), ``demo``, ``export``,
``report``, ``import-fr``, ``capture``.

Each subcommand lives in its own module and owns its own arguments; this module only dispatches,
so ``tb-monitor run`` can hand torchrun's options through untouched.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["main"]

_COMMANDS = {
    "run": ("tb_monitor.cli.run", "torchrun, with every event and metric written to a logdir"),
    "demo": (
        "tb_monitor.cli.demo",
        "run a small elastic job with a restart, then open TensorBoard",
    ),
    "export": (
        "tb_monitor.cli.export",
        "export a logdir as a Chrome/Perfetto trace, JSON lines or CSV",
    ),
    "report": ("tb_monitor.cli.report", "why a job restarted: attempts and root causes"),
    "import-fr": (
        "tb_monitor.cli.import_fr",
        "import a job's Flight Recorder dumps into a logdir",
    ),
    "capture": (
        "tb_monitor.cli.capture",
        "capture every rank of a running job: stacks, Flight Recorder, a profile",
    ),
}

_USAGE = (
    "usage: tb-monitor {run,demo,export,report,import-fr,capture} [-h] ...\n\ncommands:\n"
    + "".join(f"  {name:<10}{summary}\n" for name, (_, summary) in _COMMANDS.items())
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tb-monitor`` console script; returns the process exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE, end="")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in _COMMANDS:
        print(f"tb-monitor: unknown command {name!r}\n{_USAGE}", end="", file=sys.stderr)
        return 2
    module = importlib.import_module(_COMMANDS[name][0])
    return int(module.main(rest) or 0)
