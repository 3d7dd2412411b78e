"""A data-parallel loop for the rank-health tests: compute (a sleep), an optimizer step and an
all_reduce every step (with ``--ddp``: a DistributedDataParallel model, whose gradients are
reduced in C++, and no collective from Python); one rank can be made slower, or made to hang
before a collective.

The training code calls nothing of tb_monitor's beyond ``init(torch=True)``: step and collective
timing are recorded automatically.
"""

import argparse
import time

import torch
import torch.distributed as dist

import tb_monitor

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--step-seconds", type=float, default=0.05)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-factor", type=float, default=1.5)
parser.add_argument("--hang-rank", type=int, default=-1)
parser.add_argument("--hang-step", type=int, default=5)
parser.add_argument("--ddp", action="store_true")
args = parser.parse_args()

with tb_monitor.init(torch=True):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 4)
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        if rank == args.hang_rank and step == args.hang_step:
            time.sleep(3600)  # hangs before the collective; the others block inside it
        time.sleep(args.step_seconds * (args.slow_factor if rank == args.slow_rank else 1.0))
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if not args.ddp:
            dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()
