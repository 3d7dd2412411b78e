"""The errors torch's ``SummaryWriter`` raises for wrong input, raised on the caller's thread from
metadata alone (types and shapes: nothing read from a device), so that a mistake is reported
where it is made while the summary itself is built later on the writer's thread.

Each check finds the mistake from the shape or type; then torch's own code raises it, run on
an array of that shape holding no data (``_nothing``: one zero, broadcast), so the error is
the one the installed torch raises, message and all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tb_monitor._tensors import is_tensor
from tb_monitor.summary import builders

__all__ = [
    "array",
    "audio",
    "bins",
    "box_labels",
    "hparams",
    "image",
    "layout",
    "one_element",
    "same_length",
    "shape",
    "tag",
    "tensor_proto",
    "values",
    "video",
]

#: What ``bins`` may be as a string: torch's default, or an estimator of ``numpy.histogram``.
_BIN_ESTIMATORS = ("tensorflow", "auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")


def tag(value: object) -> str:
    """A summary's tag: a str, else TypeError naming it."""
    if not isinstance(value, str):
        raise TypeError(f"tag must be a str, got {value!r:.100}")
    return value


def array(value: Any) -> Any:
    """``value`` if it is a tensor; else as torch's ``make_np`` converts it (a numpy array, or
    its NotImplementedError for what is neither an array, a tensor nor a number)."""
    return value if is_tensor(value) else builders.make_np(value)


def shape(value: Any) -> tuple[int, ...]:
    """The shape of a tensor or numpy array (metadata only)."""
    return tuple(value.shape)


def _nothing(dims: tuple[int, ...]) -> Any:
    """An array of shape ``dims`` that holds no data (a zero, broadcast): for torch's checks."""
    import numpy

    return numpy.broadcast_to(numpy.zeros((), numpy.float32), dims)


def _raise(build: Any, *args: Any, **kwargs: Any) -> None:
    """Call torch's ``build`` on what the caller's input was found wrong in, so that it raises
    its own error; a build that accepts it after all is a bug of ours, said so."""
    build(*args, **kwargs)
    raise AssertionError(f"tb_monitor: {build.__name__} was expected to refuse its input")


def one_element(value: Any) -> Any:
    """A scalar's value (tensor or array): torch's AssertionError unless it holds one element."""
    value = array(value)
    dims = shape(value)
    if any(d != 1 for d in dims):
        _raise(builders.backend().scalar, "x", _nothing(dims))
    return value


def _size(value: Any) -> int:
    return int(value.numel()) if is_tensor(value) else int(value.size)


def values(value: Any) -> Any:
    """A histogram's values: torch's ValueError when there are none."""
    value = array(value)
    if _size(value) == 0:
        _raise(builders.backend().histogram, "x", _nothing(shape(value)), "auto")
    return value


def bins(value: Any) -> None:
    """``bins`` as numpy takes it: a string must name one of its estimators."""
    if isinstance(value, str) and value not in _BIN_ESTIMATORS:
        raise ValueError(f"{value!r} is not a valid estimator for `bins`")


def box_labels(labels: Any, boxes: Any) -> Any:
    """The labels ``add_image_with_boxes`` draws, as torch takes them: a lone string is one
    label; labels that are not one per box are dropped (None), not an error."""
    if isinstance(labels, str):
        labels = [labels]
    return None if labels is None or len(labels) != boxes.shape[0] else labels


def image(value: Any, dataformats: str) -> Any:
    """An image's tensor: torch's AssertionError for a format that does not fit its shape."""
    value = array(value)
    dims = shape(value)
    fits = len(set(dataformats)) == len(dataformats) and len(dims) == len(dataformats)
    if fits and len(dims) == 4:
        fits = dims[dataformats.upper().find("C")] in (1, 3)  # make_grid's channels
    if not fits:
        _raise(builders.utils().convert_to_HWC, _nothing(dims), dataformats)
    return value


def video(value: Any) -> Any:
    """A video's tensor: torch's ValueError unless it is ``(N, T, C, H, W)``."""
    value = array(value)
    dims = shape(value)
    if len(dims) != 5:
        _raise(builders.utils()._prepare_video, _nothing(dims))
    return value


def audio(value: Any) -> Any:
    """A sound's tensor: torch's error unless one dimension remains after squeezing."""
    value = array(value)
    dims = shape(value)
    if sum(1 for d in dims if d != 1) != 1:
        _raise(builders.backend().audio, "x", _nothing(dims))
    return value


def tensor_proto(name: str, value: Any) -> None:
    """``add_tensor``'s tensor: torch's errors for what is no tensor, one past 2 GB or of a dtype
    it lacks (torch checks these before it reads the values)."""
    too_big = value.numel() * value.itemsize >= (1 << 31)
    if too_big or value.dtype not in getattr(builders.backend(), "_TENSOR_TYPE_MAP", {}):
        _raise(builders.backend().tensor_proto, name, value)


def layout(layout: dict) -> None:
    """A custom-scalars layout: torch's AssertionError for a margin chart without 3 tags."""
    for charts in layout.values():
        for chart in charts.values():
            if chart[0] == "Margin" and len(chart[1]) != 3:
                raise AssertionError("len(tags) != 3")


def hparams(hparam_dict: Any, metric_dict: Any, domain: Any) -> None:
    """``add_hparams``' arguments: torch's TypeError, ValueError or IndexError for what it
    refuses (a tensor value must have a first element: torch logs that)."""
    if type(hparam_dict) is not dict or type(metric_dict) is not dict:
        raise TypeError("hparam_dict and metric_dict should be dictionary.")
    if not _hparams_fit(hparam_dict, domain or {}):
        _raise(builders.backend().hparams, hparam_dict, metric_dict, domain)


def _hparams_fit(hparam_dict: dict, domain: Any) -> bool:
    if not isinstance(domain, dict):
        return False
    for key, choices in domain.items():
        if key not in hparam_dict or not isinstance(choices, list):
            return False
        if not all(isinstance(choice, type(hparam_dict[key])) for choice in choices):
            return False
    for value in hparam_dict.values():
        if is_tensor(value):
            if value.dim() == 0:
                return False
        elif not (value is None or isinstance(value, (int, float, str, bool))):
            return False
    return True


def same_length(limits: Sequence, counts: Sequence) -> None:
    """``add_histogram_raw``'s buckets: torch's ValueError when the lengths differ."""
    if len(limits) != len(counts):
        raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
