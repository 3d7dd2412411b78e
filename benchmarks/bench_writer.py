"""Writing scalars to TensorBoard: tb_monitor's writer against tensorboardX's SummaryWriter.

Same data, one run, both closed (everything on disk) before the clock stops. Rounds alternate
which side runs first; each figure is the median over rounds.

- tensorboardX ``add_scalar``: µs per call on the caller's thread, and end to end (first call to
  ``close()`` returning) in scalars/s.
- ours, ``put_metric`` through ``tb_monitor.init(logdir)``: µs per call (target <= 2 µs), and end
  to end (target >= 20x tensorboardX's scalars/s); again with the writer's pure-Python encoder, the
  fallback when the optional C extension is not built.
- ours, a Stat window event of 6 scalars through ``log_event`` → ``TensorboardEventHandler``:
  µs per event (target <= 5 µs). With torch installed, torch.monitor's ``log_event`` → its own
  ``TensorboardEventHandler`` on a tensorboardX writer is timed alongside.
- reading the files back: ``tb_monitor.readers.iter_scalars`` against TensorBoard's
  ``EventAccumulator`` (per record).

    python benchmarks/bench_writer.py [--rounds 5] [--scalars 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime

from tensorboard.backend.event_processing import event_accumulator
from tensorboardX import SummaryWriter

import tb_monitor
from tb_monitor import contract
from tb_monitor.elastic import metrics
from tb_monitor.logdir import readers
from tb_monitor.sinks import encoding

STAT_KEYS = [f"loss.{agg}" for agg in ("mean", "min", "max", "sum", "count", "value")]


def _tensorboardx(logdir: str, n: int) -> dict[str, float]:
    writer = SummaryWriter(logdir, max_queue=1000, flush_secs=2)
    add_scalar = writer.add_scalar
    start = time.perf_counter()
    for i in range(n):
        add_scalar("bench/value", i, i)
    enqueued = time.perf_counter()
    writer.close()
    done = time.perf_counter()
    return {"caller_us": (enqueued - start) / n * 1e6, "per_s": n / (done - start)}


def _ours_put_metric(logdir: str, n: int) -> dict[str, float]:
    monitor = tb_monitor.init(logdir, max_queue=max(n, 1))
    put_metric = metrics.put_metric
    start = time.perf_counter()
    for i in range(n):
        put_metric("value", i, "bench")
    enqueued = time.perf_counter()
    monitor.close()
    done = time.perf_counter()
    return {"caller_us": (enqueued - start) / n * 1e6, "per_s": n / (done - start)}


def _ours_pure_python(logdir: str, n: int) -> dict[str, float] | None:
    """``put_metric`` as above, with the writer's C scalar encoder switched off."""
    c_encoder = encoding.encode_scalars
    if c_encoder is None:
        return None  # already measured: the C extension is not built
    encoding.encode_scalars = None
    try:
        return _ours_put_metric(logdir, n)
    finally:
        encoding.encode_scalars = c_encoder


