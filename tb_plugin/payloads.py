"""What every payload the frontend draws shares: typed arrays as base64, and the bucket width.

A browser parses a million JSON numbers slowly but maps base64 bytes straight onto a typed
array (``static/api.js`` ``decode``), so both views send their columns this way; both bucket a
window too wide to draw event by event (or window by window) into columns of ``BUCKET_PX``
pixels, so a zoom level costs the same number of marks in either. Columns whose values are
mostly small (a bucket's count, its lane's offset) go in the narrowest unsigned type that holds
them (``narrow``), named in the part's ``types``: a day's zoomed-in buckets are 4 bytes each,
not 14.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

__all__ = ["BUCKET_PX", "b64", "bucket_count", "narrow"]

#: Width, in pixels, of one level-of-detail bucket.
BUCKET_PX = 2


def b64(values: np.ndarray, dtype: str) -> str:
    """``values`` as the bytes of ``dtype`` (``"<f8"``, ``"<u4"``, ``"u1"``), base64."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def narrow(**columns: np.ndarray) -> dict[str, Any]:
    """Each column of non-negative integers as base64 in the narrowest of ``u1``, ``u2``,
    ``u4`` (little-endian) holding its largest value, and ``types`` naming each one's."""
    types = {name: _narrowest(name, values) for name, values in columns.items()}
    encoded: dict[str, Any] = {name: b64(v, "<" + types[name]) for name, v in columns.items()}
    return {**encoded, "types": types}


def _narrowest(name: str, values: np.ndarray) -> str:
    if not len(values):
        return "u1"
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= 1 << 32:
        raise ValueError(f"column {name!r} holds {low if low < 0 else high}: not a u4")
    return "u1" if high < 1 << 8 else "u2" if high < 1 << 16 else "u4"


def bucket_count(width: int) -> int:
    """How many level-of-detail buckets fit across ``width`` pixels (at least one)."""
    return max(1, width // BUCKET_PX)
