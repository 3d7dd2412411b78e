"""Little-endian number columns in base64: how versions 3 and 4 store an index's numbers."""

from __future__ import annotations

import array
import base64
import binascii
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "base64_le",
    "bytes_le",
    "from_b64",
    "from_le",
    "int64_offsets",
    "json_value",
    "time_offsets",
    "time_steps",
]

_SCAN = json.JSONDecoder().scan_once  # the C scanner json.loads runs, without its Python frames


def bytes_le(values: array.array) -> bytes:
    """The values' bytes, little-endian whatever the machine."""
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def base64_le(values: array.array) -> str:
    return base64.b64encode(bytes_le(values)).decode("ascii")


def from_le(values: array.array, data: bytes) -> array.array:
    """``values`` extended by little-endian ``data``."""
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def time_offsets(times: Sequence[float]) -> dict[str, float | str]:
    """``t0`` (the first time) and ``dt_le64``: each time's microseconds after it (int64)."""
    t0 = times[0]
    return {
        "t0": t0,
        "dt_le64": base64_le(array.array("q", [round((t - t0) * 1e6) for t in times])),
    }


def time_steps(times: Sequence[float]) -> dict[str, float | str]:
    """``t0`` and ``dd_le32``: each time's microseconds after the one before it (uint32, one
    fewer than the times), half the bytes of ``dt_le64`` for a run of keep-alives; where a
    time comes before the one before it or over 71 minutes after it, ``time_offsets``. The
    reader's sums give back the same integer offsets, so the same times to the bit."""
    t0 = times[0]
    offsets = [round((t - t0) * 1e6) for t in times]
    steps = [later - earlier for earlier, later in zip(offsets[:-1], offsets[1:], strict=True)]
    if steps and not (min(steps) >= 0 and max(steps) <= _MAX_STEP):
        return time_offsets(times)
    return {"t0": t0, "dd_le32": base64_le(array.array("I", steps))}


_MAX_STEP = 2**32 - 1


def from_b64(text: str | bytes) -> bytes:
    """Strict base64 (only its alphabet, padded right); a ValueError otherwise. A big job's reader
    decodes a great many of these: ``a2b_base64``'s strict mode checks in C what ``b64decode``'s
    ``validate`` checks with a regular expression."""
    if sys.version_info >= (3, 11):
        return binascii.a2b_base64(text, strict_mode=True)
    return base64.b64decode(text, validate=True)


def int64_offsets(text: str | bytes) -> bytes:
    """A ``dt_le64`` column (versions 3 to 5), checked to hold whole int64 offsets, one at least."""
    dt = from_b64(text)
    if not dt or len(dt) % 8:
        raise ValueError("dt_le64 is not a whole number of int64 offsets")
    return dt


def json_value(raw: str) -> Any:
    """``json.loads(raw)`` of a ``str``, a ValueError where it is not JSON: the C scanner
    straight, and ``json.loads`` itself (surrounding whitespace, its own error) where it stops."""
    try:
        value, end = _SCAN(raw, 0)
    except (StopIteration, ValueError):
        end = -1
    return value if end == len(raw) else json.loads(raw)
