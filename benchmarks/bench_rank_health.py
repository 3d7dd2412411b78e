"""The training thread's cost of automatic rank-health recording, against a bare loop.

Per step: an optimizer ``step()`` with and without tb-monitor's global step post-hook, end to
end through torch's step wrapper (and, for scale, with an empty hook: torch's own cost of
calling any global hook): on an optimizer whose own step does nothing (so the wrapper
and our hook are all there is to measure, not SGD's 70 µs, which varies by more than the hook
costs) and on SGD for scale. Per collective: a call through tb-monitor's collective wrapper
against a direct call of the same function (a trivial collective stand-in). Rounds alternate
which side runs first (the side measured first in a round runs measurably slower); medians.
Goal: <= 1 µs per step and <= 1 µs per collective.

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
    sgd = torch.optim.SGD(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    no_op = _NoOpOptimizer(model.parameters())
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600)

    def collective() -> None:
        return None

    wrapped = recorder._timed(collective)
    hook = recorder._step_hook

    def empty_hook(optimizer, args, kwargs) -> None:
        return None

    pairs = {  # name: (bare, with ours)
        "no-op step": (no_op.step, no_op.step),
        "SGD step": (sgd.step, sgd.step),
        "collective": (collective, wrapped),
        "empty hook": (no_op.step, no_op.step),  # torch's own cost of calling any global hook
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
                sides[side] = _per_call(ours if side == "ours" else bare, args.calls)
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
        }.get(name, "  (goal <= 1 µs)")
        print(f"{name:<12} bare {bare:8.3f}   with tb-monitor {ours:8.3f}   cost {cost:6.3f}{goal}")
    hook_alone = _per_call(lambda: hook(no_op, (), {}), args.calls) * 1e6
    print(f"our step hook called alone {hook_alone:6.3f}")


class _NoOpOptimizer(torch.optim.Optimizer):
    """An optimizer whose step does nothing: torch still wraps it (profiling, hooks)."""

    def __init__(self, params) -> None:
        super().__init__(params, {})

    def step(self, closure=None) -> None:
        return None


if __name__ == "__main__":
    main()
