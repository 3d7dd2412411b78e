"""What ``tb-monitor run`` installs into torchrun's agent process (``tb_monitor.cli.run``).

torchrun decides the run id inside ``run()`` and exposes no hook: ``launch_config_observed``
watches the launch config it builds, and ``AgentCapture`` then opens the agent's own run and
installs our handlers into torchelastic's events and metrics (``torch_bridge``).
``workers_bootstrapped`` rewrites the worker command built in the same step, so that each worker
opens its own monitor before the training script runs (``launcher.bootstrap``).

torchelastic's agent records its workers' ends (``torchelastic.worker.status.FAILED`` with the
exit code and the error file, ``TERMINATED``) only once, when the whole run ends: a failure that
leads to a restart leaves no agent record, and a worker killed by a signal cannot record itself.
``record_every_attempt`` makes the agent record them for every failed attempt too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tb_monitor import contract
from tb_monitor.launcher import agent_hooks, bootstrap
from tb_monitor.logdir import fs
from tb_monitor.sinks import prometheus
from tb_monitor.sinks.fanout import Fanout
from tb_monitor.sinks.tensorboard import TensorboardSink
from tb_monitor.torch_bridge import install

__all__ = [
    "BOOTSTRAP",
    "DEFAULT_DESTINATION",
    "AgentCapture",
    "launch_config_observed",
    "record_every_attempt",
    "worker_command",
    "workers_bootstrapped",
]

#: The events destination the agent records to unless the user chose one.
DEFAULT_DESTINATION = "tensorboard"
#: The module each Python worker starts through: ``python -u -mBOOTSTRAP SCRIPT ...``.
BOOTSTRAP = "tb_monitor.launcher.bootstrap"

_log = logging.getLogger("tb_monitor")
#: torchelastic's names for its agent's records of the run (``torchelastic.worker.status.FAILED``).
_AGENT_EVENT_PREFIX = "torchelastic.worker.status."


@contextlib.contextmanager
def _config_from_args_wrapped(torchrun: Any, after: Callable[..., tuple]) -> Iterator[None]:
    """Pass what torchrun's ``config_from_args(args)`` returns, ``(config, cmd, cmd_args)``,
    through ``after(args, config, cmd, cmd_args)`` while the context lasts."""
    original = torchrun.config_from_args

    def config_from_args(args: argparse.Namespace) -> Any:
        return after(args, *original(args))

    torchrun.config_from_args = config_from_args
    try:
        yield
    finally:
        torchrun.config_from_args = original


def launch_config_observed(torchrun: Any, observer: Any) -> contextlib.AbstractContextManager:
    """Call ``observer(config)`` with the ``LaunchConfig`` torchrun builds, before it launches.

    torchrun decides the run id inside ``run()`` (a fresh uuid for ``--standalone``) and exposes
    no hook; ``config_from_args`` is the one step between that decision and the first event.
    """

    def observe(args: argparse.Namespace, config: Any, cmd: Any, cmd_args: Any) -> tuple:
        observer(config)
        return config, cmd, cmd_args

    return _config_from_args_wrapped(torchrun, observe)


def workers_bootstrapped(torchrun: Any) -> contextlib.AbstractContextManager:
    """Start every worker torchrun launches through ``launcher.bootstrap``: the worker
    command torchrun builds (``cmd``, ``cmd_args``) is what ``worker_command`` rewrites."""

    def rewrite(args: argparse.Namespace, config: Any, cmd: Any, cmd_args: Any) -> tuple:
        return (config, *worker_command(args, cmd, cmd_args, torchrun.run_script_path))

    return _config_from_args_wrapped(torchrun, rewrite)


def worker_command(
    args: argparse.Namespace,
    cmd: Callable[..., Any] | str,
    cmd_args: list[str],
    run_script_path: Callable[..., Any],
) -> tuple[Callable[..., Any] | str, list[str]]:
    """torchrun's worker command (``config_from_args``' ``cmd`` and ``cmd_args``), started through
    the bootstrap where that is safe; otherwise unchanged.

    ``python -u SCRIPT ...`` and ``python -u -m MODULE ...`` become ``python -u -m BOOTSTRAP
    SCRIPT ...`` and ``... -m BOOTSTRAP -m MODULE ...``; ``--run-path`` (torch's
    ``run_script_path``, called in the worker) becomes ``bootstrap.run_script_path``. Left alone:
    ``--no-python`` (the entrypoint is not Python) and ``$PYTHON_EXEC`` naming an interpreter
    other than ours (it may not have tb_monitor installed), with a warning.
    """
    if args.no_python:
        return cmd, cmd_args
    if args.run_path:
        return (bootstrap.run_script_path if cmd is run_script_path else cmd), cmd_args
    ours = isinstance(cmd, str) and os.path.abspath(cmd) == os.path.abspath(sys.executable)
    if ours and cmd_args[:1] == ["-u"]:
        # One token: torchrun names the job after its first argument not starting with "-".
        return cmd, ["-u", f"-m{BOOTSTRAP}", *cmd_args[1:]]
    _log.warning(
        "tb_monitor: the workers start as %r %r, not with this interpreter (%s) as torchrun "
        "usually starts them: they are not monitored unless the training script calls "
        "tb_monitor.init()",
        cmd,
        cmd_args[:2],
        sys.executable,
    )
    return cmd, cmd_args


def record_every_attempt() -> Callable[[], None]:
    """Make torchelastic's agent record its workers' ends at every failed attempt; return the undo.

    torch's ``SimpleElasticAgent._invoke_run`` restarts the group as soon as monitoring reports a
    failure, and records worker events (``_record_worker_events``) only for the run's final
    result. Wrapping ``LocalElasticAgent._monitor_workers``, a failure that will be followed by
    a restart is recorded the same way first, so that every attempt's failure has the agent's
    record: its exit code (negative: the signal that killed it) and its error file. The final
    attempt is left to torch, which records it as before. torch offers no hook for this.
    """
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    original = LocalElasticAgent.__dict__["_monitor_workers"]
    failed = {WorkerState.FAILED, WorkerState.UNHEALTHY}

    def _monitor_workers(self: Any, worker_group: Any) -> Any:
        result = original(self, worker_group)
        if result.state in failed and getattr(self, "_remaining_restarts", 0) > 0:
            try:
                self._record_worker_events(result)
            except Exception:  # never let recording change how torchelastic restarts
                _log.warning("tb_monitor could not record the failed workers", exc_info=True)
        return result

    LocalElasticAgent._monitor_workers = _monitor_workers

    def undo() -> None:
        if LocalElasticAgent.__dict__.get("_monitor_workers") is _monitor_workers:
            LocalElasticAgent._monitor_workers = original

    return undo


class AgentCapture:
    """The agent's sinks and what it installed into torch, opened once the run id is known.

    Its sinks are a ``TensorboardSink`` on the agent's own run and, with ``prometheus_port``, a
    ``PrometheusSink`` serving the node's ``/metrics``. For that, the agent makes a directory for
    prometheus_client's multi-process mode and exports it (``$PROMETHEUS_MULTIPROC_DIR``, with
    ``$TB_MONITOR_PROMETHEUS``) before any worker starts: each worker's ``init`` then adds a
    ``PrometheusSink`` writing its series there, and the agent serves them all. ``close()``
    removes the directory.
    """

    def __init__(self, logdir: str, destination: str, prometheus_port: int | None = None) -> None:
        self._logdir = logdir
        self._destination = destination
        self._prometheus_port = prometheus_port
        self._sinks: list[Any] = []
        self._bridge: Any = None
        self._undo_attempts: Callable[[], None] | None = None
        self._config: Any = None
        self._hostname: str | None = None
        self._undo_watch: Callable[[], None] | None = None  # what the agent sees of its workers
        self._shared_dir: str | None = None
        if prometheus_port is not None:
            self._shared_dir = tempfile.mkdtemp(prefix="tb-monitor-prometheus-")
            os.environ[prometheus.MULTIPROC_DIR_ENV] = self._shared_dir
            os.environ[prometheus.PROMETHEUS_ENV] = "1"

    def start(self, config: Any) -> None:
        if not config.run_id:  # what launch_agent would do next, done first so we know the id
            config.run_id = str(uuid.uuid4().int)
        self._config = config
        self._hostname = socket.getfqdn(socket.gethostname())  # as torchelastic names it
        run_dir = fs.join(self._logdir, contract.agent_run_name(config.run_id))
        self._sinks.append(TensorboardSink(run_dir))
        if self._prometheus_port is not None:
            self._sinks.append(prometheus.PrometheusSink(port=self._prometheus_port))
        handlers = Fanout(self._sinks).handlers()
        self._bridge = install(
            logging_handler=handlers.logging,
            metric_handler=handlers.metric,
            destinations=(DEFAULT_DESTINATION, self._destination, "dynamic_rendezvous"),
        )
        self._undo_attempts = record_every_attempt()
        self._undo_watch = agent_hooks.install(DEFAULT_DESTINATION, self._logdir)

    def terminated(self, signum: int, exit_code: int) -> None:
        """Record the agent's verdict on a run that a signal to it ended (a scheduler's
        preemption, Ctrl-C): TERMINATED, with the signal and the exit code torchrun ends with.

        torchelastic records such a run as FAILED, as it would a crash; ``tb-monitor report``
        reads this record as the run's end instead (``analysis.jobs``, ``analysis.health``).
        """
        from torch.distributed.elastic.events import Event, EventSource, record

        name = signal.Signals(signum).name
        metadata = {
            "run_id": getattr(self._config, "run_id", None),
            "role": getattr(self._config, "role", None),
            "hostname": self._hostname,
            "state": "TERMINATED",
            "signal": name,
            "exit_code": exit_code,
            "raw_error": f"the agent received {name}",
            "stop_began": agent_hooks.stop_began(),  # every failure after it is collateral
            "recorded_by": "tb_monitor",
        }
        event = Event(
            f"{_AGENT_EVENT_PREFIX}TERMINATED", source=EventSource.AGENT, metadata=metadata
        )
        try:
            record(event, self._destination)
        except Exception:  # the signal must end torchrun as it would have, whatever happens here
            _log.warning("tb_monitor could not record the agent's TERMINATED", exc_info=True)

    def close(self) -> None:
        """Uninstall and flush: torch's last events (agent SUCCEEDED/FAILED) are already queued."""
        if self._undo_watch is not None:
            self._undo_watch()
            self._undo_watch = None
        if self._undo_attempts is not None:
            self._undo_attempts()
            self._undo_attempts = None
        if self._bridge is not None:
            self._bridge.close()
        for sink in self._sinks:
            sink.close()
        if self._shared_dir is not None:
            shutil.rmtree(self._shared_dir, ignore_errors=True)
            for name in (prometheus.MULTIPROC_DIR_ENV, prometheus.PROMETHEUS_ENV):
                os.environ.pop(name, None)
