"""transformers' ``TensorBoardCallback``, off the training thread (``pip install 'tb-monitor[transformers]'``).

    >>> from tb_monitor.integrations.huggingface import TBMonitorCallback
    >>> args = TrainingArguments("out", report_to="none")  # leaves transformers' callback out
    >>> trainer = Trainer(model, args, train_dataset=data, callbacks=[TBMonitorCallback()])

(With ``report_to`` naming ``"tensorboard"``, or ``"all"``, remove transformers' callback first:
``trainer.remove_callback(transformers.integrations.TensorBoardCallback)``.)

What users know from ``TensorBoardCallback`` stays: the same log directory, the ``args`` and
``model_config`` texts, each logged value under the same tag (``train/loss``, ``eval/loss``),
on the world's process zero only (the Trainer's logs are already gathered across processes).
Two things change: the training arguments fill TensorBoard's HParams dashboard (transformers
issue 9149), with the run's scalars as its metrics, and ``on_log`` no longer flushes: the writer
writes on its own thread every ``flush_secs``, and everything accepted is on disk by the end of
training, an exit or a SIGTERM.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback
from transformers.integrations.integration_utils import default_logdir, rewrite_logs

from tb_monitor.integrations import _tracking

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from tb_monitor import SummaryWriter

__all__ = ["TBMonitorCallback"]


class TBMonitorCallback(TrainerCallback):
    """Sends the Trainer's logs to TensorBoard through ``tb_monitor.SummaryWriter``.

    ``tb_writer``: a writer to use (default: one opened at the start of training). ``log_dir``
    (default: ``$TENSORBOARD_LOGGING_DIR``, else ``<output_dir>/runs/<date>_<host>``, as
    transformers' callback).
    """

    def __init__(
        self, tb_writer: SummaryWriter | None = None, log_dir: str | os.PathLike[str] | None = None
    ) -> None:
        self.tb_writer = tb_writer
        given = log_dir if log_dir is not None else os.getenv("TENSORBOARD_LOGGING_DIR")
        self.logging_dir = None if given is None else os.path.expanduser(os.fspath(given))

    def _writer(self, args: TrainingArguments) -> SummaryWriter:
        if self.tb_writer is None:
            from tb_monitor import SummaryWriter

            if self.logging_dir is None:
                self.logging_dir = os.path.join(args.output_dir, default_logdir())
            self.tb_writer = SummaryWriter(log_dir=self.logging_dir)
        return self.tb_writer

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """The arguments and the model's config as text, and the arguments as hyperparameters."""
        if not state.is_world_process_zero:
            return
        if state.is_hyper_param_search and state.trial_name is not None:
            self.logging_dir = os.path.join(args.output_dir, default_logdir(), state.trial_name)
        writer = self._writer(args)
        writer.add_text("args", args.to_json_string())
        config = getattr(kwargs.get("model"), "config", None)
        if config is not None:
            writer.add_text("model_config", config.to_json_string())
        _tracking.start_session(writer, args.to_sanitized_dict())

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Each logged value under transformers' tag (``train/``, ``eval/``, ``test/``), at the
        global step; no flush."""
        if not state.is_world_process_zero or not logs:
            return
        _tracking.log_values(self._writer(args), rewrite_logs(logs), state.global_step)

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """End the HParams session and close the writer: everything logged is on disk."""
        writer, self.tb_writer = self.tb_writer, None
        if writer is not None:
            if state.is_world_process_zero:
                _tracking.end_session(writer, "success")
            writer.close()
