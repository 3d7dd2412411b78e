"""Lightning's logger and a rank-health callback, on every rank (``pip install 'tb-monitor[lightning]'``).

    >>> from tb_monitor.integrations.lightning import RankHealthCallback, TBMonitorLogger
    >>> trainer = L.Trainer(logger=TBMonitorLogger("logs"), callbacks=[RankHealthCallback()])

``TBMonitorLogger`` is Lightning's ``TensorBoardLogger`` with two differences. Every rank
writes, each to its own run, ``<save_dir>/<name>/<version>/rank-<global rank>`` (Lightning's
own loggers write on rank 0 only, Lightning issue 20371): the layout of tb-monitor's worker runs,
so the ranks' curves overlay in TensorBoard and the Ranks view and ``tb-monitor report`` read
them. Point ``tb-monitor report`` at ``<save_dir>/<name>``: it takes a run's top directory, here
the version, for its job. Under ``tb-monitor run``, ``TBMonitorLogger($TB_MONITOR_LOGDIR,
name=None)`` writes into the very runs tb-monitor writes (``<run id>/rank-<RANK>``). And it
writes through ``tb_monitor.SummaryWriter``, off the training thread, which also fills the
HParams dashboard with the runs' own scalars as metrics (no ``hp_metric``).

``RankHealthCallback`` gives rank health (``rank/step_s``, stragglers, hangs) to a Lightning
job that is not run by ``tb-monitor run``: it opens the monitor in each rank's run.
"""

from __future__ import annotations

import logging
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from tb_monitor import contract
from tb_monitor.integrations import _tracking
from tb_monitor.logdir import fs
from tb_monitor.rank.health import step as mark_step

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from tb_monitor import SummaryWriter
    from tb_monitor.monitor import Monitor

__all__ = ["RankHealthCallback", "TBMonitorLogger"]

_log = logging.getLogger("tb_monitor")
#: What ``TORCHELASTIC_RUN_ID`` is when torchrun was given none: shared by unrelated jobs.
_NO_RUN_ID = "none"


class TBMonitorLogger(Logger):
    """Lightning's TensorBoard logger, writing on every rank to ``<root_dir>/<version>/rank-<N>``.

    ``version`` (default: agreed by every rank without a collective, see ``version``) is an int
    (directory ``version_<N>``) or a str (the directory's name). Keyword arguments go to
    ``tb_monitor.SummaryWriter`` (``flush_secs``, ``max_queue``, ...).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self._save_dir = os.fspath(save_dir)
        self._name = name or ""
        self._prefix = prefix
        self._writer_kwargs = kwargs
        self._version = _agreed_version(self.root_dir) if version is None else version
        self._hparams: dict[str, Any] = {}
        self._experiment: SummaryWriter | None = None
        self._hparams_saved = False

    @property
    def name(self) -> str:
        """The experiment's name: the directory under ``save_dir``."""
        return self._name

    @property
    def version(self) -> int | str:
        """The same on every rank, without a collective: the one given, else torchrun's run id
        (``TORCHELASTIC_RUN_ID``, unless ``none``), else one more than the highest
        ``version_<N>`` under ``root_dir`` holding runs, which each rank reads when the logger
        is made, before any rank writes (writers open after the process group is up). Two
        ``fit``s in one script under one ``root_dir``: pass ``version``."""
        return self._version

    @property
    def save_dir(self) -> str:
        """The directory given as ``save_dir``."""
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: every version of this experiment."""
        return fs.join(self._save_dir, self._name) if self._name else self._save_dir

    @property
    def log_dir(self) -> str:
        """``<root_dir>/<version>``: this job's directory, holding one run per rank (point
        ``tensorboard --logdir`` here to compare ranks)."""
        version = self._version
        return fs.join(self.root_dir, f"version_{version}" if isinstance(version, int) else version)

    @property
    def experiment(self) -> SummaryWriter:
        """This rank's ``tb_monitor.SummaryWriter``, writing to ``<log_dir>/rank-<global rank>``
        (opened on first use, after Lightning has set the rank)."""
        if self._experiment is None:
            from tb_monitor import SummaryWriter

            run = _tracking.rank_run(self.log_dir, rank_zero_only.rank)
            self._experiment = SummaryWriter(run, **self._writer_kwargs)
        return self._experiment

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Each metric as a scalar (a dict as ``add_scalars``), tags prefixed by ``prefix``."""
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
        _tracking.log_values(self.experiment, metrics, step)

    def log_hyperparams(
        self,
        params: Mapping[str, Any] | Namespace,
        metrics: Mapping[str, Any] | None = None,
        step: int | None = None,
    ) -> None:
        """``params`` as this rank's HParams session, grouped with the job's other ranks;
        ``metrics``, if given, logged as scalars. TensorBoard keeps a run's first session: log
        every hyperparameter in one call (Lightning does, at ``fit``)."""
        params = vars(params) if isinstance(params, Namespace) else dict(params)
        self._hparams.update(params)
        _tracking.start_session(self.experiment, self._hparams, group=self._group())
        if metrics:
            self.log_metrics(metrics, step)

    def save(self) -> None:
        """Rank 0 writes ``hparams.yaml`` into ``log_dir`` once, as Lightning's logger does
        (``load_from_checkpoint(hparams_file=...)`` reads it). Events need no saving: the
        writer flushes on its own thread every ``flush_secs``."""
        if self._hparams_saved or not self._hparams or rank_zero_only.rank != 0:
            return
        from lightning.pytorch.core.saving import save_hparams_to_yaml

        self._hparams_saved = True
        try:
            fs.makedirs(self.log_dir)
            save_hparams_to_yaml(fs.join(self.log_dir, "hparams.yaml"), self._hparams)
        except Exception as exc:  # a file beside the logs must never stop training
            _log.warning("tb_monitor: hparams.yaml not written to %s: %r", self.log_dir, exc)

    def finalize(self, status: str) -> None:
        """End this rank's HParams session with ``status`` and close its writer (a later log
        opens a new event file in the same run)."""
        if self._experiment is None:
            return
        if self._hparams:
            _tracking.end_session(self._experiment, status)
        self._experiment.close()
        self._experiment = None
        self.save()

    def _group(self) -> str:
        """The HParams session group of this job's ranks: its directory under ``save_dir``."""
        return fs.run_name(self._save_dir, self.log_dir)

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles the logger into each process: the writer stays here, and each
        # process opens its own on first use.
        return {**self.__dict__, "_experiment": None}


