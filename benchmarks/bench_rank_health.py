"""The training thread's cost of automatic rank-health recording, against a bare loop.

Per step: an optimizer ``step()`` with and without tb-monitor's global step post-hook. Per
collective: a call through tb-monitor's collective wrapper against a direct call of the same
function (a trivial collective stand-in, so that only our wrapper is measured). Interleaved
rounds, medians. Goal: <= 1 µs per step and <= 1 µs per collective.

    python benchmarks/bench_rank_health.py [--rounds 9] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from tb_monitor.integrations.rank_health import RankHealth


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
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600)

    def collective() -> None:
        return None

    wrapped = recorder._timed(collective)
    hook = recorder._optimizer_stepped
    timings: dict[str, list[float]] = {
        "step": [],
        "step+hook": [],
        "hook": [],
        "call": [],
        "call+wrap": [],
    }
    for _ in range(args.rounds):
        timings["step"].append(_per_call(optimizer.step, args.calls))
        handle = register_optimizer_step_post_hook(hook)
        timings["step+hook"].append(_per_call(optimizer.step, args.calls))
        handle.remove()
        timings["hook"].append(_per_call(lambda: hook(optimizer, (), {}), args.calls))
        timings["call"].append(_per_call(collective, args.calls))
        timings["call+wrap"].append(_per_call(wrapped, args.calls))
    med = {k: statistics.median(v) * 1e6 for k, v in timings.items()}
    print(f"{args.rounds} interleaved rounds of {args.calls} calls; median µs per call")
    print(f"optimizer.step bare        {med['step']:8.3f}")
    print(
        f"optimizer.step with hook   {med['step+hook']:8.3f}   "
        f"difference {med['step+hook'] - med['step']:6.3f} (noisy: optimizer.step itself varies)"
    )
    print(f"our step hook alone        {med['hook']:8.3f}   (goal <= 1 µs per step)")
    print(f"collective bare            {med['call']:8.3f}")
    print(
        f"collective wrapped         {med['call+wrap']:8.3f}   "
        f"cost {med['call+wrap'] - med['call']:6.3f} (goal <= 1 µs per collective)"
    )


if __name__ == "__main__":
    main()
