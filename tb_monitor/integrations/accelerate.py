"""An Accelerate tracker that writes on every process (``pip install 'tb-monitor[accelerate]'``).

    >>> from tb_monitor.integrations.accelerate import TBMonitorTracker
    >>> tracker = TBMonitorTracker("my_project", "logs")  # on every process
    >>> accelerator = Accelerator(log_with=tracker); accelerator.init_trackers("my_project")

Each process writes its own run, ``<logging_dir>/<run_name>/rank-<process index>`` (the layout of
tb-monitor's worker runs, which its Ranks view and report read), through
``tb_monitor.SummaryWriter``, off the training thread and with no flush per ``log``.
``main_process_only = False`` lets every process call it; ``Accelerator.init_trackers`` and
``Accelerator.log`` themselves run on the main process only, so the other processes log by
calling the tracker: ``tracker.log({"loss": loss}, step=step)`` (its run opens on first use).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from accelerate.tracking import GeneralTracker

from tb_monitor.integrations import _tracking
from tb_monitor.logdir import fs

if TYPE_CHECKING:
    from tb_monitor import SummaryWriter

__all__ = ["TBMonitorTracker"]


class TBMonitorTracker(GeneralTracker):
    """``accelerate``'s TensorBoard tracker, one run per process; keyword arguments go to
    ``tb_monitor.SummaryWriter`` (``flush_secs``, ``max_queue``, ...)."""

    name = "tb_monitor"
    requires_logging_directory = True
    main_process_only = False

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = fs.join(os.fspath(logging_dir), run_name)
        self._writer_kwargs = kwargs
        self._writer: SummaryWriter | None = None
        self._session = False  # whether store_init_configuration began an HParams session

    def start(self) -> None:
        """Open this process's run (``log`` opens it too, where ``init_trackers`` did not run)."""
        if self._writer is None:
            from accelerate import PartialState

            from tb_monitor import SummaryWriter

            run = _tracking.rank_run(self.logging_dir, PartialState().process_index)
            self._writer = SummaryWriter(run, **self._writer_kwargs)

    @property
    def tracker(self) -> SummaryWriter:
        """This process's ``tb_monitor.SummaryWriter``."""
        self.start()
        assert self._writer is not None
        return self._writer

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """``values`` as this process's HParams session, grouped with the other processes';
        the dashboard's metrics are the scalars the run holds."""
        _tracking.start_session(self.tracker, values, group=self.run_name)
        self._session = True

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers and tensors as scalars, str as text, dicts of numbers as ``add_scalars``
        (``kwargs``, which Accelerate passes from ``log_kwargs``, are not used)."""
        _tracking.log_values(self.tracker, values, step)

    def finish(self) -> None:
        """End the HParams session and close this process's run: everything logged is on disk."""
        writer, self._writer = self._writer, None
        if writer is not None:
            if self._session:
                _tracking.end_session(writer, "success")
            writer.close()