def _ours_stat_event(logdir: str, n: int) -> dict[str, float]:
    events = max(n // len(STAT_KEYS), 1)
    event = tb_monitor.Event(contract.STAT_EVENT, datetime.now(), dict.fromkeys(STAT_KEYS, 1.5))
    log_event = tb_monitor.log_event
    with tb_monitor.init(logdir, max_queue=events + 1):
        start = time.perf_counter()
        for _ in range(events):
            log_event(event)
        enqueued = time.perf_counter()
    return {"caller_us": (enqueued - start) / events * 1e6}


def _torch_stat_event(logdir: str, n: int) -> dict[str, float] | None:
    try:
        import torch.monitor
    except ImportError:
        return None
    events = max(n // len(STAT_KEYS) // 10, 1)  # it is slow: fewer calls
    event = torch.monitor.Event(
        name=torch.monitor.STAT_EVENT, timestamp=datetime.now(), data=dict.fromkeys(STAT_KEYS, 1.5)
    )
    writer = SummaryWriter(logdir)
    handle = torch.monitor.register_event_handler(torch.monitor.TensorboardEventHandler(writer))
    try:
        start = time.perf_counter()
        for _ in range(events):
            torch.monitor.log_event(event)
        enqueued = time.perf_counter()
    finally:
        torch.monitor.unregister_event_handler(handle)
        writer.close()
    return {"caller_us": (enqueued - start) / events * 1e6}


def _reading(logdir: str, n: int) -> dict[str, float]:
    """µs per record: our reader vs TensorBoard's EventAccumulator, on the same files."""
    start = time.perf_counter()
    ours = sum(1 for _ in readers.iter_scalars(logdir))
    middle = time.perf_counter()
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    theirs = len(acc.Scalars("bench/value"))
    done = time.perf_counter()
    assert ours == theirs == n, (ours, theirs, n)
    return {"ours_us": (middle - start) / n * 1e6, "tb_us": (done - middle) / n * 1e6}


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scalars", type=int, default=20000)
    args = parser.parse_args()
    n = args.scalars

    sides: dict[str, Callable[[str, int], dict[str, float] | None]] = {
        "tensorboardX": _tensorboardx,
        "put_metric": _ours_put_metric,
        "pure_python": _ours_pure_python,
        "stat": _ours_stat_event,
        "torch_stat": _torch_stat_event,
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    reading: list[dict[str, float]] = []
    for round_index in range(args.rounds):
        order = list(sides.items())
        if round_index % 2:
            order.reverse()
        for name, run in order:
            with tempfile.TemporaryDirectory() as logdir:
                result = run(logdir, n)
                if result is not None:
                    results[name].append(result)
                if name == "put_metric":
                    reading.append(_reading(logdir, n))

    tbx_us, tbx_rate = (
        _median(results["tensorboardX"], "caller_us"),
        _median(results["tensorboardX"], "per_s"),
    )
    put_us, put_rate = (
        _median(results["put_metric"], "caller_us"),
        _median(results["put_metric"], "per_s"),
    )
    stat_us = _median(results["stat"], "caller_us")
    encoder = "C" if encoding.encode_scalars is not None else "pure Python"
    print(
        f"{n} scalars per round, {args.rounds} rounds, medians; writer's scalar encoder: {encoder}"
    )
    print(
        f"tensorboardX add_scalar        caller {tbx_us:8.2f} µs   end to end {tbx_rate:10.0f} /s"
    )
    print(
        f"put_metric via init(logdir)    caller {put_us:8.2f} µs   end to end {put_rate:10.0f} /s"
    )
    print(f"  caller ratio (tensorboardX / ours) {tbx_us / put_us:6.1f}x   target: ours <= 2 µs")
    print(f"  end-to-end ratio (ours / tensorboardX) {put_rate / tbx_rate:6.1f}x   target >= 20x")
    if results["pure_python"]:
        py_us, py_rate = (
            _median(results["pure_python"], "caller_us"),
            _median(results["pure_python"], "per_s"),
        )
        print(
            f"  same, pure-Python encoder    caller {py_us:8.2f} µs   end to end {py_rate:10.0f} /s"
            f"   ratio {py_rate / tbx_rate:6.1f}x"
        )
    print(f"Stat window (6 scalars) via log_event  caller {stat_us:8.2f} µs   target <= 5 µs")
    if results["torch_stat"]:
        torch_us = _median(results["torch_stat"], "caller_us")
        print(
            f"  torch.monitor log_event → its handler (tensorboardX)  {torch_us:8.2f} µs   "
            f"ratio {torch_us / stat_us:6.1f}x"
        )
    ours_read, tb_read = _median(reading, "ours_us"), _median(reading, "tb_us")
    print(
        f"reading: ours {ours_read:6.2f} µs/record, EventAccumulator {tb_read:6.2f} µs/record, "
        f"ratio {tb_read / ours_read:6.1f}x"
    )


if __name__ == "__main__":
    main()
