"""Little-endian number columns in base64: how versions 3 and 4 store an index's numbers."""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Sequence

__all__ = ["base64_le", "bytes_le", "from_le", "time_offsets"]


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
