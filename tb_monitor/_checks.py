"""Checks of the values callers hand us (tags, steps, wall times, scalar values), on the caller's
thread, so that a mistake is reported where it is made: ``AsyncWriter.add_*`` (the writer thread
then encodes without checking again) and ``put_metric`` once a handler failed."""

from __future__ import annotations

import math
import operator
import time
from typing import Any

from tb_monitor import _tensors

__all__ = ["options", "real", "scalar_value", "step", "tag", "wall_time"]


def options(flush_secs: object, max_queue: object, when_full: object) -> None:
    """``AsyncWriter``'s options, or ValueError naming the bad one."""
    if not (isinstance(flush_secs, (int, float)) and 0 < flush_secs < math.inf):
        raise ValueError(f"flush_secs must be a positive number of seconds, got {flush_secs!r}")
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
        raise ValueError(f"max_queue must be a positive number of records, got {max_queue!r}")
    if when_full not in ("block", "drop"):
        raise ValueError(f"when_full must be 'block' or 'drop', got {when_full!r}")


def tag(tag: object) -> str:
    """``tag`` if it is a str (a subclass too), else TypeError."""
    if type(tag) is not str and not isinstance(tag, str):
        raise TypeError(f"tag must be a str, got {tag!r}")
    return tag


def real(value: object, what: str) -> float:
    """``value`` as a float; text, non-numbers and out-of-range ints are refused naming ``what``."""
    if isinstance(value, (str, bytes, bytearray)):  # float() would parse text
        raise TypeError(f"{what} must be a real number, got {value!r:.200}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a real number, got {value!r:.200}") from None
    except OverflowError:
        raise OverflowError(f"{what}: {value!r:.50} is beyond a float's range") from None


def scalar_value(value: object, what: str) -> Any:
    """A scalar's value: a float, or a one-element tensor kept unread (``tb_monitor._tensors``)."""
    if _tensors.is_tensor(value):
        return _tensors.checked(value, what)
    return real(value, what)


def step(step: object) -> int:
    """``step`` as an int (anything with ``__index__``), else TypeError."""
    try:
        return operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"step must be an integer, got {step!r}") from None


def wall_time(wall_time: object) -> float:
    """``wall_time`` as a float; None means now."""
    if wall_time is None:
        return time.time()
    if type(wall_time) is float:
        return wall_time  # type: ignore[return-value]
    return real(wall_time, "wall_time")
