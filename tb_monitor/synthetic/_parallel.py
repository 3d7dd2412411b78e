"""Run a writing function over items, in worker processes when asked to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def map_in_processes(
    fn: Callable[[_T], _R], items: Sequence[_T], processes: int, chunksize: int = 1
) -> list[_R]:
    """``[fn(item) for item in items]``, spread over up to ``processes`` spawned processes.

    Spawned rather than forked: the caller may hold threads (a writer's, a test server's).
    """
    if processes <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(processes, len(items)), mp_context=context) as pool:
        return list(pool.map(fn, items, chunksize=chunksize))
