"""What the sink seam costs on the hot paths: ``put_metric`` and a Stat window's event.

Three set-ups, each writing to an ``AsyncWriter`` in a temporary logdir:

- ``handlers``: the TensorBoard handlers registered by hand, as ``init`` did before sinks;
- ``init``: ``tb_monitor.init(logdir)``, TensorBoard its only sink (bound directly);
- ``init+memory``: ``init(logdir, sinks=[MemorySink()])``, the fan-out to two sinks.

Rounds alternate the order of the set-ups; each figure is the median over rounds of ns per
call, and the ratio is against ``handlers``. Target: ``init`` / ``handlers`` <= 1.05.

    python benchmarks/bench_sinks.py [--rounds 9] [--number 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

import tb_monitor
from tb_monitor import _event, contract
from tb_monitor.elastic import metrics
from tb_monitor.sinks import AsyncWriter, TensorboardEventHandler, TensorboardMetricHandler
from tb_monitor.testing import MemorySink


@contextmanager
def handlers(logdir: str) -> Iterator[AsyncWriter]:
    writer = AsyncWriter(logdir, max_queue=1 << 20)
    handle = _event.register_event_handler(TensorboardEventHandler(writer))
    previous = metrics.default_handler()
    metrics.configure(TensorboardMetricHandler(writer))
    try:
        yield writer
    finally:
        metrics.configure(previous)
        _event.unregister_event_handler(handle)
        writer.close()


@contextmanager
def monitor(logdir: str, *sinks: object) -> Iterator[AsyncWriter]:
    with tb_monitor.init(logdir, max_queue=1 << 20, sinks=list(sinks)) as opened:
        yield opened.writer


SETUPS: dict[str, Callable[[str], AbstractContextManager[AsyncWriter]]] = {
    "handlers": handlers,
    "init": monitor,
    "init+memory": lambda logdir: monitor(logdir, MemorySink()),
}


def _put_metric(number: int) -> None:
    put_metric = metrics.put_metric
    for i in range(number):
        put_metric("step", i, "bench")


def _stat_window(number: int) -> None:
    log_event, event = _event.log_event, _event.Event
    now = datetime.now()
    for i in range(number):
        log_event(event(contract.STAT_EVENT, now, {"loss.mean": float(i), "loss.max": 1.0}))


CASES = {"put_metric": _put_metric, "Stat window": _stat_window}


def _ns_per_call(setup: str, case: Callable[[int], None], number: int) -> float:
    with tempfile.TemporaryDirectory() as logdir, SETUPS[setup](logdir) as writer:
        case(number // 10)  # warm-up
        writer.flush()
        start = time.perf_counter_ns()
        case(number)
        elapsed = time.perf_counter_ns() - start
    return elapsed / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=20_000, help="calls per round and set-up")
    args = parser.parse_args()

    print(f"{'case':<14}" + "".join(f"{s + ' ns':>16}" for s in SETUPS) + "  ratios vs handlers")
    for name, case in CASES.items():
        times: dict[str, list[float]] = {setup: [] for setup in SETUPS}
        for round_ in range(args.rounds):
            order = list(SETUPS) if round_ % 2 == 0 else list(reversed(SETUPS))
            for setup in order:
                times[setup].append(_ns_per_call(setup, case, args.number))
        medians = {setup: statistics.median(times[setup]) for setup in SETUPS}
        base = medians["handlers"]
        ratios = "  ".join(f"{s} {medians[s] / base:.2f}x" for s in SETUPS if s != "handlers")
        print(f"{name:<14}" + "".join(f"{medians[s]:>16.0f}" for s in SETUPS) + f"  {ratios}")


if __name__ == "__main__":
    main()
