"""The demo's training job: a tiny data-parallel regression that fails once and recovers.

Run by ``tb-monitor demo`` under ``tb-monitor run`` (two agents x two CPU workers). Every worker
fits the same linear model on its own shard of synthetic data, averages gradients with a gloo
``all_reduce``, and reports through tb-monitor's PyTorch-compatible APIs: a ``Stat`` of the loss,
``put_metric`` values and a ``@prof``-timed step. On the first attempt one rank raises mid-way,
so the elastic agents restart the whole group; the second attempt runs to the end.

It also runs on its own under plain ``torchrun`` (tb-monitor then writes nowhere unless
``TB_MONITOR_LOGDIR`` is set).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

import tb_monitor
from tb_monitor.elastic.metrics import prof, put_metric

__all__ = ["main"]

#: Metric group of the demo's own metrics (one TensorBoard section).
GROUP = "demo"


class InjectedFailure(RuntimeError):
    """The failure the demo injects so the job shows a restart."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps per attempt")
    parser.add_argument(
        "--step-seconds", type=float, default=0.05, help="extra time per step, to make it watchable"
    )
    parser.add_argument(
        "--fail-rank", type=int, default=-1, help="rank that fails on the first attempt (-1: last)"
    )
    parser.add_argument("--fail-step", type=int, default=10, help="step at which it fails")
    return parser.parse_args(argv)


def _shard(rank: int, world_size: int, samples: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    # Every rank draws from the same ground truth, each with its own noise: a real data split.
    truth = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 1, generator=truth)
    noise = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(samples, 8, generator=noise)
    return x, x @ weight + 0.1 * torch.randn(samples, 1, generator=noise)


@prof(group=GROUP)
def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> float:
    """One synchronous data-parallel step: local gradients, averaged across ranks with gloo."""
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    world_size = dist.get_world_size()
    for param in model.parameters():
        dist.all_reduce(param.grad)
        param.grad /= world_size
    optimizer.step()
    return loss.detach().item()


@record  # torchelastic's error file: the agent reports the traceback of the failure too
def main(argv: list[str] | None = None) -> int:
    """Train for ``--steps`` steps; the chosen rank raises on the first attempt."""
    args = _parse(argv)
    # Under `tb-monitor run`: this worker's own run in the launcher's logdir; torch=True also
    # records rank health (step and collective timing: the Ranks view, stragglers and hangs).
    tb_monitor.init(torch=True)
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    fail_rank = args.fail_rank % world_size

    torch.manual_seed(0)  # identical initial weights on every rank
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _shard(rank, world_size)
    loss_stat = tb_monitor.Stat(
        "loss",
        [
            tb_monitor.Aggregation.MEAN,
            tb_monitor.Aggregation.MAX,
            tb_monitor.Aggregation.MIN,
            tb_monitor.Aggregation.COUNT,
        ],
        timedelta(seconds=0.5),
    )
    batch = 32
    for step in range(args.steps):
        if attempt == 0 and rank == fail_rank and step == args.fail_step:
            raise InjectedFailure(f"rank {rank} fails at step {step} (injected by the demo)")
        start = (step * batch) % len(x)
        loss = train_step(model, optimizer, x[start : start + batch], y[start : start + batch])
        loss_stat.add(loss)
        put_metric("step", step, GROUP)
        put_metric("weight_norm", float(model.weight.norm()), GROUP)
        time.sleep(args.step_seconds)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
