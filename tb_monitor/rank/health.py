"""Per-rank step and collective timing, recorded as Stat windows: what straggler and hang
detection read (``tb_monitor.analysis.stragglers``).

In synchronous data-parallel training every rank's step *period* is the same: the fast ranks wait
in the collective for the slow one. What tells ranks apart is how long each waits in collectives
(the straggler waits least) and which rank has not entered the collective the others are in (a
hang). So each rank records, as Stats (one window per ``window``; per step the training thread
pays a C hook that reads the clock into a buffer (``_stepclock.c``; a plain Python function
where it is not built), the Stat's work waiting for the window's end on the timer thread; per
collective two ``perf_counter`` readings and one ``Stat.add``):

- ``rank/step_s`` (COUNT, SUM, MIN, MAX): seconds between step boundaries. A boundary is an
  optimizer's ``step()`` (torch's global optimizer step post-hook; with several optimizers the
  first one seen marks steps, and gradient accumulation counts one step per ``step()``), or an
  explicit ``tb_monitor.step()`` for loops without an optimizer (once called, it alone counts).
  The time before the first boundary is startup, not a step. With each window, off the
  training thread, ``rank/step_s.p50`` and ``rank/step_s.p95``: the median and 95th percentile
  of that window's step times;
- ``rank/collective_s`` (COUNT, SUM, MAX): seconds inside ``torch.distributed`` collectives
  called from Python (``all_reduce``, ``barrier``, ..., DDP's ``SETUP_COLLECTIVES``: a rank
  hung before its first step is seen waiting). An ``async_op``'s work is timed to its completion
  off the training thread by its future's callback (gloo). NCCL completes the future once the
  kernel is queued, so there it is timed to its launch, unless ``TB_MONITOR_NCCL_TIMING=1``:
  then by the CUDA events NCCL records around the kernel, read once a poller thread sees the
  work done (``_device_works``; checked on an H200; opt-in because NCCL then records two CUDA
  events around every collective of the job: ``install`` sets ``TORCH_NCCL_ENABLE_TIMING=1``
  for the groups created after it, unless the environment sets it). A blocking NCCL call returns once its kernel is queued, and is timed
  to that. FSDP's all-gathers and reduce-scatters (both versions) are such Python collectives;
- ``rank/grad_wait_s`` (COUNT, SUM, MAX): seconds each backward of a ``DistributedDataParallel``
  module waited, once its own gradients were ready, for the all-reduces DDP runs from C++
  (``grad_wait``): the fast ranks wait longest, so it is wait, like ``collective_s``;
- with each step window, off the training thread, ``rank/cpu_wait_s.sum``,
  ``rank/cpu_run_s.sum`` and ``rank/cpu_throttled_s.sum``: seconds the rank's threads waited
  for a CPU while runnable, ran on one, and its cgroup was throttled (``cpu_wait``): a rank
  starved of CPU is slow in its collectives too, so its compute need not stand out;
- heartbeats, sampled every ``heartbeat_s`` by a daemon thread, so a rank stuck anywhere still
  reports: ``rank/steps`` (VALUE: steps so far), ``rank/entered`` and ``rank/left`` (VALUE:
  sequence numbers of the last collective entered and left), ``rank/in_collective_s`` (VALUE:
  seconds inside the current collective, 0 outside one), ``rank/since_step_s`` (VALUE: seconds
  since the last step boundary), and, while no step came for ``flight_recorder_after_s``,
  ``rank/fr_seq`` (VALUE: the newest collective of the default group in torch's Flight
  Recorder, which also sees DDP's; -1 once steps resume); ``rank/since_progress_s`` (VALUE:
  seconds since the last progress of any kind: a step, a batch fetched, a collective left, a
  checkpoint save ended; 0 while saving) and ``rank/in_save_s`` (VALUE: seconds inside the
  current checkpoint save, 0 outside one), from ``progress_marks``.

The worker's pulse (``rank.stacks``) carries ``progress()``, read on the pulse thread.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from tb_monitor import _env, contract
from tb_monitor._event import Event, log_event
from tb_monitor._guard import reraise_theirs
from tb_monitor._stat import Aggregation, Stat, StatSource
from tb_monitor._stat_timer import now_ns
from tb_monitor.rank._device_works import DeviceWorks
from tb_monitor.rank._flight_recorder import last_collective_seq
from tb_monitor.rank.cpu_wait import CpuWait
from tb_monitor.rank.grad_wait import GradWait
from tb_monitor.rank.progress_marks import ProgressMarks
from tb_monitor.rank.stacks import Progress, progress_from

__all__ = ["COLLECTIVES", "SETUP_COLLECTIVES", "RankHealth", "step"]

#: The torch.distributed functions timed as collectives.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "scatter",
)
#: DDP's own collectives, called from Python: its constructor's shape check and broadcast.
SETUP_COLLECTIVES = ("_verify_params_across_processes", "_broadcast_coalesced")

_current: RankHealth | None = None
#: The step owner once ``step()`` was called: no optimizer's ``id()`` (never negative).
_MANUAL = -1
#: Step times waiting for their window's end, at most (a window of a million steps is not a
#: real loop, and without the timer thread that drains them nothing would record them).
_MAX_PENDING_STEPS = 1 << 20
#: While a rank makes no step, the Flight Recorder is read again after ``_FR_AGAIN_S``, then
#: after twice as long each time, up to ``_FR_EVERY_S`` (seconds): a rank whose first read came
#: before it entered its collective (a slow step, a starved process) is read right again soon,
#: and a long pause pays a read per half-minute.
_FR_AGAIN_S = 1.0
_FR_EVERY_S = 30.0
#: The typical step the pulse carries is the median of this many recent steps.
_TYPICAL_STEPS = 64


class _PyStepClock:
    """The step hook in Python: where the C one (``_stepclock.StepClock``) is not built, with
    ``TB_MONITOR_PURE_PYTHON=1``, or with an injected clock. The same interface, but the hook
    is ``hook``, a plain function: a bound method costs more in torch's step wrapper."""

    def __init__(self, clock: Callable[[], float], max_pending: int) -> None:
        self._clock = clock
        self._times: collections.deque[float] = collections.deque(maxlen=max_pending)
        self._owner: int | None = None  # id() of the optimizer whose steps count, or _MANUAL
        keep, me = self._times.append, self

        def optimizer_stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
            if id(optimizer) == me._owner:
                keep(clock())
            elif me._owner is None:  # the first optimizer seen, unless manual steps count
                me._owner = id(optimizer)
                keep(clock())

        self.hook = optimizer_stepped

    def manual(self) -> None:
        self._owner = _MANUAL
        self._times.append(self._clock())

    def drain(self) -> list[float]:
        times, out = self._times, []
        while times:  # one consumer (RankHealth's lock): never empty inside
            out.append(times.popleft())
        return out

    def clear(self) -> None:
        self._times.clear()


