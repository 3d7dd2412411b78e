"""A sharded data-parallel loop as users write it (FSDP ``FullyShardedDataParallel`` or FSDP2
``fully_shard``), gloo on CPU, knowing nothing of tb_monitor. Each layer's forward stands for
real compute with a sleep of ``STEP_SLEEP_S`` (default 0.01) seconds; the rank numbered
``SLOW_RANK`` sleeps ``SLOW_FACTOR`` (default 2.0) times as long.

``python train_sharded.py fsdp1|fsdp2 STEPS``
"""

import os
import sys
import time

import torch
import torch.distributed as dist


class Layer(torch.nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return torch.relu(self.linear(x))


def main(version, steps):
    dist.init_process_group("gloo")
    seconds = float(os.environ.get("STEP_SLEEP_S", "0.01"))
    if os.environ.get("SLOW_RANK") == os.environ["RANK"]:
        seconds *= float(os.environ.get("SLOW_FACTOR", "2.0"))
    model = torch.nn.Sequential(Layer(seconds), Layer(seconds))
    if version == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        for index, layer in enumerate(model):
            model[index] = FSDP(layer, device_id=torch.device("cpu"))
        model = FSDP(model, device_id=torch.device("cpu"))
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = model(torch.ones(8, 16)).sum()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"[RANK{dist.get_rank()}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
