"""Little-endian number columns in base64: how versions 3 and 4 store an index's numbers."""

from __future__ import annotations

import array
import base64
import binascii
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["base64_le", "bytes_le", "from_b64", "from_le", "json_value", "time_offsets"]

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


def from_b64(text: str | bytes) -> bytes:
    """Strict base64 (only its alphabet, padded right); a ValueError otherwise. A day's reader
    decodes 300k of these: ``a2b_base64``'s strict mode checks in C what ``b64decode``'s
    ``validate`` checks with a regular expression."""
    if sys.version_info >= (3, 11):
        return binascii.a2b_base64(text, strict_mode=True)
    return base64.b64decode(text, validate=True)


def json_value(raw: str) -> Any:
    """``json.loads(raw)`` of a ``str``, a ValueError where it is not JSON: the C scanner
    straight, and ``json.loads`` itself (surrounding whitespace, its own error) where it stops."""
    try:
        value, end = _SCAN(raw, 0)
    except (StopIteration, ValueError):
        end = -1
    return value if end == len(raw) else json.loads(raw)
