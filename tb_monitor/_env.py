"""Settings read from the environment: a bad value is a warning naming it, never an error.

A typo in a job's environment must not stop the training script from importing or starting
tb_monitor (docs/DESIGN.md, "Faults").
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from typing import Any

__all__ = ["REMOTE_TIMEOUT_ENV", "c_twin", "flag", "pure_python", "remote_timeout_s", "seconds"]

_log = logging.getLogger("tb_monitor")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def flag(name: str, default: bool) -> bool:
    """``$name`` as a switch (1/true/yes/on, 0/false/no/off, any case), or ``default`` (with a
    warning when the variable is set to something else)."""
    raw = os.environ.get(name)
    value = (raw or "").strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    if value:
        _log.warning(
            "%s must be 1 or 0 (true/false, yes/no, on/off), got %r; using %d", name, raw, default
        )
    return default


def pure_python() -> bool:
    """Whether ``TB_MONITOR_PURE_PYTHON`` asks for the pure-Python twins of the C extensions
    (the Stat accumulator, the step clock, the scalar encoder, the event-file and index
    readers): for debugging, and for testing the twins."""
    return flag("TB_MONITOR_PURE_PYTHON", False)


def c_twin(module: str, name: str) -> Any | None:
    """``module.name`` from one of our optional C extensions, or None where it is not built (no
    compiler at install time, a free-threaded build) or ``pure_python()`` asks for the Python
    twin: every caller keeps one Python path that does the same, and takes it on None."""
    if pure_python():
        return None
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(found, name, None)  # built without it: the step clock off Linux


def seconds(name: str, default: float) -> float:
    """``$name`` as a positive number of seconds, or ``default`` (with a warning when the
    variable is set to something else)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        _log.warning(
            "%s must be a positive number of seconds, got %r; using %g", name, raw, default
        )
        return default
    return value


#: Seconds one request to an object store may take to connect, and again to answer.
REMOTE_TIMEOUT_ENV = "TB_MONITOR_REMOTE_TIMEOUT_S"
_REMOTE_TIMEOUT_DEFAULT_S = 10.0


def remote_timeout_s() -> float:
    """``$TB_MONITOR_REMOTE_TIMEOUT_S`` (default 10): the one deadline every remote read and
    write derives its timeouts from, so a store that never answers fails in bounded time."""
    return seconds(REMOTE_TIMEOUT_ENV, _REMOTE_TIMEOUT_DEFAULT_S)
