"""put_metric and @prof: tb_monitor.elastic.metrics against torch.distributed.elastic.metrics.

Both sides publish to a NullMetricHandler, so what is timed is the API's own cost on the
caller's thread. Rounds alternate which side runs first; each side's figure is the median over
rounds of ns per call. Target: ours / torch's <= 1.0.

    python benchmarks/bench_put_metric.py [--rounds 15] [--number 100000]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from types import ModuleType

import torch.distributed.elastic.metrics as torch_metrics

import tb_monitor.elastic.metrics as our_metrics


def _cases(metrics: ModuleType) -> dict[str, timeit.Timer]:
    """The calls timed, bound to one metrics module configured with a NullMetricHandler."""
    metrics.configure(metrics.NullMetricHandler())
    metrics.configure(metrics.NullMetricHandler(), group="torchelastic")
    put_metric = metrics.put_metric

    @metrics.prof
    def empty() -> None:
        pass

    names = {"put_metric": put_metric, "empty": empty}
    return {
        "put_metric": timeit.Timer("put_metric('agent.step', 1, 'bench')", globals=names),
        "@prof empty function": timeit.Timer("empty()", globals=names),
    }


def _ns_per_call(timer: timeit.Timer, number: int) -> float:
    return timer.timeit(number) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=100_000, help="calls per round and side")
    args = parser.parse_args()

    sides = {"torch": _cases(torch_metrics), "ours": _cases(our_metrics)}
    print(f"{'case':<24}{'torch ns/op':>13}{'ours ns/op':>13}{'ratio':>8}")
    for case in sides["ours"]:
        times: dict[str, list[float]] = {side: [] for side in sides}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                _ns_per_call(sides[side][case], args.number // 10)  # warm-up
                times[side].append(_ns_per_call(sides[side][case], args.number))
        theirs, ours = (statistics.median(times[side]) for side in ("torch", "ours"))
        print(f"{case:<24}{theirs:>13.0f}{ours:>13.0f}{ours / theirs:>7.2f}x")


if __name__ == "__main__":
    main()
