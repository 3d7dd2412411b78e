"""An older training script that opens its monitor itself, with ``tb_monitor.init(torch=True)``,
and took ``all_reduce`` from ``torch.distributed`` before that. Under ``tb-monitor run`` its
workers must record each of their events once.
"""

import torch
import torch.distributed as dist
from torch.distributed import all_reduce

import tb_monitor

if __name__ == "__main__":
    with tb_monitor.init(torch=True):
        dist.init_process_group("gloo")
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            all_reduce(torch.ones(1))
            optimizer.step()
            optimizer.zero_grad()
        dist.destroy_process_group()
