"""The training thread's cost of automatic rank-health recording, against a bare loop.

Per step: an optimizer ``step()`` with and without tb-monitor's global step post-hook, end to
end through torch's step wrapper (and, for scale, with an empty hook: torch's own cost of
calling any global hook): on an optimizer whose own step does nothing (so the wrapper
and our hook are all there is to measure, not SGD's 70 µs, which varies by more than the hook
costs) and on SGD for scale. Per collective: a call through tb-monitor's collective wrapper
against a direct call of the same function (a trivial collective stand-in), and an
``async_op`` one whose work finishes on the device after the call returns, as NCCL's does (a
stand-in whose methods are C callables: future done at once, work done when first asked
again), so "ours" includes the poller thread that times it, contending for the GIL (what NCCL's
own launch costs is not in "bare": no GPU here). Per batch: a DataLoader iterator's
``__next__`` through the progress mark's wrapper (one clock read) against the same function
bare (a trivial stand-in for the fetch). Rounds alternate
which side runs first (the side measured first in a round runs measurably slower); medians.
Goal: <= 1 µs per step and <= 1 µs per collective. Then a whole DDP step (forward, backward
with the reducer's all-reduce, SGD; one-rank gloo group) of a bare DDP model next to one that
tb-monitor times (``grad_wait``: the wait for DDP's all-reduces that finds stragglers), goal
<= 20 µs; where CUDA is, the same on NCCL with the model on the GPU (its wait timed by CUDA
events). Last, what a stalled rank's heartbeat pays to read torch's Flight Recorder (a full
buffer), next to a heartbeat without it.

    python benchmarks/bench_rank_health.py [--rounds 9] [--calls 20000]
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import statistics
import time
from datetime import timedelta

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from tb_monitor.rank._device_works import DeviceWorks
from tb_monitor.rank._flight_recorder import last_collective_seq
from tb_monitor.rank.health import RankHealth
from tb_monitor.rank.progress_marks import ProgressMarks


def _per_call(function, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()

    model = torch.nn.Linear(2, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    no_op = _NoOpOptimizer(model.parameters())
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600)
    # Timing NCCL on the GPU (TB_MONITOR_NCCL_TIMING=1) as on a GPU outside a graph capture:
    # torch.cuda.is_initialized() is asked as there (its answer inverted, no CUDA here); the
    # capture check (one more pybind call) and the poller's CUDA mode switch cannot run here.
    recorder._device_works = DeviceWorks(
        recorder._collectives_left,
        time.perf_counter,
        on_device=lambda: not torch.cuda.is_initialized(),
        thread_setup=lambda: True,
    )

    def collective() -> None:
        return None

    wrapped = recorder._timed(collective)
    queued_wrapped = recorder._timed(_queued_collective)
    hook = recorder._step_hook

    def fetch(iterator: object) -> None:
        return None

    fetched = ProgressMarks(time.perf_counter)._batches(fetch)

    def empty_hook(optimizer, args, kwargs) -> None:
        return None

    pairs = {  # name: (bare, with ours)
        "no-op step": (no_op.step, no_op.step),
        "SGD step": (sgd.step, sgd.step),
        "collective": (collective, wrapped),
        "async on GPU": (_queued_collective, queued_wrapped),
        "empty hook": (no_op.step, no_op.step),  # torch's own cost of calling any global hook
        "batch": (functools.partial(fetch, None), functools.partial(fetched, None)),
    }
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in pairs}
    for round_ in range(args.rounds):
        for name, (bare, ours) in pairs.items():
            hooked = name.endswith("step") or name == "empty hook"
            installed = empty_hook if name == "empty hook" else hook
            sides = {}
            for side in ("ours", "bare") if round_ % 2 else ("bare", "ours"):
                handle = (
                    register_optimizer_step_post_hook(installed)
                    if hooked and side == "ours"
                    else None
                )
                if name == "async on GPU":
                    # NCCL's Work is not tracked by the garbage collector, the stand-in is:
                    # without this, the collections its held objects set off (which walk
                    # torch's whole heap) would be measured, not our cost.
                    gc.freeze()
                sides[side] = _per_call(ours if side == "ours" else bare, args.calls)
                gc.unfreeze()
                if handle is not None:
                    handle.remove()
            timings[name].append((sides["bare"], sides["ours"]))
    print(f"{args.rounds} rounds of {args.calls} calls, first side alternating; median µs per call")
    for name, rounds in timings.items():
        bare = statistics.median(b for b, _ in rounds) * 1e6
        ours = statistics.median(o for _, o in rounds) * 1e6
        cost = statistics.median(o - b for b, o in rounds) * 1e6
        goal = {
            "SGD step": "  (noisy: SGD's step varies more)",
            "empty hook": "  (torch's dispatch of any hook: an empty one on the no-op step)",
            "async on GPU": "  (opt-in, TB_MONITOR_NCCL_TIMING=1: over the 1 µs goal)",
        }.get(name, "  (goal <= 1 µs)")
        print(f"{name:<12} bare {bare:8.3f}   with tb-monitor {ours:8.3f}   cost {cost:6.3f}{goal}")
    hook_alone = _per_call(lambda: hook(no_op, (), {}), args.calls) * 1e6
    print(f"our step hook called alone {hook_alone:6.3f}")
    works = recorder._device_works
    recorder.close()
    print(f"async works timed at launch (poller behind): {works.timed_at_launch}")
    _ddp_step_cost(args.rounds, max(200, args.calls // 20))
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        _ddp_step_cost(args.rounds, max(200, args.calls // 20), on_gpu=True)
    else:
        print("DDP step on NCCL: no CUDA device here, skipped")
    _flight_recorder_read()


def _ddp_step_cost(rounds: int, steps: int, on_gpu: bool = False) -> None:
    """Per DDP step, the host time of a bare DDP model against an identical one whose backward
    tb-monitor times (the wait for the reducer's all-reduces), side by side, alternating. On a
    GPU: NCCL, the model on CUDA, the wait timed by CUDA events read on the poller thread."""
    import tempfile

    import torch.distributed as dist

    from tb_monitor.rank.grad_wait import GradWait

    waits: list[float] = []
    device = "cuda" if on_gpu else "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        store = dist.FileStore(f"{scratch}/store", 1)
        dist.init_process_group("nccl" if on_gpu else "gloo", store=store, rank=0, world_size=1)
        try:
            timer = GradWait(waits.append)
            bare, ours = (
                torch.nn.parallel.DistributedDataParallel(_mlp().to(device)) for _ in range(2)
            )
            timer.attach(ours)
            loops = {
                side: _ddp_loop(model, device) for side, model in (("bare", bare), ("ours", ours))
            }
            timings = []
            for round_ in range(rounds):
                sides = {}
                for side in ("ours", "bare") if round_ % 2 else ("bare", "ours"):
                    sides[side] = _per_call(loops[side], steps)
                timings.append((sides["bare"], sides["ours"]))
            if on_gpu:
                torch.cuda.synchronize()
                timer.read_done()
            timer.close()
        finally:
            dist.destroy_process_group()
    bare_us = statistics.median(b for b, _ in timings) * 1e6
    ours_us = statistics.median(o for _, o in timings) * 1e6
    cost = statistics.median(o - b for b, o in timings) * 1e6
    name = "DDP step NCCL" if on_gpu else "DDP step"
    print(
        f"{name:<12} bare {bare_us:8.3f}   with tb-monitor {ours_us:8.3f}   cost {cost:6.3f}"
        f"  (goal <= 20 µs; {len(waits)} gradient waits timed)"
    )


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def _ddp_loop(model: torch.nn.Module, device: str):
    """One training step of ``model``: forward, backward (DDP's all-reduce), SGD."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    batch = torch.ones(8, 32, device=device)

    def step() -> None:
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _flight_recorder_read() -> None:
    """What a stalled rank's heartbeat pays to read torch's Flight Recorder, full (2,000 DDP
    gradient all_reduces on a one-rank gloo group), against the heartbeat without it: the GIL
    is held throughout, once per 30 s of stall and never while steps come."""
    import tempfile

    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as scratch:
        store = dist.FileStore(f"{scratch}/store", 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
            for _ in range(2100):
                model(torch.ones(1, 4)).sum().backward()
            reads = []
            for _ in range(5):
                start = time.perf_counter()
                last_collective_seq()
                reads.append(time.perf_counter() - start)
            beat = RankHealth(window=timedelta(hours=1), heartbeat_s=3600)
            beat_s = _per_call(beat.beat, 200)
            beat.close()
        finally:
            dist.destroy_process_group()
    print(
        f"stalled rank's Flight Recorder read (full buffer) {statistics.median(reads) * 1e3:.1f} ms"
        f"   a heartbeat without it {beat_s * 1e6:.1f} µs  (once per 30 s of stall)"
    )


_DONE = torch.futures.Future()
_DONE.set_result(None)


class _QueuedWork:
    """NCCL's Work as the wrapper sees it, at C speed: its future is done at once, the work is
    not done when the wrapper asks and is when the poller asks, and NCCL's events say 1 ms."""

    __slots__ = ("get_future", "is_completed", "_get_duration")

    def __init__(self) -> None:
        self.get_future = itertools.repeat(_DONE).__next__
        self.is_completed = itertools.chain((False,), itertools.repeat(True)).__next__
        self._get_duration = (1.0).__float__


def _queued_collective() -> _QueuedWork:
    return _QueuedWork()


class _NoOpOptimizer(torch.optim.Optimizer):
    """An optimizer whose step does nothing: torch still wraps it (profiling, hooks)."""

    def __init__(self, params) -> None:
        super().__init__(params, {})

    def step(self, closure=None) -> None:
        return None


if __name__ == "__main__":
    main()
