"""One async all_reduce that every rank launches at once but the last rank joins late: the
rank-health test of async collectives (timed to their completion, not their launch).

The training code calls nothing of tb_monitor's beyond ``init(torch=True)``.
"""

import argparse
import time

import torch
import torch.distributed as dist

import tb_monitor

parser = argparse.ArgumentParser()
parser.add_argument("--late-s", type=float, default=1.0)
args = parser.parse_args()

with tb_monitor.init(torch=True):
    dist.init_process_group("gloo")
    if dist.get_rank() == dist.get_world_size() - 1:
        time.sleep(args.late_s)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    launched = time.perf_counter()
    work.wait()
    print(f"rank {dist.get_rank()} waited {time.perf_counter() - launched:.3f} s", flush=True)
    dist.destroy_process_group()
