"""How ``tb-monitor run`` starts each worker: its monitor first, then the training script, as
torchrun would have run it.

    python -u -m tb_monitor.launcher.bootstrap SCRIPT [ARGS]      # torchrun ... SCRIPT
    python -u -m tb_monitor.launcher.bootstrap -m MODULE [ARGS]   # torchrun -m ... MODULE

(``launcher.torchrun.worker_command`` rewrites torchrun's worker command into this; with
``--run-path`` the worker calls ``run_script_path`` below instead of torch's.) The monitor is
``tb_monitor.monitor.init_automatic()``: ``init(torch=True)`` into ``$TB_MONITOR_LOGDIR``, so the
worker's own events, its rank health and what torch's telemetry APIs log land in
``<run id>/rank-<N>`` with no change to the script; a script that calls ``tb_monitor.init()``
itself gets that same monitor back, and nothing is recorded twice.

The script sees what ``python SCRIPT`` gives it: ``__name__ == "__main__"``, ``__file__`` as an
absolute path (``sys.argv[0]`` too: runpy sets it to the path it runs), the rest of
``sys.argv``, and its own directory as ``sys.path[0]``. An uncaught exception is printed and
recorded with the script's frames only, and ends the process with exit code 1; ``SystemExit``,
``KeyboardInterrupt`` and signals end it as Python ends a plain run.

Telemetry never stops training: if the monitor cannot be opened, one warning says why and the
script runs anyway. torch's worker server is started too, on a socket in the agent's stacks
directory (``launcher.worker_server``), for the captures the agent takes.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from collections.abc import Callable
from types import TracebackType

__all__ = ["main", "run_script_path"]

_log = logging.getLogger("tb_monitor")
_USAGE = "usage: python -m tb_monitor.launcher.bootstrap {SCRIPT | -m MODULE} [ARGS]"


def main(argv: list[str] | None = None) -> None:
    """Open this worker's monitor, then run the script or module ``argv`` names as ``__main__``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args == ["-m"]:
        sys.exit(_USAGE)
    if args[0] == "-m":
        module, rest = args[1], args[2:]
        sys.argv = [module, *rest]  # run_module puts the module's file in sys.argv[0], as -m does
        _open_monitor()
        _run(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
        return
    script = os.path.abspath(args[0])
    sys.argv = [script, *args[1:]]
    if not getattr(sys.flags, "safe_path", False):
        # -m put the working directory first; `python SCRIPT` puts the script's own directory.
        sys.path[0] = os.path.dirname(os.path.realpath(script))
    _open_monitor()
    _run(lambda: runpy.run_path(script, run_name="__main__"))


def run_script_path(training_script: str, *training_script_args: str) -> None:
    """torchrun's ``--run-path`` entry point, with this worker's monitor opened first.

    torch calls it in the worker process in place of ``torch.distributed.run.run_script_path``,
    which then runs the script exactly as it would have; torch's own error handling around it
    (the error file, the exit code) is unchanged.
    """
    from torch.distributed.run import run_script_path as run

    _open_monitor()
    run(training_script, *training_script_args)


def _open_monitor() -> None:
    try:
        from tb_monitor.monitor import init_automatic

        init_automatic()
    except Exception as exc:  # the script must run whatever happens to its telemetry
        _log.warning(
            "tb_monitor: this worker is not monitored, the training script runs without it: %s",
            exc,
        )
    from tb_monitor import contract
    from tb_monitor.launcher import worker_server

    worker_server.start(os.environ.get(contract.STACKS_DIR_ENV))  # captures on demand


def _run(entry: Callable[[], object]) -> None:
    try:
        entry()
    except Exception as failure:  # SystemExit and KeyboardInterrupt end it as Python does
        # Handled here rather than left to the interpreter, so that the traceback printed and
        # recorded (the worker hooks' excepthook) starts at the script, as in a plain run.
        failure.with_traceback(_script_frames(failure.__traceback__))
        sys.excepthook(type(failure), failure, failure.__traceback__)
        raise SystemExit(1) from None


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading frames of this module and of runpy."""
    ours = {_run.__code__.co_filename, runpy.run_path.__code__.co_filename}
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


if __name__ == "__main__":
    main()
