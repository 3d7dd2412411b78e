"""``tb-monitor run``: torchrun, with the job's whole life written to a TensorBoard logdir.

    tb-monitor run --logdir DIR [--no-worker-init] [--prometheus-port PORT]
        [--restart-hung-after DURATION] [any torchrun option] SCRIPT [ARGS]

Everything but ``--logdir``, ``--no-worker-init``, ``--prometheus-port`` and
``--restart-hung-after`` goes to torchrun's own parser and
``torch.distributed.run.main`` untouched, so options, exit codes and signal handling are
torchrun's. Before the agent starts, inside this process, we install:

- our logging handler for torchelastic's ``dynamic_rendezvous`` destination (rendezvous events),
  and for the destination the agent records worker/agent events to: ``tensorboard`` unless the user
  chose one with ``--event-log-handler`` or ``PET_EVENT_LOG_HANDLER``. A chosen destination keeps
  its handler and we capture next to it (see ``torch_bridge.capture_events``);
- our metric handler as the default of ``torch.distributed.elastic.metrics``, so torchelastic's
  metrics become scalars ``torchelastic/<name>``.

(``tb_monitor.launcher.torchrun`` does the installing.) They write to the agent's own run, ``<run id>/agent-<host>-<pid>`` (``contract.agent_run_name``),
and the logdir is exported as ``TB_MONITOR_LOGDIR``. The run id is the one torchrun computes
(``--rdzv-id``, or the random one of ``--standalone``): we read it from torchrun's launch config
as torchrun builds it.

Each worker starts through ``tb_monitor.launcher.bootstrap``, which opens its monitor
(``tb_monitor.init(torch=True)``, writing to ``<run id>/rank-<N>``) and then runs the training
script as torchrun would have, so workers are monitored with no change to the script; a script
that calls ``tb_monitor.init()`` itself gets that monitor back. ``--no-worker-init`` starts the
workers as plain torchrun does (only scripts calling ``tb_monitor.init()`` then write rank runs).
``--no-python`` entrypoints are never wrapped.

A signal that stops the agent (SIGTERM from a scheduler's preemption, Ctrl-C) ends torchrun as it
always does (its workers stopped, exit code 1); the agent records its verdict first, TERMINATED
with the signal and that exit code (``AgentCapture.terminated``), which torchelastic itself
records as FAILED, like a crash, and ``tb-monitor report`` reads as the job's end.

``--prometheus-port PORT`` serves the node's Prometheus series on ``http://HOST:PORT/metrics``
from the agent: its own (restarts, the job's state, torchelastic's metrics) and every worker's
(per-rank step and collective time, Stat windows), which the workers write to a directory the
agent shares with them (``launcher.torchrun.AgentCapture``, ``sinks.prometheus``).

``--restart-hung-after DURATION`` ends an attempt whose ranks all stopped stepping that long
ago, once their stacks are captured, and torchelastic restarts it within ``--max-restarts``
(``launcher.hung``). When an attempt hangs where the one before it hung, the agent gives up: the
job ends, ``tb-monitor run`` exits with code 3 (``hung.HUNG_EXIT_CODE``), and the report says
HUNG.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys
from typing import NamedTuple

from tb_monitor import contract
from tb_monitor.cli.parsing import fail
from tb_monitor.logdir import fs

__all__ = ["main"]

_PROG = "tb-monitor run"
#: Python's exit status after an uncaught exception: what torchrun exits with when stopped.
_UNCAUGHT_EXIT_CODE = 1
_DEFAULT_DESTINATION = "tensorboard"  # also in launcher.torchrun
_HELP = (
    "TensorBoard logdir receiving the rendezvous, agent and worker events and torchelastic's "
    "metrics; each worker writes its own run under it (<run id>/rank-<N>)"
)
_NO_WORKER_INIT_HELP = (
    "start the workers as torchrun does: without this, each worker calls "
    "tb_monitor.init(torch=True) before the training script runs (its events, rank health and "
    "metrics, with no change to the script); with it, only a script that calls "
    "tb_monitor.init() itself writes its rank's run"
)
_RESTART_HUNG_HELP = (
    "end an attempt whose ranks all stopped stepping this long ago (60s, 2m; at least the "
    "stall rule's time, once their stacks are captured) so that torchelastic restarts it "
    "within --max-restarts; a job that hangs again where it hung before ends with exit code 3"
)
_PROMETHEUS_HELP = (
    "serve the node's Prometheus metrics (per-rank step and collective time, Stat windows, "
    "torchelastic metrics, restarts, the job's state) on this port, at /metrics "
    "(needs prometheus_client: pip install 'tb-monitor[prometheus]')"
)


class _Command(NamedTuple):
    """What ``tb-monitor run``'s command line asks for."""

    logdir: str
    torchrun_argv: list[str]
    destination: str
    worker_init: bool
    prometheus_port: int | None = None
    restart_hung_after_s: float | None = None


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with capture; returns 0 or raises exactly what torchrun's ``main`` raises."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        import torch.distributed.run as torchrun
    except ImportError as exc:
        print(f"{_PROG}: needs PyTorch ({exc}): pip install 'tb-monitor[torch]'", file=sys.stderr)
        return 2
    try:
        command = _parse_command(args)
    except SystemExit as exc:  # argparse's usage errors and --help, printed by torchrun's parser
        return exc.code if isinstance(exc.code, int) else 2
    except fs.LogdirError as exc:  # a malformed URL (s3:/bucket): never a local dir "s3:"
        return fail(_PROG, exc)

    from tb_monitor.launcher import agent_hooks
    from tb_monitor.launcher.hung import HUNG_EXIT_CODE
    from tb_monitor.launcher.torchrun import (
        AgentCapture,
        launch_config_observed,
        workers_bootstrapped,
    )

    try:
        fs.check_logdir(command.logdir)  # a bad logdir fails here, before any worker starts
    except (fs.LogdirError, OSError) as exc:
        return fail(_PROG, exc)
    os.environ[contract.LOGDIR_ENV] = command.logdir
    if command.restart_hung_after_s is not None:
        os.environ[agent_hooks.RESTART_HUNG_ENV] = str(command.restart_hung_after_s)
    capture = AgentCapture(command.logdir, command.destination, command.prometheus_port)
    bootstrap = workers_bootstrapped(torchrun) if command.worker_init else contextlib.nullcontext()
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        with launch_config_observed(torchrun, capture.start), bootstrap:
            torchrun.main(command.torchrun_argv)
    except ChildFailedError:
        if not agent_hooks.gave_up():
            raise
        print(f"{_PROG}: the job hung where it hung before; not restarted", file=sys.stderr)
        return HUNG_EXIT_CODE
    except SignalException as stopped:  # torchrun's handler: SIGTERM, SIGINT, ... to the agent
        # It ends the process as an uncaught exception does, as it ends plain torchrun, but
        # with no keep-alive thread inside the store to abort the interpreter's exit.
        capture.terminated(stopped.sigval, exit_code=_UNCAUGHT_EXIT_CODE)
        agent_hooks.stop_keep_alives()
        raise
    finally:
        capture.close()
    return 0


