"""A small elastic training job for the torchrun acceptance tests.

Every step: a gloo all_reduce on CPU, a Stat sample and a metric. One rank can be made to fail:
``--fail once --marker PATH`` raises on the first attempt only (the marker file remembers it,
whatever rank numbers the restarted group hands out), ``--fail always`` on every attempt.
``--fail-step`` (default: half-way), ``--fail-exc`` (the exception's type: RuntimeError,
ValueError) and ``--fail-how`` (``raise``; ``sigkill``: the process is killed by SIGKILL and
records nothing; ``exit``: ``sys.exit(3)``) choose how it fails.

    tb-monitor run --logdir DIR [torchrun options] train_elastic.py --fail-rank 1 --fail once ...
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

import tb_monitor
from tb_monitor.elastic import metrics


def _should_fail(args: argparse.Namespace, rank: int) -> bool:
    if rank != args.fail_rank or args.fail == "never":
        return False
    if args.fail == "always":
        return True
    try:  # "once": the first process to get here creates the marker and fails
        os.close(os.open(args.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@record
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail", choices=("never", "once", "always"), default="never")
    parser.add_argument("--marker", help="file remembering that --fail once has happened")
    parser.add_argument("--fail-step", type=int, default=None)
    parser.add_argument(
        "--fail-exc", choices=("RuntimeError", "ValueError"), default="RuntimeError"
    )
    parser.add_argument("--fail-how", choices=("raise", "sigkill", "exit"), default="raise")
    args = parser.parse_args()

    monitor = tb_monitor.init()  # the launcher's logdir, this rank's run
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loss = tb_monitor.Stat(
        "train.loss",
        [tb_monitor.Aggregation.MEAN, tb_monitor.Aggregation.MAX],
        datetime.timedelta(seconds=1),
    )
    step_to_fail = args.steps // 2 if args.fail_step is None else args.fail_step
    fail_at = step_to_fail if _should_fail(args, rank) else None
    for step in range(args.steps):
        start = time.perf_counter()
        grad = torch.full((8,), float(rank + step))
        dist.all_reduce(grad)
        loss.add(float(grad.mean()) / (step + 1))
        metrics.put_metric("step_time_us", int((time.perf_counter() - start) * 1e6), "train")
        if step == fail_at:
            if args.fail_how == "sigkill":  # as the OOM killer or `kill -9` would
                os.kill(os.getpid(), signal.SIGKILL)
            if args.fail_how == "exit":
                sys.exit(3)
            exc = {"RuntimeError": RuntimeError, "ValueError": ValueError}[args.fail_exc]
            raise exc(f"injected failure on rank {rank} at step {step}")
        time.sleep(0.05)
    loss.close()
    dist.destroy_process_group()
    monitor.close()


if __name__ == "__main__":
    main()
