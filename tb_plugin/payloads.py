"""What every payload the frontend draws shares: typed arrays as base64, and the bucket width.

A browser parses a million JSON numbers slowly but maps base64 bytes straight onto a typed
array (``static/api.js`` ``decode``), so both views send their columns this way; both bucket a
window too wide to draw event by event (or window by window) into columns of ``BUCKET_PX``
pixels, so a zoom level costs the same number of marks in either.
"""

from __future__ import annotations

import base64

import numpy as np

__all__ = ["BUCKET_PX", "b64", "bucket_count"]

#: Width, in pixels, of one level-of-detail bucket.
BUCKET_PX = 2


def b64(values: np.ndarray, dtype: str) -> str:
    """``values`` as the bytes of ``dtype`` (``"<f8"``, ``"<u4"``, ``"u1"``), base64."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode("ascii")


def bucket_count(width: int) -> int:
    """How many level-of-detail buckets fit across ``width`` pixels (at least one)."""
    return max(1, width // BUCKET_PX)
