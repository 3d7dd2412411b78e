"""What the framework adapters (``lightning``, ``huggingface``, ``accelerate``) share: one run
per process, hyperparameters as a session of TensorBoard's HParams dashboard, and a dict of
logged values as summaries.

Hyperparameters are written as a session start (``_hparams_/session_start_info``) in the run
itself, never as an experiment summary: without one, TensorBoard builds the experiment from every
run's sessions, and its metric columns are the scalars those runs hold (``train/loss``,
``val_acc``, ...). An experiment summary would have to name its metrics before training logs any,
which is why Lightning writes a placeholder ``hp_metric`` and why transformers' callback leaves the
dashboard empty (transformers issue 9149). Only a run's first session start counts: TensorBoard
keeps the first metadata of a tag.
"""

from __future__ import annotations

import logging
import numbers
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tb_monitor.logdir import fs

if TYPE_CHECKING:
    from tb_monitor import SummaryWriter

__all__ = ["end_session", "flat_hparams", "log_values", "rank_run", "start_session"]

_log = logging.getLogger("tb_monitor")

#: A framework's end status, as TensorBoard's HParams ``Status`` names it.
_STATUS = {
    "success": "STATUS_SUCCESS",
    "finished": "STATUS_SUCCESS",
    "failed": "STATUS_FAILURE",
    "aborted": "STATUS_ABORTED",
}


def rank_run(root: str, rank: int) -> str:
    """This process's run under ``root``: ``<root>/rank-<rank>``, the layout of tb-monitor's
    worker runs (``contract.run_name_from_env``), which its Ranks view and report read."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"tb_monitor: a rank is a non-negative int, got {rank!r}")
    return fs.join(root, f"rank-{rank}")


def flat_hparams(params: Mapping[str, Any], separator: str = "/") -> dict[str, bool | float | str]:
    """``params`` as the HParams dashboard takes them: nested mappings flattened into
    ``outer/inner`` keys, numbers (numpy's and one-element tensors too) as Python numbers, and
    anything else (None, lists, objects) as its ``str``."""
    flat: dict[str, bool | float | str] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            for inner, each in flat_hparams(value, separator).items():
                flat[f"{key}{separator}{inner}"] = each
        else:
            flat[str(key)] = _hparam_value(value)
    return flat


def _hparam_value(value: Any) -> bool | float | str:
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Real):
        return value.item() if hasattr(value, "item") else value  # type: ignore[return-value]
    if not isinstance(value, numbers.Number) and _is_scalar(value):
        return _hparam_value(value.item())  # a one-element tensor: read once, at the start
    return str(value)


def start_session(
    writer: SummaryWriter, hparams: Mapping[str, Any], group: str | None = None
) -> None:
    """Write ``hparams`` (flattened by ``flat_hparams``) as this run's HParams session.

    Sessions of one ``group`` (a job's ranks) form one row of the dashboard; without a group,
    TensorBoard groups runs whose hyperparameters are equal.
    """
    from tensorboard.plugins.hparams import summary_v2

    try:
        summary = summary_v2.hparams_pb(flat_hparams(hparams), trial_id=group)
    except Exception as exc:  # hyperparameters must never stop training
        _log.warning("tb_monitor: hyperparameters left out of %s: %r", writer.get_logdir(), exc)
        return
    writer._get_file_writer().add_summary(summary, None, time.time())


def end_session(writer: SummaryWriter, status: str) -> None:
    """Write the end of this run's HParams session: ``status`` as the framework names it
    (``success``, ``failed``, ...; another word is ``STATUS_UNKNOWN``)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    now = time.time()
    end = plugin_data_pb2.SessionEndInfo(
        status=api_pb2.Status.Value(_STATUS.get(status, "STATUS_UNKNOWN")), end_time_secs=now
    )
    summary = Summary()
    summary.value.add(
        tag=metadata.SESSION_END_INFO_TAG,
        metadata=metadata.create_summary_metadata(
            plugin_data_pb2.HParamsPluginData(session_end_info=end)
        ),
        tensor=metadata.NULL_TENSOR,
    )
    writer._get_file_writer().add_summary(summary, None, now)


def log_values(writer: SummaryWriter, values: Mapping[str, Any], step: int | None) -> None:
    """Each value as its summary at ``step``: a number or one-element tensor a scalar (the
    tensor is not read on this thread), a str a text, a dict of numbers ``add_scalars``.
    Anything else is left out with a warning naming it: a logged value must never stop
    training."""
    for key, value in values.items():
        if isinstance(value, str):
            writer.add_text(key, value, step)
        elif isinstance(value, Mapping):
            writer.add_scalars(key, dict(value), step)
        elif _is_scalar(value):
            writer.add_scalar(key, value, step)
        else:
            _log.warning(
                "tb_monitor: left out %r: %r (a %s) is not a number, one-element tensor, str "
                "or dict",
                key,
                value,
                type(value).__name__,
            )


def _is_scalar(value: Any) -> bool:
    if isinstance(value, numbers.Number):
        return True
    numel = getattr(value, "numel", None)  # a tensor's size is known without reading it
    return callable(numel) and numel() == 1