def _parse(argv: list[str]) -> tuple[str, list[str], str]:
    """``_parse_command``'s logdir, torchrun arguments and events destination (what
    tests/cli/test_run_args.py checks)."""
    command = _parse_command(argv)
    return command.logdir, command.torchrun_argv, command.destination


def _parse_command(argv: list[str]) -> _Command:
    """Split our options from torchrun's arguments; torchrun's parser judges the rest.

    Returns the logdir, the arguments for ``torch.distributed.run.main``, the events destination
    the agent will use and whether workers start through the bootstrap. Exits (``SystemExit``)
    with a usage error, as torchrun does.
    """
    from torch.distributed.elastic.events import handlers as event_handlers
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = _PROG
    parser.add_argument("--logdir", required=True, help=_HELP)
    parser.add_argument("--no-worker-init", action="store_true", help=_NO_WORKER_INIT_HELP)
    parser.add_argument("--prometheus-port", type=_port, metavar="PORT", help=_PROMETHEUS_HELP)
    parser.add_argument(
        "--restart-hung-after", type=_duration, metavar="DURATION", help=_RESTART_HUNG_HELP
    )
    # None tells "not on the command line" apart from torchrun's default "null".
    parser.set_defaults(event_log_handler=None)
    args = parser.parse_args(argv)

    tail = [args.training_script, *args.training_script_args]
    options = argv[: len(argv) - len(tail)]
    torchrun_argv = [*_without_ours(options), *tail]

    destination = args.event_log_handler or os.environ.get("PET_EVENT_LOG_HANDLER")
    if destination is None:
        destination = _DEFAULT_DESTINATION
        torchrun_argv[:0] = ["--event-log-handler", destination]
    known = {*event_handlers._log_handlers, _DEFAULT_DESTINATION}
    if destination not in known:
        parser.error(
            f"unknown --event-log-handler {destination!r}; torchelastic knows {sorted(known)}"
        )
    missing = _missing_script(args)
    if missing:
        parser.error(missing)
    if args.prometheus_port is not None and importlib.util.find_spec("prometheus_client") is None:
        parser.error(
            "--prometheus-port needs prometheus_client: pip install 'tb-monitor[prometheus]'"
        )
    return _Command(
        fs.absolute(args.logdir),  # workers may run in another directory; a malformed URL raises
        torchrun_argv,
        destination,
        not args.no_worker_init,
        args.prometheus_port,
        args.restart_hung_after,
    )


def _port(text: str) -> int:
    """A TCP port number from the command line (argparse names the option on error)."""
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return int(text)


def _duration(text: str) -> float:
    """Seconds from ``60s``, ``2m``, ``90`` (argparse names the option on error)."""
    from tb_monitor.launcher.hung import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _without_ours(options: list[str]) -> list[str]:
    """The options without ours: ``--logdir DIR``, ``--logdir=DIR``, ``--no-worker-init``,
    ``--prometheus-port PORT``, ``--restart-hung-after D`` (or the abbreviations argparse matched to them: the shortest
    prefixes no torchrun option has)."""
    out: list[str] = []
    skip = False
    for token in options:
        name, has_value, _ = token.partition("=")
        if skip:
            skip = False
        elif any(
            len(name) >= len(shortest) and option.startswith(name)
            for option, shortest in (
                ("--logdir", "--logd"),
                ("--prometheus-port", "--p"),
                ("--restart-hung-after", "--res"),
            )
        ):
            skip = not has_value
        elif len(name) >= len("--no-w") and "--no-worker-init".startswith(name):
            pass
        else:
            out.append(token)
    return out


def _missing_script(args: argparse.Namespace) -> str | None:
    """A clear message when the training script cannot be found, before any agent starts."""
    script = args.training_script
    if args.module:
        return None  # a module name, resolved by the worker's interpreter
    if args.no_python and not args.run_path:
        found = os.path.exists(script) or shutil.which(script) is not None
    else:
        found = os.path.isfile(script)
    return None if found else f"training script not found: {script!r}"
