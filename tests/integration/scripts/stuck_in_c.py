"""A small DDP job on gloo whose rank ``$STUCK_RANK`` (default 3), at step 20, deadlocks in C
while holding the GIL (``ctypes.PyDLL`` keeps it; a mutex locked twice, which no signal wakes):
native code that no Python-level handler can see into. It knows nothing of tb_monitor."""

import ctypes
import os
import time

import torch
import torch.distributed as dist


def hold_the_gil_in_c() -> None:
    libc = ctypes.PyDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # a default mutex locked again by its owner: never returns


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100_000):
        if step == 20 and rank == int(os.environ.get("STUCK_RANK", "3")):
            print(f"[RANK{rank}] stuck in C", flush=True)
            hold_the_gil_in_c()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