def _agreed_version(root_dir: str) -> int | str:
    """The version every rank of this job computes alike (``TBMonitorLogger.version``)."""
    worker_run = contract.run_name_from_env()  # "<run id>/rank-<RANK>", the id as a path part
    if worker_run and os.environ.get("TORCHELASTIC_RUN_ID") != _NO_RUN_ID:
        return worker_run.split("/", 1)[0]
    try:
        runs = [run for run, _ in fs.run_dirs(root_dir)]
    except FileNotFoundError:
        return 0
    numbers = [
        int(top[len("version_") :])
        for top in (run.split("/", 1)[0] for run in runs)
        if top.startswith("version_") and top[len("version_") :].isdigit()
    ]
    return max(numbers, default=-1) + 1


class RankHealthCallback(Callback):
    """Rank health for a Lightning job: each rank's step times (``rank/step_s``), time in
    collectives and heartbeats, in its run.

    At ``fit`` it opens ``tb_monitor.init(torch=True)`` in this rank's run (the
    ``TBMonitorLogger``'s ``<log_dir>/rank-<N>`` when the trainer has one, else
    ``<default_root_dir>/rank_health/rank-<N>``) and closes it at teardown, unless a monitor is
    open already (``tb-monitor run``, or the script's own ``init``): then it records into that.

    Steps: with automatic optimization, rank health's own optimizer hook marks a step at each
    optimizer ``step()`` (so with gradient accumulation a step is one optimizer step, as
    everywhere in tb-monitor), and the callback marks none: marking batches too would count
    each step twice. With manual optimization, where ``training_step`` may step several
    optimizers or none, a step is a batch: the callback marks the start of training and each
    ``on_train_batch_end`` (``tb_monitor.step()``; from then on only these count).
    """

    def __init__(self) -> None:
        self._monitor: Monitor | None = None
        self._marks_batches = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Open this rank's monitor, unless one is open."""
        from tb_monitor import monitor

        # Not opened over one already open: init() would close it (tb-monitor run's, say).
        if stage != "fit" or monitor.active() is not None:
            return
        self._monitor = monitor.init(_monitor_logdir(_rank_run_of(trainer)), torch=True)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Decide what marks a step: optimizer steps, or (manual optimization) batches, the
        first timed from here (from now on optimizer steps do not count)."""
        self._marks_batches = not pl_module.automatic_optimization
        if self._marks_batches:
            mark_step()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Under manual optimization, a batch's end is a step boundary."""
        if self._marks_batches:
            mark_step()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Close the monitor ``setup`` opened: its last windows are written."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.close()


def _rank_run_of(trainer: pl.Trainer) -> str:
    """This rank's run: the ``TBMonitorLogger``'s, else one under ``default_root_dir``."""
    for logger in trainer.loggers:
        if isinstance(logger, TBMonitorLogger):
            return logger.experiment.get_logdir()
    root = fs.join(trainer.default_root_dir, "rank_health")
    return _tracking.rank_run(root, trainer.global_rank)


def _monitor_logdir(run_dir: str) -> str:
    """The logdir for which ``tb_monitor.init`` writes this process's records to ``run_dir``:
    inside a torchelastic worker, ``init`` puts them in ``<logdir>/<run id>/rank-<RANK>``."""
    run = contract.run_name_from_env()
    suffix = "/" + run
    if run and run_dir.replace(os.sep, "/").endswith(suffix):
        return run_dir[: -len(suffix)]
    return run_dir
