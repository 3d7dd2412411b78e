"""What a request to the plugin asks for, validated: one parser and one error for every route.

Every route reads its query string through the typed readers here, so a bad value gets the
same answer everywhere: a :class:`RequestError` naming the parameter and the value (cut
short), which the app turns into a 400. Numbers are bounded before ``int()``/``float()`` sees
them (a 5000-digit numeral would raise in ``int()`` itself), and only ASCII digits count
(``int()`` also takes Arabic-Indic and fullwidth ones).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tb_monitor import contract

__all__ = [
    "MAX_WIDTH",
    "Query",
    "RankQuery",
    "RequestError",
    "Window",
    "count_arg",
    "event_id",
    "float_arg",
]

#: The widest plot, in pixels, a request may ask a payload for.
MAX_WIDTH = 20000
_DEFAULT_WIDTH = "1000"
#: Ids and generations: at most 18 digits, so int() never sees a huge numeral.
_MAX_ID = 10**18 - 1
#: The longest job id asked for (a run id and its start) and the highest rank number.
_MAX_JOB = 300
_MAX_RANK = 10**7


class RequestError(ValueError):
    """A request parameter the plugin cannot honour; the message names it and its value."""


def float_arg(args: Mapping[str, str], name: str) -> float | None:
    """A finite number, or None when the parameter is absent or empty."""
    raw = args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise RequestError(f"{name} must be a number, got {raw!r:.80}") from None
    if not math.isfinite(value):
        raise RequestError(f"{name} must be finite, got {raw!r:.80}")
    return value


def count_arg(
    args: Mapping[str, str], name: str, most: int, *, least: int = 0, default: str | None = None
) -> int | None:
    """An integer from ``least`` to ``most`` in ASCII digits; ``default`` (None: the parameter
    is optional) when absent or empty."""
    raw = args.get(name) or default
    if raw is None:
        return None
    digits = len(str(most))
    if not re.fullmatch(rf"[0-9]{{1,{digits}}}", raw) or not least <= int(raw) <= most:
        raise RequestError(f"{name} must be an integer from {least} to {most}, got {raw!r:.80}")
    return int(raw)


def event_id(args: Mapping[str, str]) -> int:
    """The ``id`` of the event the details panel asks for."""
    found = count_arg(args, "id", _MAX_ID)
    if found is None:
        raise RequestError("id must be a non-negative integer, got ''")
    return found


def _text_arg(args: Mapping[str, str], name: str) -> str | None:
    return args.get(name) or None


@dataclass(frozen=True)
class Window:
    """The time window a view asks for: ``start`` and ``end`` in epoch seconds (either may
    be open: the data's extent), drawn ``width`` pixels wide."""

    start: float | None = None
    end: float | None = None
    width: int = int(_DEFAULT_WIDTH)

    @staticmethod
    def parse(args: Mapping[str, str]) -> dict[str, Any]:
        """The window's fields from request arguments; raise :class:`RequestError`."""
        start = float_arg(args, "start")
        end = float_arg(args, "end")
        if start is not None and end is not None:
            if not start < end:
                raise RequestError(f"start {start!r} must be before end {end!r}")
            if not math.isfinite(end - start):
                raise RequestError(f"the window from {start!r} to {end!r} is too wide")
        width = count_arg(args, "width", MAX_WIDTH, least=1, default=_DEFAULT_WIDTH)
        return {"start": start, "end": end, "width": width}


@dataclass(frozen=True)
class Query(Window):
    """A window of the timeline with its filters (``timeline`` route)."""

    run: str | None = None
    run_id: str | None = None
    kind: str | None = None
    state: str | None = None
    text: str | None = None

    @property
    def filtered(self) -> bool:
        """Whether any filter is set (a run, run id, kind, state or text)."""
        return any(f is not None for f in (self.run, self.run_id, self.kind, self.state, self.text))

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> Query:
        """Validate request arguments; raise :class:`RequestError` naming the bad one."""
        window = Window.parse(args)
        kind = _text_arg(args, "kind")
        if kind is not None and kind not in contract.KINDS:
            raise RequestError(f"kind must be one of {contract.KINDS}, got {kind!r:.80}")
        state = _text_arg(args, "state")
        if state is not None and not re.fullmatch(r"[A-Za-z_]{1,64}", state):
            raise RequestError(f"state must be a state name, got {state!r:.80}")
        text = _text_arg(args, "q")
        if text is not None and len(text) > 500:
            raise RequestError(f"q must be at most 500 characters, got {len(text)}")
        return cls(
            **window,
            run=_text_arg(args, "run"),
            run_id=_text_arg(args, "run_id"),
            kind=kind,
            state=state,
            text=text,
        )


@dataclass(frozen=True)
class RankQuery(Window):
    """A window of the Ranks heatmap (``ranks`` route)."""

    #: The generation the client holds: a poll answered with ``unchanged`` when it is current.
    generation: int | None = None
    #: The job to show where the logdir holds several (``<run id>`` or ``<run id>@HH:MM:SS``,
    #: ``tb_monitor.analysis.jobs``); None: the newest. One the logdir lacks is a 400 (ranks.py).
    job: str | None = None
    #: A rank whose own step times the view draws (hovered or clicked), past the band threshold.
    rank: int | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> RankQuery:
        """Validate request arguments; raise :class:`RequestError` naming the bad one."""
        job = _text_arg(args, "job")
        if job is not None and not (len(job) <= _MAX_JOB and job.isprintable()):
            raise RequestError(f"job must be a job's id (a run id), got {job!r:.80}")
        return cls(
            **Window.parse(args),
            generation=count_arg(args, "generation", _MAX_ID),
            job=job,
            rank=count_arg(args, "rank", _MAX_RANK),
        )
