"""How long each backward waits for DDP's gradient all-reduces: what tells a straggler under DDP.

``DistributedDataParallel`` all-reduces gradients from C++, inside the reducer, so no Python
collective is timed, and the wait for the slowest rank lands inside every rank's backward: step
times are equal and ``step - collective`` cannot tell a slow rank from a fast one. The wait
itself can: the fast ranks wait longest. Where it lies, autograd tells exactly. Once the graph's
last node has run (every gradient computed, the last bucket's all-reduce launched), autograd runs
its final callbacks in the order they were queued; the reducer queues ``finalize_backward``,
which waits for every bucket's all-reduce, when its last bucket becomes ready. So one hook on one
parameter (a post-accumulate-grad hook, which runs before the reducer's own hook on the same
parameter) queues a callback that reads the clock (the rank's own gradients are done) and queues
a second one, which runs after the reducer's wait and records the difference.

Nothing changes in the user's script or in DDP's communication: no comm hook is registered (a
user's stays the only one), no collective added. ``GradWait.install`` wraps
``DistributedDataParallel.__init__`` so every DDP built after it (``tb-monitor run`` installs it
before the script starts) gets the hook; ``close`` undoes both. Per backward: one Python hook, two
final callbacks, two clock readings, one ``add`` (a few µs; ``benchmarks/bench_rank_health.py``).
A fault of ours is a warning, once, and the timing stops; the backward never sees it.

On CPU (gloo) the host's clock times the wait. On CUDA (NCCL) the reducer's wait is a stream
wait the host does not block on, so the host's clock sees only its share: a CUDA model's
callbacks record a timing CUDA event each on the current stream instead (never in a CUDA graph
capture), and each later backward reads the pairs whose end event is done, oldest first, with
a non-blocking query (the GPU is a step or so behind; nothing waits). The events are reused.
No thread of ours takes part: an earlier version handed the pairs to a poller thread, and its
wake-ups and GIL hand-offs slowed a launch-bound NCCL step measurably
(``benchmarks/bench_rank_health.py``). A pair not done when the model's timing closes (the
last backward or so) is not read.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tb_monitor._guard import reraise_theirs

__all__ = ["GradWait"]

_log = logging.getLogger("tb_monitor")


class GradWait:
    """Records, per backward of every DDP module, the seconds from the rank's own gradients
    being ready to the end of the reducer's wait for the all-reduces (``record(seconds)``,
    called on the thread that ran the backward)."""

    def __init__(
        self,
        record: Callable[[float], None],
        clock: Callable[[], float] = time.perf_counter,
        *,
        on_cuda: Callable[[Any], bool] = lambda param: bool(param.is_cuda),
        cuda_event: Callable[[], Any] | None = None,
        capturing: Callable[[], bool] | None = None,
    ) -> None:
        self._record = record
        self._clock = clock
        self._handles: list[Any] = []
        self._undo: Callable[[], None] | None = None
        self._failed = False
        self._on_grad = self._hook(self._host_callback())
        self._on_cuda = on_cuda
        self._event, self._capturing = cuda_event, capturing
        self._on_grad_cuda: Callable[[Any], None] | None = None
        self._device_waits: _DeviceWaits | None = None

    def install(self) -> GradWait:
        """Attach to every ``DistributedDataParallel`` built from now on."""
        from torch.nn.parallel import DistributedDataParallel

        original = DistributedDataParallel.__init__
        if hasattr(original, "__tb_monitor_wrapped__"):  # another recorder's: it attaches
            return self
        me = self

        @functools.wraps(original)
        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original(ddp, *args, **kwargs)
            me.attach(ddp)

        __init__.__tb_monitor_wrapped__ = original  # type: ignore[attr-defined]
        DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]

        def undo() -> None:
            if DistributedDataParallel.__init__ is __init__:
                DistributedDataParallel.__init__ = original  # type: ignore[method-assign]

        self._undo = undo
        return self

    def attach(self, ddp: Any) -> bool:
        """Time the backward passes of ``ddp`` (a DDP module built before ``install``, say);
        False when it has no parameter to hook. Raises only what a user's signal handler raised."""
        try:
            ignored = getattr(ddp, "parameters_to_ignore", ())
            names = [
                name
                for name, param in ddp.module.named_parameters()
                if param.requires_grad and name not in ignored
            ]
            if not names:
                return False
            # The last parameter is usually the output layer's: used in every backward, and its
            # gradient comes early (when it is not, the callbacks still run at the end).
            param = ddp.module.get_parameter(names[-1])
            hook = self._on_grad
            if self._on_cuda(param):
                hook = self._on_grad_cuda = self._on_grad_cuda or self._hook(self._cuda_callback())
            self._handles.append(param.register_post_accumulate_grad_hook(hook))
            return True
        except Exception as exc:  # a module we do not understand: the job goes on untimed
            self._fail(exc)
            return False

    def _hook(self, own_gradients_done: Callable[[], None]) -> Callable[[Any], None]:
        """The parameter hook, which queues ``own_gradients_done`` to run once the backward's
        last node has: bound once, as it runs every step."""
        queue, me = _queue_callback(), self

        def on_grad(_param: Any) -> None:
            if me._failed:
                return
            try:
                queue(own_gradients_done)
            except Exception as exc:
                me._fail(exc)

        return on_grad

    def _host_callback(self) -> Callable[[], None]:
        """Reads the clock, and queues the callback that records the time since, after the
        reducer's wait."""
        queue, clock, record, me = _queue_callback(), self._clock, self._record, self

        def waited(ready: float) -> None:
            try:
                record(clock() - ready)
            except Exception as exc:
                me._fail(exc)

        def own_gradients_done() -> None:
            try:
                queue(functools.partial(waited, clock()))
            except Exception as exc:
                me._fail(exc)

        return own_gradients_done

    def _cuda_callback(self) -> Callable[[], None]:
        """Records a CUDA event, and queues the callback that records a second one after the
        reducer's wait and reads the pairs the GPU is done with."""
        import torch

        queue, me = _queue_callback(), self
        event = self._event or functools.partial(torch.cuda.Event, enable_timing=True)
        capturing = self._capturing or torch.cuda.is_current_stream_capturing
        waits = self._device_waits = _DeviceWaits(self._record, event)

        def waited(start: Any) -> None:
            try:
                waits.ended(start)
            except Exception as exc:
                me._fail(exc)

        def own_gradients_done() -> None:
            try:
                if not capturing():  # a timing event may not be recorded into a graph
                    queue(functools.partial(waited, waits.started()))
            except Exception as exc:
                me._fail(exc)

        return own_gradients_done

    def _fail(self, exc: BaseException) -> None:
        reraise_theirs(exc)  # a user's signal handler raised inside our hook: theirs
        if not self._failed:
            self._failed = True
            _log.warning("tb_monitor: timing DDP's gradient wait failed, no longer timed: %r", exc)

    def forget(self) -> None:
        """In a forked child: the parent's CUDA events are the parent's."""
        if self._device_waits is not None:
            self._device_waits.forget()

    def read_done(self) -> None:
        """Record the waits whose CUDA events the GPU is done with (each backward does)."""
        if self._device_waits is not None:
            self._device_waits.read_done()

    def close(self) -> None:
        """Remove the hooks and stop wrapping ``DistributedDataParallel.__init__``."""
        if self._undo is not None:
            self._undo()
            self._undo = None
        while self._handles:
            self._handles.pop().remove()
        self.read_done()


