"""How soon ``tb-monitor run --restart-hung-after`` gets a hung job training again (CPU, gloo).

A 2-agent x 2-worker DDP job (tests/integration/scripts/ddp_hang.py) whose rank 1 sleeps before
its collective in the first attempt only; run with ``--restart-hung-after AFTER`` and
``--max-restarts 1`` (heartbeats 1 s; the stall rule's default floor unless ``--stall-floor``). It prints the time from the
hang (rank 1 printing that it hangs) to the next attempt's first step (a rank printing step 0 of
restart 1), beside the timeout the restart replaces: without it the job waits for the collective
timeout (NCCL's default, 10 min; ``--nccl-timeout-s``), not waited out here.

    python benchmarks/bench_hang_restart.py [--after 10s] [--rounds 1] [--stall-floor S]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from users_jobs import SHORT_WINDOWS, user_job  # noqa: E402

HANG = Path(__file__).resolve().parent.parent / "tests/integration/scripts/ddp_hang.py"


def one_round(after: str, stall_floor: str | None) -> float:
    """Seconds from the hang to the restarted attempt's first step."""
    with tempfile.TemporaryDirectory() as workdir:
        return _round_in(Path(workdir), after, stall_floor)


def _round_in(workdir: Path, after: str, stall_floor: str | None) -> float:
    env = {**SHORT_WINDOWS, "HANG_RANK": "1", "HANG_AT": "30", "HANG_S": "600", "STEPS": "100"}
    env["HANG_ONCE"] = str(workdir / "hung-once")  # the rank hangs in the first attempt only
    if stall_floor is not None:
        env["TB_MONITOR_STALL_FLOOR_S"] = stall_floor
    options = ("--restart-hung-after", after)
    with user_job(workdir, HANG, env=env, max_restarts=1, run_options=options) as job:
        job.wait_for_output("hangs at step")
        hung = time.monotonic()
        job.wait_for_output("step 0 restart 1")
        return time.monotonic() - hung


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", default="10s", help="--restart-hung-after (10s)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nccl-timeout-s", type=float, default=600.0)
    parser.add_argument("--stall-floor", default=None, help="the stall rule's floor (default)")
    args = parser.parse_args()
    times = [one_round(args.after, args.stall_floor) for _ in range(args.rounds)]
    print(f"--restart-hung-after {args.after}: hang -> next attempt's first step")
    for n, seconds in enumerate(times):
        print(f"  round {n}: {seconds:6.1f} s")
    print(f"  the timeout it replaces (NCCL's default): {args.nccl_timeout_s:6.0f} s")


if __name__ == "__main__":
    main()
