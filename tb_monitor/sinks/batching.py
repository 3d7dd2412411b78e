"""Timeline events gathered into batched records (content version 4) on the writer's thread.

A big job's rendezvous records a keep-alive per node every few seconds, millions a day, each
the same JSON but for the time it was written. One record per event costs TensorBoard's loaders
time and bytes per record, so the writer gathers events instead
(``contract.encode_columnar``): the events a drain finds for a tag become one record, and a
node's keep-alives become *runs*, each distinct value stored once. Keep-alives that differ (a
message with a counter) still share a run: it is keyed by tag, not by payload, so distinct
keep-alives are a record per run, not one each. Every event stays individually
readable: its own time and its own JSON.

A tag's first run lasts ``RUN_S``; while nothing but keep-alives comes on the tag, each next
run lasts twice the last, up to ``LONGEST_RUN_S`` (``$TB_MONITOR_HEARTBEAT_LONGEST_RUN_S``; by
default ``RUN_S``, no growth): at 3600 a quiet day is a record per node per hour, not per five
minutes (the plugin's cost of a day is per record). Any other event of the tag (a
rendezvous round: a start, a restart, a node lost) writes the open run with it and starts
over at ``RUN_S``, so around whatever happens the keep-alives are as current as the events.
A run is written when it spans its length of event time, when it holds ``RUN_EVENTS`` events or
``RUN_BYTES`` bytes of distinct payloads (so what is held back, and what a close has left to
encode, is bounded however fast keep-alives come), when it has been open its length by the
writer's clock (so a live job's keep-alives show within ``RUN_S`` of a round, within
``LONGEST_RUN_S`` in a long quiet stretch), and at every ``flush()`` and ``close()`` (so an exit
or a SIGTERM loses none). A process killed outright loses its open run: at most
``LONGEST_RUN_S`` of keep-alives, where the other records lose at most one drain interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tb_monitor import _env, contract

__all__ = ["LONGEST_RUN_S", "RUN_BYTES", "RUN_EVENTS", "RUN_S", "Batch", "TimelineBatcher"]

#: A tag's first run of keep-alives in one record, in seconds (of event time and of the
#: writer's clock), and its first after any other event of the tag.
RUN_S = _env.seconds("TB_MONITOR_HEARTBEAT_RUN_S", 300.0)
#: The longest run: runs double up to it while a tag records nothing but keep-alives. By default
#: ``RUN_S`` (runs do not grow): a longer one (an hour for a job of many nodes) makes a day load
#: faster, but a live node's keep-alives show up to that late in a quiet stretch, and a node
#: killed outright loses up to that much of them, so its lane ends early.
LONGEST_RUN_S = max(RUN_S, _env.seconds("TB_MONITOR_HEARTBEAT_LONGEST_RUN_S", RUN_S))
#: The most events, and bytes of distinct payloads, one run holds: past either it is written
#: like a run that spans its length, and the next one starts. A job's ordinary keep-alives (a
#: payload repeated) never reach them; a flood of distinct ones is written as it comes.
RUN_EVENTS = 8192
RUN_BYTES = 1 << 20
#: Payloads remembered as heartbeat or not; past it the memory starts over.
_MEMO_LIMIT = 4096


@dataclass
class Batch:
    """The events of one record: wall times, the payload position of each, the payloads."""

    tag: str
    times: list[float] = field(default_factory=list)
    payload_ids: list[int] = field(default_factory=list)
    payloads: list[str | bytes] = field(default_factory=list)
    payload_bytes: int = 0  # of the distinct payloads
    _positions: dict[str | bytes, int] = field(default_factory=dict, repr=False)

    def add(self, payload: str | bytes, wall_time: float) -> None:
        position = self._positions.get(payload)
        if position is None:
            position = self._positions[payload] = len(self.payloads)
            self.payloads.append(payload)
            self.payload_bytes += len(payload)
        self.times.append(wall_time)
        self.payload_ids.append(position)


@dataclass
class _Run:
    batch: Batch
    opened: float  # the writer's clock when the run's first keep-alive came
    length: float  # seconds it may last


class TimelineBatcher:
    """Timeline events in, :class:`Batch` es out: one per tag and drain, keep-alives in runs."""

    def __init__(
        self,
        run_s: float = RUN_S,
        clock: Callable[[], float] = time.monotonic,
        longest_run_s: float | None = None,
        run_events: int = RUN_EVENTS,
        run_bytes: int = RUN_BYTES,
    ) -> None:
        longest_run_s = max(run_s, LONGEST_RUN_S) if longest_run_s is None else longest_run_s
        if not 0 < run_s < math.inf:
            raise ValueError(f"run_s must be a positive number of seconds, got {run_s!r}")
        if not run_s <= longest_run_s < math.inf:
            raise ValueError(
                f"longest_run_s must be seconds at least run_s ({run_s!r}), got {longest_run_s!r}"
            )
        for name, limit in (("run_events", run_events), ("run_bytes", run_bytes)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"{name} must be a positive int, got {limit!r}")
        self.run_s, self.longest_run_s = run_s, longest_run_s
        self.run_events, self.run_bytes = run_events, run_bytes
        self._clock = clock
        self._pending: dict[str, Batch] = {}
        self._runs: dict[str, _Run] = {}  # by tag
        self._next_length: dict[str, float] = {}  # by tag, once a run of it was written
        self._sealed: list[Batch] = []
        self._heartbeat: dict[str | bytes, bool] = {}

    def __len__(self) -> int:
        """Events held, not yet taken."""
        held = self._pending.values(), (r.batch for r in self._runs.values()), self._sealed
        return sum(len(b.times) for group in held for b in group)

    @property
    def open_runs(self) -> int:
        """Runs of keep-alives held open (each one record once written)."""
        return len(self._runs)

    def add(
        self, tag: str, payload: str | bytes, wall_time: float, *, heartbeat: bool | None = None
    ) -> None:
        """Hold one event of ``tag`` (a timeline tag) until the next :meth:`take`; whether it is
        a keep-alive is ``heartbeat``, or read from ``payload`` when None."""
        if heartbeat is None:
            heartbeat = self._is_heartbeat(tag, payload)
        if not heartbeat:
            self._next_length.pop(tag, None)  # something happened: runs start short again
            run = self._runs.pop(tag, None)
            if run is not None:
                self._sealed.append(run.batch)
            batch = self._pending.get(tag)
            if batch is None:
                batch = self._pending[tag] = Batch(tag)
            batch.add(payload, wall_time)
            return
        run = self._runs.get(tag)
        if run is not None and abs(wall_time - run.batch.times[0]) >= run.length:
            self._written(tag, run)
            self._sealed.append(run.batch)
            run = None
        if run is None:
            length = self._next_length.get(tag, self.run_s)
            run = self._runs[tag] = _Run(Batch(tag), self._clock(), length)
        batch = run.batch
        batch.add(payload, wall_time)
        if len(batch.times) >= self.run_events or batch.payload_bytes >= self.run_bytes:
            self._runs.pop(tag)  # full: written as it is; the next run keeps this one's length
            self._sealed.append(batch)

    def take(self, seal: bool = False) -> list[Batch]:
        """The batches ready to write: every event that is not a keep-alive, and the runs that
        are full, or open their length by the clock, or all of them when ``seal``."""
        out, self._sealed = self._sealed, []
        out.extend(self._pending.values())
        self._pending.clear()
        now = self._clock()
        for tag, run in list(self._runs.items()):
            if seal or now - run.opened >= run.length:
                out.append(run.batch)
                self._written(tag, run)
        return out

    def _written(self, tag: str, run: _Run) -> None:
        """``run`` (of ``tag``) is done: the tag's next run lasts twice as long, at most the
        longest."""
        self._runs.pop(tag, None)
        self._next_length[tag] = min(2 * run.length, self.longest_run_s)

    def clear(self) -> None:
        """Forget every event held (a forked child does not write its parent's)."""
        self._pending.clear()
        self._runs.clear()
        self._next_length.clear()
        self._sealed.clear()

    def _is_heartbeat(self, tag: str, payload: str | bytes) -> bool:
        marker = b"._keep_alive" if isinstance(payload, bytes) else "._keep_alive"
        if tag != _RENDEZVOUS_TAG or marker not in payload:
            return False
        known = self._heartbeat.get(payload)
        if known is None:
            try:
                known = contract.is_heartbeat(contract.decode_record(contract.RENDEZVOUS, payload))
            except (ValueError, TypeError, AttributeError):
                known = False  # not ours to judge: written as it came, readers skip it
            if len(self._heartbeat) >= _MEMO_LIMIT:
                self._heartbeat.clear()
            self._heartbeat[payload] = known
        return known


_RENDEZVOUS_TAG = contract.timeline_tag(contract.RENDEZVOUS)
