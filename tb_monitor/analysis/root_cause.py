"""Reading one rank's failure: what its own records and its agent's say, as a ``RootCause``.

A rank that raised records its own FAILED (``tb_monitor.integrations.worker``: exception,
message, traceback); its agent records FAILED too, with the exit code and, under ``@record``,
torchelastic's error file. A rank killed by a signal records nothing itself. ``cause_of`` reads
whichever is there and says whether the failure looks like a lost peer (a connection error, a
timeout, or the signal agents stop workers with): such a failure is the root cause only when
no other is known (``tb_monitor.analysis.attempts``).
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AGENT_PREFIX", "WORKER_PREFIX", "RankEnding", "RootCause", "cause_of"]

WORKER_PREFIX = "tb_monitor.worker.status."  # a worker's own record (integrations.worker)
AGENT_PREFIX = "torchelastic.worker.status."  # its agent's record of it
#: Exceptions a rank raises because a peer went away: never the root cause while another is known.
_PEER_LOST = re.compile(
    r"connection (?:closed|reset|refused|aborted)|broken pipe|read error|write error|"
    r"DistBackendError|DistNetworkError|peer|socket|communicator was aborted|"
    r"ProcessGroup\w* .*(?:abort|timeout|timed out)|timed out|timeout",
    re.IGNORECASE,
)
#: Signals an agent stops its workers with: a rank ended by one went down with the group.
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_EMPTY_ERROR = {"<NONE>", "<N/A>", ""}


@dataclass(frozen=True)
class RootCause:
    """The failure that brought an attempt down: which rank, what, when, and how it is known."""

    rank: int
    time: float  # when it failed (the worker's own record; else when its agent saw it)
    reason: str  # one line: "ValueError: bad batch", "killed by SIGKILL", "exited with code 3"
    exception: str | None = None  # the exception's type, as its traceback names it
    message: str | None = None  # the exception message's last line
    traceback: str | None = None
    exit_code: int | None = None  # the process's exit code where its agent (or it) recorded one
    signal: str | None = None  # "SIGKILL": the signal that ended it, where known
    host: str | None = None
    source: str = "worker"  # "worker" (its own record), "error_file" (@record) or "agent"
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass
class RankEnding:
    """What the records of one rank in one attempt say about how it ended."""

    own_failed: Mapping[str, Any] | None = None  # its own FAILED record
    agent_failed: Mapping[str, Any] | None = None  # its agent's FAILED record of it
    ends: list[Mapping[str, Any]] = field(default_factory=list)  # every record that ended it
    succeeded: bool = False
    host: str | None = None

    @property
    def failed(self) -> bool:
        return self.own_failed is not None or self.agent_failed is not None

    def add(self, row: Mapping[str, Any]) -> None:
        """Take one of the rank's records of this attempt into account."""
        name, state = str(row.get("name") or ""), row.get("state")
        self.host = self.host or row.get("hostname")
        if state == "FAILED" and name.startswith(WORKER_PREFIX):
            self.own_failed = self.own_failed or row
        elif state == "FAILED":
            self.agent_failed = self.agent_failed or row
        if state == "SUCCEEDED":
            self.succeeded = True
        if state in ("FAILED", "TERMINATED", "UNHEALTHY", "STOPPED"):
            self.ends.append(row)


def _exception_of(text: str | None) -> tuple[str | None, str | None]:
    """``("ValueError", "its last line")`` from "ValueError: ..." text; (None, None) otherwise."""
    if not text:
        return None, None
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return None, None
    found = _EXCEPTION_LINE.match(lines[0].strip())
    if not found or " " in found.group(1):
        return None, lines[-1].strip()
    rest = [found.group(2) or "", *lines[1:]]
    rest = [line for line in rest if line.strip()]
    return found.group(1), (rest[-1].strip() if rest else "")


def _error_file(raw: str | None) -> tuple[str | None, str | None]:
    """torchelastic's error file JSON (``raw_error`` of its agent's FAILED): message, traceback."""
    if not raw or not str(raw).startswith("{"):
        return None, None
    try:
        data = json.loads(raw)
    except ValueError:
        return None, None
    message = data.get("message") if isinstance(data, Mapping) else None
    if isinstance(message, str):
        return (None if message in _EMPTY_ERROR else message), None
    if not isinstance(message, Mapping):
        return None, None
    extra = message.get("extraInfo") or {}
    trace = extra.get("py_callstack") if isinstance(extra, Mapping) else None
    text = message.get("message")
    return (text if isinstance(text, str) and text not in _EMPTY_ERROR else None), (
        trace if isinstance(trace, str) else None
    )


def _int(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _exit_code(ending: RankEnding) -> int | None:
    """The exit code its agent recorded, else its own record's."""
    for row in (ending.agent_failed, ending.own_failed):
        if row is not None:
            code = _int((row.get("metadata") or {}).get("exit_code"))
            if code is not None:
                return code
    return None


def _what_failed(ending: RankEnding) -> tuple[str | None, str | None, str | None, str, float]:
    """``(exception, message, traceback, source, time)`` from the records that say most."""
    own, agent = ending.own_failed, ending.agent_failed
    if own is not None:
        trace = own.get("error_trace")
        exception, message = _exception_of(own.get("message") or trace)
        if exception is None and trace:
            exception, message = _exception_of(str(trace).strip().splitlines()[-1])
        return exception, message, trace, "worker", float(own["wall_time"])
    assert agent is not None
    text, trace = _error_file(agent.get("error_trace"))
    exception, message = _exception_of(text)
    return exception, message, trace, ("error_file" if text else "agent"), float(agent["wall_time"])


def _reason(
    exception: str | None, message: str | None, sig: str | None, exit_code: int | None
) -> str:
    """The failure in one line for humans."""
    if exception:
        return f"{exception}: {message}" if message else exception
    if sig:
        return f"killed by {sig}"
    if message:
        return message
    if exit_code is not None:
        return f"exited with code {exit_code}"
    return "failed"


def cause_of(rank: int, ending: RankEnding) -> tuple[tuple[int, float], RootCause]:
    """The rank's failure as a root cause, and its sort key: (looks like a lost peer, time)."""
    exit_code = _exit_code(ending)
    sig = _signal_name(-exit_code) if exit_code is not None and exit_code < 0 else None
    exception, message, trace, source, when = _what_failed(ending)
    if ending.own_failed is not None:  # it recorded its own failure: does it read as a peer gone?
        lost_peer = bool(_PEER_LOST.search(f"{exception or ''}: {message or ''}"))
    else:  # only its agent saw it end: stopped the way agents stop workers, or on its own
        lost_peer = sig in _STOP_SIGNALS
    cause = RootCause(
        rank=rank,
        time=when,
        reason=_reason(exception, message, sig, exit_code),
        exception=exception,
        message=message,
        traceback=trace or None,
        exit_code=exit_code,
        signal=sig,
        host=ending.host,
        source=source,
        record=ending.own_failed if ending.own_failed is not None else ending.agent_failed,
    )
    return (int(lost_peer), when), cause
