"""What runs on the writer's thread: torch's (or tensorboardX's) own summary builders, called on
the captured arguments, and the ``Event`` around each summary.

Nothing here re-derives a summary: every proto comes from the builder ``SummaryWriter`` of torch
would call, so what lands in the logdir is what torch's writer writes for the same call.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any

__all__ = [
    "backend",
    "default_bins",
    "event",
    "histogram",
    "hparams",
    "make_np",
    "pr_curve",
    "restart_events",
    "scalar",
    "summary_event",
    "utils",
]

_EXTRA_HINT = (
    "tb_monitor.SummaryWriter builds summaries with torch's or tensorboardX's builders; "
    "install one: pip install 'tb-monitor[torch]' (or tensorboardX)"
)


@functools.cache
def backend() -> ModuleType:
    """The summary builders: torch's when torch is installed (what its writer writes), else
    tensorboardX's; ImportError naming the extra when neither is."""
    for name in ("torch.utils.tensorboard.summary", "tensorboardX.summary"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(_EXTRA_HINT)


def utils() -> ModuleType:
    """The backend's helpers module (``figure_to_image``, ``convert_to_HWC``)."""
    name = backend().__name__.rsplit(".", 1)[0]
    return importlib.import_module(
        f"{name}._utils" if name.startswith("torch") else f"{name}.utils"
    )


def make_np(value: Any) -> Any:
    """The backend's own conversion to numpy (and its errors for what it cannot convert)."""
    module = backend()
    return module.make_np(value)


@functools.cache
def default_bins() -> list[float]:
    """The histogram bins of ``bins="tensorflow"``: torch's ``SummaryWriter.default_bins``."""
    v, buckets = 1e-12, []
    while v < 1e20:
        buckets.append(v)
        v *= 1.1
    return [-b for b in reversed(buckets)] + [0] + buckets


def event(step: Any = None, **fields: Any) -> Any:
    """An ``Event`` with ``fields``; its step ``int(step)`` unless None (then 0), as torch's."""
    from tensorboard.compat.proto.event_pb2 import Event

    made = Event(**fields)
    if step is not None:
        made.step = int(step)
    return made


def restart_events(step: int) -> tuple[Any, Any]:
    """What torch's ``purge_step`` writes first: a file version and a SessionLog START at
    ``step``, which make TensorBoard drop what an earlier run logged from that step on."""
    from tensorboard.compat.proto.event_pb2 import SessionLog

    start = SessionLog(status=SessionLog.START)
    return event(step, file_version="brain.Event:2"), event(step, session_log=start)


def summary_event(step: Any, summary: Any) -> Any:
    """The ``Event`` at ``step`` holding ``summary`` (a builder's, torch's or tensorboardX's)."""
    return event(step, summary=_tensorboards(summary))


def _tensorboards(summary: Any) -> Any:
    """``summary`` as TensorBoard's ``Summary``: tensorboardX's builders make their own class."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    if isinstance(summary, Summary):
        return summary
    return Summary.FromString(summary.SerializeToString())


def histogram(tag: str, values: Any, bins: Any, max_bins: int | None = None) -> Any:
    """torch's ``histogram``, with ``bins="tensorflow"`` as its writer's default bins."""
    if isinstance(bins, str) and bins == "tensorflow":
        bins = default_bins()
    return backend().histogram(tag, values, bins, max_bins=max_bins)


def pr_curve(tag: str, labels: Any, predictions: Any, num_thresholds: int, weights: Any) -> Any:
    """torch's ``pr_curve`` on labels and predictions converted as its writer converts them."""
    labels, predictions = make_np(labels), make_np(predictions)
    return backend().pr_curve(tag, labels, predictions, num_thresholds, weights)


def hparams(part: int, hparam_dict: dict, metric_dict: dict, domain: dict | None) -> Any:
    """One of the three summaries of torch's ``hparams``: 0 the experiment, 1 the session's
    start, 2 its end (tensorboardX's builder takes no domains)."""
    if domain:
        return backend().hparams(hparam_dict, metric_dict, domain)[part]
    return backend().hparams(hparam_dict, metric_dict)[part]


def scalar(tag: str, value: Any, new_style: bool = False, double_precision: bool = False) -> Any:
    """torch's ``scalar``; tensorboardX's takes neither style argument."""
    if new_style or double_precision:
        return backend().scalar(tag, value, new_style=new_style, double_precision=double_precision)
    return backend().scalar(tag, value)
