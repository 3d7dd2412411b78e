"""Settings read from the environment: a bad value is a warning naming it, never an error.

A typo in a job's environment must not stop the training script from importing or starting
tb_monitor (docs/DESIGN.md, "Faults"). ``VARIABLES`` declares every ``TB_MONITOR_*`` variable
the package reads, so users find them in one table (the docs site's is generated from it) and
a test holds the code to it: a name read anywhere in ``tb_monitor/`` or ``tb_plugin/`` and not
declared here fails ``tests/test_env.py``.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REMOTE_TIMEOUT_ENV",
    "VARIABLES",
    "Variable",
    "c_twin",
    "flag",
    "pure_python",
    "remote_timeout_s",
    "seconds",
]

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


@dataclass(frozen=True)
class Variable:
    """One environment variable tb-monitor reads: its name, its default as a user would write
    it, the process that reads it (where it must be set) and what it changes."""

    name: str
    default: str
    read_by: str
    meaning: str


_TRAINING, _AGENT, _READER = "training process", "`tb-monitor run`'s agent", "reader"
_WRITER = "writing process"

#: Every ``TB_MONITOR_*`` variable, grouped as the docs' table lists them.
VARIABLES: tuple[Variable, ...] = (
    Variable(
        "TB_MONITOR_LOGDIR",
        "unset",
        _TRAINING,
        "The logdir `init()` writes to when it is given none; `tb-monitor run` sets it for its "
        "workers.",
    ),
    Variable(
        "TB_MONITOR_RANK_HEALTH",
        "1",
        _TRAINING,
        "`0` turns off rank-health recording (step times, time in collectives, heartbeats) under "
        "`init(torch=True)`.",
    ),
    Variable(
        "TB_MONITOR_RANK_WINDOW_S",
        "10",
        f"{_TRAINING}, {_READER}",
        "Seconds in one rank-health window; readers use it for a job whose ranks wrote one window "
        "each.",
    ),
    Variable(
        "TB_MONITOR_HEARTBEAT_S",
        "5",
        f"{_TRAINING}, {_AGENT}",
        "Seconds between a rank's heartbeats, and between the agent's looks at its workers.",
    ),
    Variable(
        "TB_MONITOR_FR_AFTER_S",
        "10",
        _TRAINING,
        "Seconds without a step after which a rank reports the newest collective in torch's Flight"
        " Recorder.",
    ),
    Variable(
        "TB_MONITOR_NCCL_TIMING",
        "0",
        _TRAINING,
        "`1` times NCCL collectives by the CUDA events NCCL records around the kernel, not to "
        "their launch.",
    ),
    Variable(
        "TB_MONITOR_STALL_FLOOR_S",
        "10",
        f"{_READER}, {_AGENT}",
        "The least time without progress (a step, a DataLoader batch, a collective, a checkpoint "
        "save) that makes a rank stalled, besides 5 typical steps without a step; by steps alone "
        "(older logdirs, before a first step) 30 s. Set it where TensorBoard, `tb-monitor "
        "report` or the agent runs: it sets both floors.",
    ),
    Variable(
        "TB_MONITOR_RESTART_HUNG_AFTER_S",
        "0 (off)",
        _AGENT,
        "Seconds a stall of every rank may hold, its roll-call taken, before the agent ends the "
        "attempt for torchelastic to restart; set by `tb-monitor run --restart-hung-after`.",
    ),
    Variable(
        "TB_MONITOR_STRAGGLER_CAPTURE",
        "1",
        _AGENT,
        "`0` stops the agent of rank 0 from asking for a capture (every rank's stacks, Flight "
        "Recorder and a 5-s profile) when a straggler is first flagged.",
    ),
    Variable(
        "TB_MONITOR_SILENT_AFTER_S",
        "5",
        _AGENT,
        "The least time without a sign of life after which the agent calls a worker silent and "
        "asks for its stacks.",
    ),
    Variable(
        "TB_MONITOR_STACKS_SIGNAL",
        "SIGURG",
        f"{_TRAINING}, {_AGENT}",
        "The signal a worker dumps its Python stacks on (a name or number), or `off`.",
    ),
    Variable(
        "TB_MONITOR_STACKS_DIR",
        "set by the agent",
        _TRAINING,
        "Where workers write their stacks and pulses; `tb-monitor run` sets it, not users.",
    ),
    Variable(
        "TB_MONITOR_PY_SPY",
        "py-spy beside Python, else on PATH",
        _AGENT,
        "The py-spy executable the roll-call reads stacks with, or `off` for faulthandler only.",
    ),
    Variable(
        "TB_MONITOR_PROMETHEUS",
        "set by the agent",
        _TRAINING,
        "Set by `tb-monitor run --prometheus-port`: each worker's `init` adds a Prometheus sink.",
    ),
    Variable(
        "TB_MONITOR_HEARTBEAT_RUN_S",
        "300",
        _WRITER,
        "Seconds of rendezvous keep-alives written as one record (a run), so big jobs stay small "
        "on disk.",
    ),
    Variable(
        "TB_MONITOR_HEARTBEAT_LONGEST_RUN_S",
        "TB_MONITOR_HEARTBEAT_RUN_S",
        _WRITER,
        "The longest a run of keep-alives grows to while nothing else happens on its tag.",
    ),
    Variable(
        "TB_MONITOR_COLUMNAR",
        "1",
        _WRITER,
        "`0` writes timeline records in the older content version 3 (one JSON per event) instead "
        "of columns.",
    ),
    Variable(
        "TB_MONITOR_UPLOAD_SECS",
        "5",
        _WRITER,
        "Seconds between uploads to an object store (`s3://`, `gs://`): how soon data becomes "
        "visible.",
    ),
    Variable(
        "TB_MONITOR_SEGMENT_DELTAS",
        "12",
        _WRITER,
        "Uploads per object in an object store (with the default upload interval, one object a "
        "minute).",
    ),
    Variable(
        "TB_MONITOR_UPLOAD_BUFFER_MB",
        "64",
        _WRITER,
        "MiB of unsent bytes kept while an object store cannot be reached; past it, records are "
        "dropped and counted.",
    ),
    Variable(
        "TB_MONITOR_REMOTE_TIMEOUT_S",
        "10",
        f"{_WRITER}, {_READER}",
        "Seconds one request to an object store may take to connect, and again to answer.",
    ),
    Variable(
        "TB_MONITOR_READ_FILES",
        "1",
        "TensorBoard",
        "`0` makes the Timeline tab read through TensorBoard's data server instead of the event "
        "files themselves.",
    ),
    Variable(
        "TB_MONITOR_READ_PROCESSES",
        "one per usable core, at most 4",
        "TensorBoard",
        "Helper processes that decode a big first read; `0` for none.",
    ),
    Variable(
        "TB_MONITOR_PURE_PYTHON",
        "0",
        "any",
        "`1` uses the pure-Python twins of the C accelerators: for debugging, and for testing the "
        "twins.",
    ),
)