def _step_clock(clock: Callable[[], float]) -> tuple[Any, Callable[[Any, Any, Any], None]]:
    """The step clock for ``clock`` and its optimizer step post-hook: the C one where it is
    built and reads the same clock (``time.perf_counter`` on Linux), else ``_PyStepClock``."""
    # The C one is not built without a compiler, off Linux, or on a free-threaded build.
    c_step_clock = _env.c_twin("tb_monitor.rank._stepclock", "StepClock")
    if clock is time.perf_counter and c_step_clock is not None:
        c_clock = c_step_clock(_MAX_PENDING_STEPS)
        return c_clock, c_clock
    py_clock = _PyStepClock(clock, _MAX_PENDING_STEPS)
    return py_clock, py_clock.hook


def step() -> None:
    """Mark a step boundary by hand (``tb_monitor.step()``), for loops without an optimizer.

    Once called, optimizer steps no longer count as boundaries. Without ``init(torch=True)``
    (or ``tb-monitor run``) it does nothing.
    """
    recorder = _current
    if recorder is not None:
        recorder.manual_step()


class RankHealth:
    """Installs the step hook and the collective wrappers into torch; ``close()`` undoes both."""

    def __init__(
        self,
        *,
        window: timedelta = timedelta(seconds=10),
        heartbeat_s: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
        flight_recorder_after_s: float = 10.0,
        last_collective: Callable[[], int | None] = last_collective_seq,
    ) -> None:
        self._clock = clock
        self._last_step = clock()  # the last boundary; until the first, when installed
        self._stepped = False  # the first boundary ends startup: it starts the first step
        self._steps = 0
        self._window_steps: list[float] = []  # this window's step times, for its quantiles
        self._recent: collections.deque[float] = collections.deque(maxlen=_TYPICAL_STEPS)
        # The training thread's step times, moved into rank/step_s off it (_drain_steps).
        self._step_clock, self._step_hook = _step_clock(clock)
        self._cpu_wait = CpuWait()  # read at each window's end, with the step times
        self._marks = ProgressMarks(clock)  # batches, saves, collectives left: not only steps
        self._drain_lock = threading.Lock()
        self._async_lock = threading.Lock()
        self._step_s = Stat(
            contract.RANK_STEP,
            [Aggregation.COUNT, Aggregation.SUM, Aggregation.MIN, Aggregation.MAX],
            window,
            source=StatSource(feed=self._end_step_window, forget=self._forget_parents),
        )
        self._grad_wait_s = Stat(
            contract.RANK_GRAD_WAIT, [Aggregation.COUNT, Aggregation.SUM, Aggregation.MAX], window
        )
        aggregations = [Aggregation.COUNT, Aggregation.SUM, Aggregation.MAX]
        self._collective_s = Stat(contract.RANK_COLLECTIVE, aggregations, window)
        on_device = _env.flag("TB_MONITOR_NCCL_TIMING", False)
        self._device_works = DeviceWorks(self._collectives_left, clock) if on_device else None
        # On CUDA by our own events, read by later backwards: checked on an H200 (no host
        # sync; tests/integration/test_rank_health_device.py), so on by default, unlike NCCL's
        # own timing above.
        self._grad_wait = GradWait(self._grad_wait_s.add, clock)
        from torch._C import Future  # its C done(): torch's Python wrapper of it costs 0.6 µs

        self._future_done: Callable[[Any], bool] = Future.done
        self._beats = {
            name: Stat(contract.RANK_PREFIX + name, [Aggregation.VALUE], window)
            for name in contract.RANK_BEATS
        }
        self._fr_after_s, self._last_collective = flight_recorder_after_s, last_collective
        self._fr_seq: int | None = None  # while stalled: the Flight Recorder's newest, if read
        self._fr_read_at: float | None = None
        self._fr_steps = 0  # the steps taken when it was read
        self._fr_again_s = _FR_AGAIN_S  # until the next read
        self._heartbeat_s = heartbeat_s
        self._entered = 0
        self._left = 0
        self._in_since: float | None = None
        self._undo: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- recording (the training thread) -------------------------------------------------------

    def manual_step(self) -> None:
        """An explicit step boundary; from now on only these count."""
        self._step_clock.manual()

    def _drain_steps(self) -> None:
        """Move the step clock's times into rank/step_s (at each window's end, and before a
        heartbeat reports): each step's time since the one before. The first boundary only
        starts the clock: the time before it is startup, not a step."""
        with self._drain_lock:
            times = self._step_clock.drain()
            if not times:
                return
            add, keep, last = self._step_s.add, self._window_steps.append, self._last_step
            steps, before = iter(times), len(self._window_steps)
            if not self._stepped:
                self._stepped, last = True, next(steps)
            for now in steps:
                add(now - last)
                keep(now - last)
                last = now
            window = self._window_steps
            self._recent.extend(window[max(before, len(window) - _TYPICAL_STEPS) :])
            del self._window_steps[:-_MAX_PENDING_STEPS]  # no window end for that long
            self._last_step, self._steps = last, self._steps + len(times)

    def _end_step_window(self) -> None:
        """At each window's end (and a flush, exit or close): the window's steps into
        rank/step_s, their median and p95 as ``rank/step_s.p50`` and ``.p95``, and the
        window's CPU wait (``cpu_wait``: read here, once a window, off the training thread)."""
        self._drain_steps()
        with self._drain_lock:
            seconds, self._window_steps = self._window_steps, []
        values = {**(_quantiles(seconds) if seconds else {}), **self._cpu_wait.read()}
        if values:
            log_event(Event(contract.STAT_EVENT, datetime.fromtimestamp(now_ns() / 1e9), values))

    def _timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        # Every collective of the job pays the wrapper: what it calls is bound once, here.
        clock, add, me, marks = self._clock, self._collective_s.add, self, self._marks

        @functools.wraps(function)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if me._closed:  # held since before close (``from torch.distributed import ...``)
                return function(*args, **kwargs)
            me._entered = seq = me._entered + 1
            start = me._in_since = clock()
            work = None
            try:
                work = function(*args, **kwargs)
                return work
            finally:
                me._in_since = None
                if work is None or not me._completes_later(work, seq, start):
                    me._left = seq
                    marks.at = end = clock()
                    try:  # noqa: SIM105 (free until raised; contextlib.suppress is not)
                        add(end - start)
                    except RuntimeError:  # closed while it ran: nothing records it any more
                        pass

        collective.__tb_monitor_timed__ = function  # type: ignore[attr-defined]
        return collective

    def _completes_later(self, work: Any, seq: int, start: float) -> bool:
        """Whether an ``async_op``'s work is timed to its completion, off the training thread:
        by its future's callback on the backend's thread (gloo), or, when the future is done
        before the work (NCCL: once the kernel is queued), by the device-works poller. False
        (timed now) when it is done already, or has no future."""
        try:
            future = work.get_future()
            if not self._future_done(future):
                future.add_done_callback(functools.partial(self._async_done, seq, start))
                return True
            device = self._device_works
            return device is not None and device.add(work, seq, start)
        except Exception as exc:  # not a Work, or a backend without futures
            reraise_theirs(exc)
            return False

    def _async_done(self, seq: int, start: float, future: Any) -> None:
        """An async collective's future completed (or failed): on the backend's thread."""
        self._collectives_left(seq, [self._clock() - start])

    def _collectives_left(self, last_seq: int, seconds: list[float]) -> None:
        """Collectives up to ``last_seq`` ended after ``seconds`` each: called off the training
        thread, by threads that must not see an exception."""
        try:
            add = self._collective_s.add
            for each in seconds:
                add(each)
            with self._async_lock:
                self._left = max(self._left, last_seq)
            self._marks.at = self._clock()
        except Exception:  # closed meanwhile: nothing records it any more
            pass

    def _forget_parents(self) -> None:
        """In a forked child (a DataLoader worker): the parent's steps and device works are the
        parent's, and its lock may have been held by one of the parent's threads."""
        self._drain_lock = threading.Lock()
        self._step_clock.clear()
        self._window_steps = []
        self._cpu_wait.forget()
        self._marks.forget()
        if self._device_works is not None:
            self._device_works.forget()
        self._grad_wait.forget()

    # -- heartbeats (a daemon thread) -----------------------------------------------------------

    def beat(self) -> None:
        """Record one heartbeat now (the daemon thread calls this every ``heartbeat_s``)."""
        if not self._step_s.closed:
            self._drain_steps()
        now = self._clock()
        since = self._in_since
        self._beats["steps"].add(self._steps)
        self._beats["entered"].add(self._entered)
        self._beats["left"].add(self._left)
        self._beats["in_collective_s"].add(0.0 if since is None else now - since)
        since_step = now - self._last_step
        self._beats["since_step_s"].add(since_step)
        in_save = self._marks.in_save_s(now)
        since_progress = 0.0 if in_save else now - max(self._last_step, self._marks.at)
        self._beats["since_progress_s"].add(max(0.0, since_progress))
        self._beats["in_save_s"].add(in_save)
        self._beat_flight_recorder(now, since_step)

    def _beat_flight_recorder(self, now: float, since_step: float) -> None:
        """While no step came for ``flight_recorder_after_s``: the newest collective of the
        default group in torch's Flight Recorder (``rank/fr_seq``), which DDP's and other C++
        collectives pass through too, read again after ``_FR_AGAIN_S`` and twice as long each
        time, at most every ``_FR_EVERY_S`` (a read holds the GIL for tens of ms); once steps
        resume, -1 (no current value)."""
        if self._closed:  # close()'s last heartbeat runs on the caller's thread: not read there
            return
        if since_step < self._fr_after_s:
            if self._fr_read_at is not None:
                self._fr_seq = self._fr_read_at = None
                self._beats["fr_seq"].add(-1.0)
            return
        if self._fr_seq is not None and self._steps != self._fr_steps:
            # A step came since the read, unseen by any heartbeat (one held off the CPU or the
            # GIL on a loaded machine, or steps slower than the threshold): the read is another
            # stall's, its collective older than those this one waits in. Withdrawn, not read
            # again before its time: in a starved process each read costs seconds.
            self._fr_seq = None
            self._beats["fr_seq"].add(-1.0)
        if self._fr_read_at is None or now - self._fr_read_at >= self._fr_again_s:
            first = self._fr_read_at is None
            self._fr_again_s = _FR_AGAIN_S if first else min(2 * self._fr_again_s, _FR_EVERY_S)
            self._fr_read_at, self._fr_steps = now, self._steps
            self._fr_seq = self._last_collective()
        if self._fr_seq is not None:
            self._beats["fr_seq"].add(float(self._fr_seq))

    def _run(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            self.beat()

    def progress(self) -> Progress:
        """Steps, the last one's wall time, the median recent step, the last progress of any
        kind, since when inside a collective: what the pulse carries (on the pulse thread)."""
        if not self._step_s.closed:
            self._drain_steps()
        with self._drain_lock:
            recent = sorted(self._recent)
            steps, last = self._steps, self._last_step
        typical = recent[len(recent) // 2] if recent else 0.0
        now, wall, inside = self._clock(), time.time(), self._in_since
        moved = now if self._marks.in_save_s(now) > 0.0 else max(last, self._marks.at)
        entered = None if inside is None else wall - (now - inside)
        return Progress(steps, wall - (now - last), typical, wall - (now - moved), entered)

    # -- install / close ------------------------------------------------------------------------

    def install(self) -> RankHealth:
        """Hook torch's optimizer steps and wrap its collectives; start the heartbeat."""
        global _current
        import torch.distributed as dist
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if self._device_works is not None:
            # NCCL reads it when a group is created: the groups created from now on record the
            # CUDA events that time asynchronous collectives (an explicit setting is kept).
            os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
        handle = register_optimizer_step_post_hook(self._step_hook)
        self._undo.append(handle.remove)
        self._undo.append(self._grad_wait.install().close)
        self._undo.append(self._marks.install().close)
        for name in COLLECTIVES + SETUP_COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None or hasattr(original, "__tb_monitor_timed__"):
                continue
            setattr(dist, name, self._timed(original))
            self._undo.append(functools.partial(_restore, dist, name, original))
        self._thread = threading.Thread(target=self._run, name="tb_monitor-heartbeat", daemon=True)
        self._thread.start()
        _current = self
        progress_from(self.progress)
        return self

    def close(self) -> None:
        """Undo what ``install`` did and end the Stats' windows."""
        global _current
        if _current is self:
            _current = None
            progress_from(None)
        self._closed = True
        self._stop.set()
        while self._undo:
            self._undo.pop()()
        if self._device_works is not None:
            self._device_works.close()
        self.beat()
        for stat in (self._step_s, self._collective_s, self._grad_wait_s, *self._beats.values()):
            stat.close()


def _quantiles(seconds: list[float]) -> dict[str, float]:
    """``rank/step_s.p50`` and ``.p95`` of ``seconds`` (linearly interpolated, as numpy's)."""
    ordered, out = sorted(seconds), {}
    for name, q in contract.RANK_STEP_QUANTILES:
        at = q * (len(ordered) - 1)
        low = int(at)
        high = min(low + 1, len(ordered) - 1)
        value = ordered[low] + (ordered[high] - ordered[low]) * (at - low)
        out[contract.stat_tag(contract.RANK_STEP, name)] = value
    return out


def _restore(module: Any, name: str, original: Any) -> None:
    current_value = getattr(module, name, None)
    if getattr(current_value, "__tb_monitor_timed__", None) is original:
        setattr(module, name, original)
