"""What ``tb-monitor run`` installs into torchrun's agent process (``tb_monitor.cli.run``).

torchrun decides the run id inside ``run()`` and exposes no hook: ``launch_config_observed``
watches the launch config it builds, and ``AgentCapture`` then opens the agent's own run and
installs our handlers into torchelastic's events and metrics (``integrations.torch``).
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from tb_monitor import contract
from tb_monitor.integrations.torch import install
from tb_monitor.logdir import fs
from tb_monitor.sinks import AsyncWriter, TensorboardLoggingHandler, TensorboardMetricHandler

__all__ = ["DEFAULT_DESTINATION", "AgentCapture", "launch_config_observed"]

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


class AgentCapture:
    """The agent's writer and what it installed into torch, opened once the run id is known."""

    def __init__(self, logdir: str, destination: str) -> None:
        self._logdir = logdir
        self._destination = destination
        self._writer: Any = None
        self._bridge: Any = None

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

    def close(self) -> None:
        """Uninstall and flush: torch's last events (agent SUCCEEDED/FAILED) are already queued."""
        if self._bridge is not None:
            self._bridge.close()
        if self._writer is not None:
            self._writer.close()
