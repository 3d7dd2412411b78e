"""A DDP loop on CPU (gloo) where one rank hangs in a Python sleep before its collective.

Launched by torchrun; knows nothing of tb_monitor. With ``HANG_RANK`` set, that rank sleeps
``HANG_S`` seconds (120) at step ``HANG_AT`` (30) before its backward, whose all-reduce the
others then wait in: the roll-call's odd one out is in ``wait_before_collective``. With
``HANG_ONCE`` a file's path it hangs once only: the rank that hangs leaves that file, so a
restarted attempt trains to ``STEPS`` and ends (not ``TORCHELASTIC_RESTART_COUNT``: an agent
restarted by the other's rejoining counts no restart, and the rank may move to it). ``HANG_AT=start``: that rank sleeps before
DDP's constructor, whose shape check and broadcast the others then wait in (no step is taken).
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def wait_before_collective():
    if os.environ.get("HANG_ONCE"):
        open(os.environ["HANG_ONCE"], "w").close()
    time.sleep(float(os.environ.get("HANG_S", "120")))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    once = os.environ.get("HANG_ONCE")
    hangs = os.environ.get("HANG_RANK") == str(rank) and not (once and os.path.exists(once))
    at_start = os.environ.get("HANG_AT") == "start"
    if hangs and at_start:
        print(f"[RANK{rank}] hangs before DDP", flush=True)
        wait_before_collective()
    model = DDP(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hang_at = -1 if at_start else int(os.environ.get("HANG_AT", "30"))
    for step in range(int(os.environ.get("STEPS", "100000"))):
        if step == 0 or (step + 1) % 50 == 0:
            print(
                f"[RANK{rank}] step {step} restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}",
                flush=True,
            )
        if hangs and step == hang_at:
            print(f"[RANK{rank}] hangs at step {step}", flush=True)
            wait_before_collective()
        loss = model(torch.rand(4, 8)).sum()
        loss.backward()  # DDP's all-reduce: the others wait here
        optimizer.step()
        optimizer.zero_grad()
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
