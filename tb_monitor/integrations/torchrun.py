"""What ``tb-monitor run`` installs into torchrun's agent process (``tb_monitor.cli.run``).

torchrun decides the run id inside ``run()`` and exposes no hook: ``launch_config_observed``
watches the launch config it builds, and ``AgentCapture`` then opens the agent's own run and
installs our handlers into torchelastic's events and metrics (``integrations.torch``).

torchelastic's agent records its workers' ends (``torchelastic.worker.status.FAILED`` with the
exit code and the error file, ``TERMINATED``) only once, when the whole run ends: a failure that
leads to a restart leaves no agent record, and a worker killed by a signal cannot record itself.
``record_every_attempt`` makes the agent record them for every failed attempt too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tb_monitor import contract
from tb_monitor.integrations.torch import install
from tb_monitor.logdir import fs
from tb_monitor.sinks import AsyncWriter, TensorboardLoggingHandler, TensorboardMetricHandler

__all__ = ["DEFAULT_DESTINATION", "AgentCapture", "launch_config_observed", "record_every_attempt"]

#: The events destination the agent records to unless the user chose one.
DEFAULT_DESTINATION = "tensorboard"


@contextlib.contextmanager
def launch_config_observed(torchrun: Any, observer: Any) -> Iterator[None]:
    """Call ``observer(config)`` with the ``LaunchConfig`` torchrun builds, before it launches.

    torchrun decides the run id inside ``run()`` (a fresh uuid for ``--standalone``) and exposes
    no hook; ``config_from_args`` is the one step between that decision and the first event.
    """
    original = torchrun.config_from_args

    def config_from_args(args: argparse.Namespace) -> Any:
        config, cmd, cmd_args = original(args)
        observer(config)
        return config, cmd, cmd_args

    torchrun.config_from_args = config_from_args
    try:
        yield
    finally:
        torchrun.config_from_args = original


_log = logging.getLogger("tb_monitor")


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
    """The agent's writer and what it installed into torch, opened once the run id is known."""

    def __init__(self, logdir: str, destination: str) -> None:
        self._logdir = logdir
        self._destination = destination
        self._writer: Any = None
        self._bridge: Any = None
        self._undo_attempts: Callable[[], None] | None = None

    def start(self, config: Any) -> None:
        if not config.run_id:  # what launch_agent would do next, done first so we know the id
            config.run_id = str(uuid.uuid4().int)
        run_dir = fs.join(self._logdir, contract.agent_run_name(config.run_id))
        self._writer = AsyncWriter(run_dir)
        self._bridge = install(
            logging_handler=TensorboardLoggingHandler(self._writer),
            metric_handler=TensorboardMetricHandler(self._writer),
            destinations=(DEFAULT_DESTINATION, self._destination, "dynamic_rendezvous"),
        )
        self._undo_attempts = record_every_attempt()

    def close(self) -> None:
        """Uninstall and flush: torch's last events (agent SUCCEEDED/FAILED) are already queued."""
        if self._undo_attempts is not None:
            self._undo_attempts()
            self._undo_attempts = None
        if self._bridge is not None:
            self._bridge.close()
        if self._writer is not None:
            self._writer.close()
