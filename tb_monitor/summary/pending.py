"""One summary to build on the writer's thread: the builder, the caller's captured arguments
(``snapshot``) and the bytes they hold in the writer's ``Budget``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tb_monitor.summary.builders import summary_event
from tb_monitor.summary.snapshot import Budget, Snapshot

__all__ = ["PendingSummary"]


class PendingSummary:
    """One summary to build on the writer's thread: ``make(*args, **kwargs)`` on the captured
    arguments, in an Event at the captured step. Gives its bytes back to ``budget`` once built,
    or once dropped unbuilt (a full queue frees it: ``__del__``)."""

    __slots__ = ("_budget", "_make", "_snapshot")

    def __init__(self, make: Callable[..., Any], snapshot: Snapshot, budget: Budget) -> None:
        self._make = make
        self._snapshot = snapshot
        self._budget: Budget | None = budget

    def __call__(self) -> Any:
        try:
            self._snapshot.wait()
            step, args, kwargs = self._snapshot.values
            return summary_event(step, self._make(*args, **kwargs))
        finally:
            self._release()

    def _release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.release(self._snapshot.nbytes)

    def __del__(self) -> None:
        self._release()
