"""What a store's memory costs, counted as it changes and told at any time.

TensorBoard's plugin drops the least recently used stores past a byte budget
(:class:`~tb_plugin.refresher.Refreshers`), so every request asks each store its size. A big
read's sort holds the store's lock for seconds: the size is counted under the lock whenever
the store changes, and told without it.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Sized", "StoreSize"]


class Sized(Protocol):
    """A part of a store that says about how many bytes it holds."""

    def nbytes(self) -> int: ...


class StoreSize:
    """The bytes a store's parts hold, as of the last :meth:`measure`."""

    def __init__(self, *parts: Sized | None) -> None:
        self._parts = [part for part in parts if part is not None]
        self._nbytes = 0

    def measure(self) -> None:
        """Count the parts' bytes again (under the store's lock: they are changing)."""
        self._nbytes = sum(part.nbytes() for part in self._parts)

    def nbytes(self) -> int:
        """The bytes counted last: never waits."""
        return self._nbytes