class _DeviceWaits:
    """CUDA event pairs around the reducer's wait, read once the GPU is past them.

    ``started``/``ended`` record the two events on the current stream; ``ended`` then reads
    every finished pair, oldest first (stream order), until the first unfinished one: one
    non-blocking query each. Read events are reused. At most ``max_pending`` pairs wait (the
    oldest is let go past that: a GPU that far behind, or stopped)."""

    def __init__(
        self, record: Callable[[float], None], event: Callable[[], Any], max_pending: int = 64
    ) -> None:
        self._record, self._event, self._max_pending = record, event, max_pending
        self._pending: collections.deque[tuple[Any, Any]] = collections.deque()
        self._free: list[Any] = []
        self._reading = threading.Lock()  # two backward threads never read one pair twice

    def started(self) -> Any:
        start = self._free.pop() if self._free else self._event()
        start.record()
        return start

    def ended(self, start: Any) -> None:
        end = self._free.pop() if self._free else self._event()
        end.record()
        self._pending.append((start, end))
        if len(self._pending) > self._max_pending:
            self._pending.popleft()
        self.read_done()

    def read_done(self) -> None:
        if not self._reading.acquire(blocking=False):
            return
        try:
            pending, free = self._pending, self._free
            while pending and pending[0][1].query():
                start, end = pending.popleft()
                self._record(start.elapsed_time(end) / 1e3)
                free += (start, end)
        finally:
            self._reading.release()

    def forget(self) -> None:
        self._pending.clear()
        self._free.clear()
        self._reading = threading.Lock()


def _queue_callback() -> Callable[[Callable[[], None]], None]:
    """autograd's ``queue_callback``: runs a callable once the current backward's graph is done."""
    from torch.autograd import Variable

    return Variable._execution_engine.queue_callback
