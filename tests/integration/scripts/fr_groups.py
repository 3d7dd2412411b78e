"""A 4-rank gloo job with two subgroups, [0, 1] ("tp_a") and [2, 3] ("tp_b"), whose rank 3 skips
its group's last all_reduce: rank 2 is left waiting in it. Every rank then writes its Flight
Recorder dump as torch does (``$TORCH_FR_DUMP_TEMP_FILE<rank>``, pickled) and leaves without
tearing down the group rank 2 still waits in."""

import os
import pickle
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace


def _wait_until_three_counted_in_each_group(timeout_s: float = 30.0) -> None:
    """Wait until this rank's recorder counts three collectives completed in each of its groups
    (the default group's two all_reduces and barrier, the subgroup's three blocking all_reduces):
    gloo's recorder counts completions seconds after the callers have returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        trace = _dump_fr_trace(includeCollectives=False, includeStackTraces=False)
        status = pickle.loads(trace).get("pg_status") or {}
        if sum(g["last_completed_collective"] >= 3 for g in status.values()) >= 2:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: not counted after {timeout_s} s: {status}")
        time.sleep(0.1)


dist.init_process_group("gloo")
rank = dist.get_rank()
groups = (dist.new_group([0, 1], group_desc="tp_a"), dist.new_group([2, 3], group_desc="tp_b"))
mine = groups[rank // 2]
for _ in range(2):
    dist.all_reduce(torch.ones(4))
for _ in range(3):
    dist.all_reduce(torch.ones(8), group=mine)
if rank != 3:  # rank 3 skips it: rank 2's copy never completes
    pending = dist.all_reduce(torch.ones(8), group=mine, async_op=True)
dist.barrier()

_wait_until_three_counted_in_each_group()
with open(f"{os.environ['TORCH_FR_DUMP_TEMP_FILE']}{rank}", "wb") as dump:
    dump.write(_dump_fr_trace())
dist.barrier()
os._exit(0)  # a clean teardown would wait for rank 2's all_reduce
