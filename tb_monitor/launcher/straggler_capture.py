"""A capture once a straggler is first flagged: the straggler's profile beside the median rank's.

Stragglers are scored on the reading side, from the windows every rank writes to the logdir
(``analysis.grid``); no agent can tell from its own workers alone (in synchronous training every
rank steps at the same pace). So one agent of the job, the one running global rank 0, reads the
job's windows back every ``WATCH_S`` (longer when a read takes long: at most a tenth of its time
goes to reading) and, when a rank is flagged that was not before, writes a capture request into
the logdir as ``tb-monitor capture`` does (``launcher.capture.request``). Every agent takes it,
so every rank is captured at once: the straggler's profile and the median rank's lie side by
side, and the request's reason names both. At most one such capture per ``RATE_S``; a rank
flagged again later in the same job asks for none. ``$TB_MONITOR_STRAGGLER_CAPTURE=0`` turns it off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tb_monitor import _env, contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.scoring import Score
from tb_monitor.launcher import capture

__all__ = ["ENABLED_ENV", "RATE_S", "SECONDS", "WATCH_S", "StragglerCapture", "median_rank"]

ENABLED_ENV = "TB_MONITOR_STRAGGLER_CAPTURE"
WATCH_S = 30.0  # how often the job's windows are read back
RATE_S = 600.0  # the least time between two captures it asks for
SECONDS = 5.0  # each capture's profile
_READ_SHARE = 10.0  # wait at least this many times a read's duration before the next
_log = logging.getLogger("tb_monitor")


def median_rank(scores: list[Score]) -> int | None:
    """The rank whose relative score is the median of the scored ranks (None: none scored)."""
    scored = sorted((s for s in scores if s.relative is not None), key=lambda s: s.relative)
    return scored[len(scored) // 2].rank if scored else None


class StragglerCapture:
    """Asks for one capture when a rank of ``run_id()``'s job is first flagged a straggler;
    watches only while ``leads()`` (this agent runs global rank 0)."""

    def __init__(
        self,
        logdir: str,
        run_id: Callable[[], str],
        leads: Callable[[], bool],
        *,
        grid: Callable[[str], RankGrid] = RankGrid.from_logdir,
        ask: Callable[..., str] = capture.request,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logdir = logdir
        self._run_id, self._leads, self._grid, self._ask = run_id, leads, grid, ask
        self._clock = clock
        self._seen: set[tuple[str, int]] = set()
        self._last_ask = -float("inf")
        self._stop = threading.Event()

    @staticmethod
    def enabled() -> bool:
        return _env.flag(ENABLED_ENV, True)

    def start(self) -> StragglerCapture:
        threading.Thread(target=self._run, name="tb_monitor-straggler-capture", daemon=True).start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        wait = WATCH_S
        while not self._stop.wait(wait):
            began = self._clock()
            try:
                self.look()
            except Exception:  # never let watching break the agent; say why, go on
                _log.warning("tb_monitor: the straggler watch failed", exc_info=True)
            wait = max(WATCH_S, _READ_SHARE * (self._clock() - began))

    def look(self) -> str | None:
        """One read of the job's windows; the id of the capture asked for, if any."""
        run_id = self._run_id()
        if not run_id or not self._leads():
            return None
        job = contract.encode_part(run_id)
        scores = [s for s in self._grid(self.logdir).scores() if s.run.split("/", 1)[0] == job]
        new = [s for s in scores if s.flagged and (s.run, s.rank) not in self._seen]
        self._seen.update((s.run, s.rank) for s in scores if s.flagged)
        if not new or self._clock() - self._last_ask < RATE_S:
            return None
        self._last_ask = self._clock()
        return self._ask(self.logdir, SECONDS, reason=_reason(new, median_rank(scores)))


def _reason(new: list[Score], median: Any) -> str:
    ranks = ", ".join(str(s.rank) for s in sorted(new, key=lambda s: s.rank))
    return f"straggler: rank {ranks} first flagged; median rank {median} beside it"
