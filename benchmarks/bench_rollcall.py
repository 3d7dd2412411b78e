"""What the roll-call costs: capturing every rank's stacks when a job hangs, and the pulse that
carries each rank's progress to its agent while nothing is stalled.

Starts ``--ranks`` worker processes as ``tb-monitor run`` starts them (their stack dumps
installed, a loop in Python) and times one capture of all of them: py-spy with ``--native``
(each process paused for a moment, all read at once), py-spy on stopped processes (Python
frames only), and faulthandler (the stacks signal to each, until every dump is written).
Then the pulse's own cost per beat: reading the rank health's progress and rewriting the
pulse file, on the pulse thread (never the training thread's; bench_rank_health.py measures
that one, to run side by side with main). Medians over ``--rounds``.

    python benchmarks/bench_rollcall.py [--ranks 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from tb_monitor import contract
from tb_monitor.launcher import stack_capture
from tb_monitor.rank import stacks

_WORKER = textwrap.dedent(
    """
    import time
    from tb_monitor.rank import stacks
    stacks.install()
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
    """
)


def _start(directory: str, count: int) -> list[subprocess.Popen]:
    env = {**os.environ, contract.STACKS_DIR_ENV: directory}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER], env=env, stdout=subprocess.PIPE)
        for _ in range(count)
    ]
    for proc in procs:
        proc.stdout.readline()
    return procs


def _py_spy(procs: list[subprocess.Popen], state: str) -> float:
    started = time.perf_counter()
    dumps = stack_capture.capture([(p.pid, state) for p in procs], stack_capture.py_spy_path())
    took = time.perf_counter() - started
    assert len(dumps) == len(procs), "py-spy could not read every worker"
    return took


def _faulthandler(procs: list[subprocess.Popen], directory: str) -> float:
    paths = [stacks.stacks_path(directory, p.pid) for p in procs]
    sizes = [os.path.getsize(path) for path in paths]
    started = time.perf_counter()
    for proc in procs:
        os.kill(proc.pid, signal.SIGURG)
    while any(os.path.getsize(path) <= size for path, size in zip(paths, sizes, strict=True)):
        time.sleep(0.001)
    return time.perf_counter() - started


def _pulse_beat_s(directory: str, beats: int = 2000) -> float:
    """One beat's cost: the progress read and the pulse rewritten (a Python progress source
    standing for ``RankHealth.progress``, which drains the step clock as a heartbeat does)."""
    dumps = stacks.StackDumps(directory, signal.SIGURG, 3600.0).install()
    progress = stacks.Progress(1000, time.time(), 0.05)
    try:
        started = time.perf_counter()
        for _ in range(beats):
            dumps._beat(lambda: progress)
        return (time.perf_counter() - started) / beats
    finally:
        dumps.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if stack_capture.py_spy_path() is None:
        sys.exit("py-spy is not installed: pip install 'tb-monitor[stacks]'")
    with tempfile.TemporaryDirectory() as directory:
        procs = _start(directory, args.ranks)
        try:
            native = [_py_spy(procs, "S") for _ in range(args.rounds)]
            handler = [_faulthandler(procs, directory) for _ in range(args.rounds)]
            for proc in procs:
                os.kill(proc.pid, signal.SIGSTOP)
            stopped = [_py_spy(procs, "T") for _ in range(args.rounds)]
        finally:
            for proc in procs:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
        beat = _pulse_beat_s(directory)
    print(f"capture of {args.ranks} ranks' stacks, median of {args.rounds}:")
    print(f"  py-spy --native (running)   {statistics.median(native) * 1e3:8.1f} ms")
    print(f"  py-spy (stopped processes)  {statistics.median(stopped) * 1e3:8.1f} ms")
    print(f"  faulthandler (signal)       {statistics.median(handler) * 1e3:8.1f} ms")
    print(f"pulse beat with progress (pulse thread): {beat * 1e6:.1f} µs per beat")


if __name__ == "__main__":
    main()
