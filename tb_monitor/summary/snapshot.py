"""The caller's arguments, captured so that the writer's thread can read them later.

A tensor is detached and cloned on its device: the clone is queued on the current stream, so the
caller never waits for the device, and an in-place change afterwards (a parameter after
``optimizer.step()``) does not reach what is written. A CUDA clone also records an event on the
caller's stream, which the writer's thread waits for before reading (``Snapshot.wait``): the
writer reads on its own stream. Numpy arrays are copied (the caller may reuse the buffer);
lists, tuples and dicts are captured item by item; anything else is kept as is.

``Budget`` bounds the bytes that queued snapshots hold (device memory included).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from tb_monitor._tensors import is_tensor
from tb_monitor.sinks.service import service as _service
from tb_monitor.summary import checks

__all__ = ["Budget", "Snapshot", "capture", "scalar", "step"]

_log = logging.getLogger(__name__)


class Snapshot:
    """Captured values, their size in bytes, and the device events to wait for before reading."""

    __slots__ = ("events", "nbytes", "values")

    def __init__(self, values: tuple, nbytes: int, events: list[Any]) -> None:
        self.values = values
        self.nbytes = nbytes
        self.events = events

    def wait(self) -> None:
        """Block until the devices have made the captured copies (the writer's thread only)."""
        for event in self.events:
            event.synchronize()


def capture(*values: Any) -> Snapshot:
    """``values`` captured as the module docstring says; no host synchronisation."""
    state = _Capture()
    return Snapshot(tuple(state.take(value) for value in values), state.nbytes, state.events)


def scalar(value: Any) -> Any:
    """A scalar's value for ``AsyncWriter.add_scalar``: a number (a one-element CPU tensor read
    at once: CPU ops have finished when they return, so reading waits on nothing, and a number
    is the cheapest copy), or None for one on a device (captured, so that it is read after its
    stream made it); torch's errors for anything else."""
    if is_tensor(value) and value.numel() == 1:
        return value.item() if value.is_cpu else None
    return float(checks.one_element(value).squeeze())


def step(global_step: Any) -> Any:
    """A step as torch's writer takes it, ``int(step)`` (a float, a numpy integer...), with its
    errors for what ``int`` refuses; a tensor is kept, to be read on the writer's thread."""
    return global_step if is_tensor(global_step) else int(global_step)


class _Capture:
    """One capture in progress: what it holds so far."""

    def __init__(self) -> None:
        self.nbytes = 0
        self.events: list[Any] = []
        self._torch = sys.modules.get("torch")
        self._numpy = sys.modules.get("numpy")

    def take(self, value: Any) -> Any:
        torch, numpy = self._torch, self._numpy
        if torch is not None and isinstance(value, torch.Tensor):
            return self._tensor(value)
        if numpy is not None and isinstance(value, numpy.ndarray):
            self.nbytes += value.nbytes
            return value.copy()
        if type(value) in (list, tuple):
            return type(value)(self.take(item) for item in value)
        if type(value) is dict:
            return {key: self.take(item) for key, item in value.items()}
        return value

    def _tensor(self, tensor: Any) -> Any:
        copy = tensor.detach().clone()
        self.nbytes += copy.numel() * copy.element_size()
        if copy.device.type == "cuda":
            torch = self._torch
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(copy.device))
            self.events.append(event)
        return copy


class Budget:
    """Bounds the bytes held by snapshots waiting for the writer's thread.

    Past ``wake_bytes`` the writer's thread is woken early, so device memory is not held for a
    whole flush interval. A snapshot that would pass ``max_bytes`` waits up to ``stall_s`` for
    the writer to catch up, then is dropped and counted (``dropped``; the caller counts it in
    its run's ``tb_monitor/dropped_records`` too), with one warning per outage: a writer that
    cannot keep up (or storage that is gone) costs the caller at most ``stall_s`` once, never
    unbounded memory. One snapshot larger than ``max_bytes`` alone is
    accepted when nothing else is held, or it could never be written.
    """

    def __init__(self, max_bytes: int, stall_s: float) -> None:
        self.max_bytes = max_bytes
        self.wake_bytes = max(max_bytes // 8, 1)
        self.stall_s = stall_s
        self.held = 0
        self.dropped = 0
        self._stalled = False
        self._cond = threading.Condition(threading.Lock())

    def reserve(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more may be held; False: drop the snapshot (counted)."""
        with self._cond:
            over = nbytes and self.held and self.held + nbytes > self.max_bytes
            if over and not self._make_room(nbytes):
                self.dropped += 1
                return False
            self.held += nbytes
            wake = self.held > self.wake_bytes
        if wake:
            _service.wake.set()
        return True

    def release(self, nbytes: int) -> None:
        """The writer's thread is done with a snapshot of ``nbytes`` (or it was dropped)."""
        with self._cond:
            self.held -= nbytes
            self._stalled = False
            self._cond.notify_all()

    def _make_room(self, nbytes: int) -> bool:
        """Wait (lock held) until ``nbytes`` fits, at most ``stall_s`` and not while stalled."""
        if not self._stalled and not _service.is_current():
            deadline = time.monotonic() + self.stall_s
            while self.held and self.held + nbytes > self.max_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not _service.is_alive():
                    break
                _service.wake.set()
                self._cond.wait(min(remaining, 0.05))
            if not self.held or self.held + nbytes <= self.max_bytes:
                return True
        if not self._stalled:
            self._stalled = True
            _log.warning(
                "tb_monitor: SummaryWriter snapshots hold %d bytes (limit %d) and the writer "
                "has not caught up in %.1f s; dropping summaries until it does",
                self.held,
                self.max_bytes,
                self.stall_s,
            )
        return False
