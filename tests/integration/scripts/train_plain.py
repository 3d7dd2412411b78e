"""A data-parallel loop that knows nothing of tb_monitor: an optimizer step and a gloo all_reduce
per step. Under ``tb-monitor run`` its workers are monitored all the same.

usage: train_plain.py [--steps N] [--fail-rank R] [--report DIR]

``--fail-rank R``: rank R raises a ValueError at step 1 (through torchelastic's ``@record``).
``--report DIR``: each rank writes ``DIR/rank-<N>.json``: what it saw of ``__name__``,
``__file__``, ``sys.argv``, ``sys.path[0]`` and whether tb_monitor was loaded before it.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

SEEN = {
    "name": __name__,
    "file": __file__,
    "argv": list(sys.argv),
    "path0": sys.path[0],
    "tb_monitor_loaded": "tb_monitor" in sys.modules,
}


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--report")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.report:
        with open(os.path.join(args.report, f"rank-{rank}.json"), "w") as out:
            json.dump(SEEN, out)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        model(torch.ones(2, 4)).sum().backward()
        dist.all_reduce(torch.ones(1))
        optimizer.step()
        optimizer.zero_grad()
        if rank == args.fail_rank and step == 1:
            raise ValueError(f"injected failure on rank {rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
