"""Opening a writer on an existing run: today's full read-back against the steps files.

A restarted worker's ``init()`` constructs an ``AsyncWriter`` on a run that may hold hundreds of
MB. The anchor is what construction did before (``readers.next_steps``: every record read back in
Python, and on ``s3://`` every object downloaded); ours is the construction itself (the caller's
cost: it never waits for the run to be read) and the time until the writer knows where the
steps left off (``logdir.resume``, off the caller's thread). Runs of ~10 MB and ~150 MB are
written once with our writer (cached under ``--cache``), then read locally and from a real S3
server (SeaweedFS, started here). Each figure is the median of ``--rounds``.

    python benchmarks/bench_resume.py            # needs the remote and dev extras (weed, s3fs)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from object_store import S3Server, benchmark_s3  # noqa: E402

from tb_monitor.logdir import fs, readers, resume  # noqa: E402
from tb_monitor.sinks import AsyncWriter  # noqa: E402

TAGS = [f"train/metric{i:03d}" for i in range(100)]
RECORD_BYTES = 55  # one scalar record of these tags, framing included


def make_run(cache: Path, megabytes: int) -> Path:
    """A run of about ``megabytes`` MB of scalars written by our writer, made once."""
    run = cache / f"{megabytes}mb"
    done = run / "complete"
    if done.exists():
        return run
    windows = megabytes * (1 << 20) // (RECORD_BYTES * len(TAGS))
    with AsyncWriter(run, max_queue=1 << 20) as writer:
        for window in range(windows):
            writer.add_scalars(dict.fromkeys(TAGS, float(window)), wall_time=1e9 + window)
    done.touch()
    return run


def _size_mb(run: str) -> float:
    return sum(os.path.getsize(p) for p in fs.event_files(run)) / (1 << 20)


def _median_ms(measure: Callable[[], float], rounds: int) -> float:
    return statistics.median(measure() for _ in range(rounds)) * 1e3


def full_scan(run: str) -> float:
    """Seconds ``readers.next_steps`` takes: what constructing a writer cost before."""
    start = time.perf_counter()
    readers.next_steps(run)
    return time.perf_counter() - start


def open_writer(run: str, remove: Callable[[list[str]], None]) -> tuple[float, float]:
    """Seconds to construct a writer on ``run``, and until it knows its steps; the files it
    made are removed afterwards so every round opens the same run."""
    start = time.perf_counter()
    writer = AsyncWriter(run)
    constructed = time.perf_counter() - start
    resumed = writer._steps.known(wait=True)  # what the writer thread waits for
    known = time.perf_counter() - start
    assert resumed is not None and resumed.steps.get(TAGS[0], 0) > 0, "steps not found"
    path = writer.path
    writer.close()
    remove([path, resume.steps_name(path)])
    return constructed, known


def _remove_local(paths: list[str]) -> None:
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


def measure(where: str, run: str, rounds: int, remove: Callable[[list[str]], None]) -> None:
    today = _median_ms(lambda: full_scan(run), rounds)
    opened = [open_writer(run, remove) for _ in range(rounds)]
    constructed = statistics.median(c for c, _ in opened) * 1e3
    known = statistics.median(k for _, k in opened) * 1e3
    print(
        f"{where:<28} today {today:9.1f} ms | construct {constructed:6.1f} ms "
        f"({today / constructed:7.0f}x) | steps known {known:6.1f} ms ({today / known:6.0f}x)"
    )


def upload(server: S3Server, run: Path, bucket: str) -> str:
    """The local run's files copied to ``bucket`` as they are; its URL."""
    import s3fs

    store = s3fs.S3FileSystem(**server.storage_options)
    url = f"s3://{bucket}/{run.name}"
    for name in os.listdir(run):
        if fs.is_event_file(name) or resume.STEPS_MARK in name:
            store.put_file(str(run / name), f"{bucket}/{run.name}/{name}")
    return url


def _remove_remote(paths: list[str]) -> None:
    import fsspec

    store = fsspec.filesystem("s3", skip_instance_cache=True)
    for path in paths:
        if store.exists(path):
            store.rm(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 150], help="run sizes, MB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "tbm_bench_resume"))
    args = parser.parse_args()
    runs = [make_run(Path(args.cache), size) for size in args.sizes]
    for run in runs:
        measure(f"local {_size_mb(str(run)):.0f} MB", str(run), args.rounds, _remove_local)
    with benchmark_s3() as server:
        bucket = server.make_bucket()
        for run in runs:
            url = upload(server, run, bucket)
            if run == runs[0]:  # the first writer of the process also makes the S3 client
                constructed, _ = open_writer(url, _remove_remote)
                print(f"s3, first writer of a process: construct {constructed * 1e3:.1f} ms")
            measure(f"s3 {_size_mb(str(run)):.0f} MB", url, args.rounds, _remove_remote)


if __name__ == "__main__":
    main()
