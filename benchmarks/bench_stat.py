"""Stat.add and log_event: tb_monitor against torch.monitor, side by side in one process.

    python benchmarks/bench_stat.py [--adds N] [--rounds R]

Each round times N calls of every contender in turn (interleaved, so drift in machine load hits
all of them alike); the script prints the median ns per call and the ratio to torch.monitor.
The Stats use five aggregations and a 1-hour window, so no window ends during a round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import torch.monitor as tm

from tb_monitor import _event, _stat
from tb_monitor.testing import stat_implementations

AGGREGATIONS = ("MEAN", "COUNT", "SUM", "MAX", "MIN")
WINDOW = timedelta(hours=1)


def _time_calls(call: Callable[[object], object], argument: object, n: int) -> float:
    """Nanoseconds per call of ``call(argument)`` over ``n`` calls (loop overhead included)."""
    calls = range(n)
    start = time.perf_counter_ns()
    for _ in calls:
        call(argument)
    return (time.perf_counter_ns() - start) / n


def _ours(implementation: type[_stat.Stat]) -> _stat.Stat:
    """A tb_monitor Stat on the given accumulator (C or pure Python)."""
    return implementation("bench", [_stat.Aggregation[a] for a in AGGREGATIONS], WINDOW)


def _contenders() -> dict[str, tuple[Callable[[object], object], object]]:
    torch_stat = tm.Stat("bench", [getattr(tm.Aggregation, a) for a in AGGREGATIONS], WINDOW)
    found = {"torch.monitor Stat.add": (torch_stat.add, 1.5)}
    implementations = stat_implementations()
    if implementations["c"] is not None:
        found["tb_monitor Stat.add (C)"] = (_ours(implementations["c"]).add, 1.5)
    else:
        print("note: the C accelerator is not built; only the pure-Python Stat is timed")
    found["tb_monitor Stat.add (Python)"] = (_ours(implementations["python"]).add, 1.5)
    now = datetime.now()
    found["torch.monitor log_event, no handler"] = (tm.log_event, tm.Event("e", now, {"x": 1.0}))
    found["tb_monitor log_event, no handler"] = (
        _event.log_event,
        _event.Event("e", now, {"x": 1.0}),
    )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=200_000, help="calls per contender per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    if _event._handlers:
        parser.error("a tb_monitor event handler is registered; the no-handler figures need none")

    contenders = _contenders()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, (call, argument) in contenders.items():
            samples[name].append(_time_calls(call, argument, args.adds))

    medians = {name: statistics.median(values) for name, values in samples.items()}
    anchors = {
        "Stat.add": "torch.monitor Stat.add",
        "log_event": "torch.monitor log_event, no handler",
    }
    print(f"{args.rounds} interleaved rounds of {args.adds} calls; median ns per call")
    print(f"{'contender':40} {'ns/call':>9} {'vs torch':>9}")
    for name, median in medians.items():
        anchor = next(a for key, a in anchors.items() if key in name)
        print(f"{name:40} {median:9.1f} {median / medians[anchor]:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
