"""Writing a logdir to a real S3 server (SeaweedFS): tb-monitor against tensorboardX's S3 writer.

One process logs 200 scalars/s and an event every 10 s. Time is compressed: each library is
driven through its default number of flushes (tb-monitor uploads every 5 s; tensorboardX flushes
every 120 s and re-uploads its whole file each time), and the requests and bytes each sends are
counted at its client library. Printed: bytes uploaded over the data size at 1, 5 and 10 minutes
(and 60 for tb-monitor), objects left per process-hour, seconds until a scalar is visible to
``read_scalars``, and the caller's cost per scalar against a local logdir.

    python benchmarks/bench_remote.py            # needs the remote and dev extras (weed, s3fs)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from object_store import benchmark_s3  # noqa: E402

from tb_monitor.logdir import fs, objects, readers, tfrecord  # noqa: E402
from tb_monitor.sinks import AsyncWriter  # noqa: E402

SCALARS_PER_S = 200
EVENT_EVERY_S = 10
OUR_UPLOAD_S = 5.0  # tb-monitor's default (TB_MONITOR_UPLOAD_SECS)
TBX_FLUSH_S = 120.0  # tensorboardX's default flush_secs


class Counter:
    """Requests and bytes a client library sent."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0


def _count_s3fs(counter: Counter) -> None:
    import s3fs

    pipe, rm = s3fs.S3FileSystem._pipe_file, s3fs.S3FileSystem._rm

    async def counted_pipe(self, path, data, *args, **kwargs):
        counter.requests += 1
        counter.bytes += len(data)
        return await pipe(self, path, data, *args, **kwargs)

    async def counted_rm(self, path, *args, **kwargs):
        counter.requests += 1
        return await rm(self, path, *args, **kwargs)

    s3fs.S3FileSystem._pipe_file, s3fs.S3FileSystem._rm = counted_pipe, counted_rm


def _count_tensorboardx(counter: Counter) -> None:
    from tensorboardX import record_writer

    flush = record_writer.S3RecordWriter.flush

    def counted_flush(self):
        counter.requests += 1
        counter.bytes += len(self.buffer.getvalue())
        return flush(self)

    record_writer.S3RecordWriter.flush = counted_flush


def _second(writer_add, second: int) -> None:
    base = 1_700_000_000.0 + second
    for i in range(SCALARS_PER_S):
        writer_add(f"train/metric{i % 20}", float(i), base + i / SCALARS_PER_S)


def _data_bytes(logdir: str) -> int:
    """Bytes of the records themselves (framing included, file headers not)."""
    framing = 16  # length, its CRC, the data's CRC
    return sum(
        len(record) + framing
        for path in fs.event_files(logdir)
        for record in tfrecord.iter_records(path)
    )


def run_ours(bucket: str, minutes: list[int]) -> dict[int, tuple[int, int, int, int]]:
    """Cumulative (bytes uploaded, requests, segments, deltas) after each horizon, tb-monitor."""
    counter = Counter()
    _count_s3fs(counter)
    os.environ["TB_MONITOR_UPLOAD_SECS"] = "3600"  # uploads happen at our simulated flushes
    logdir = f"{bucket}/ours"
    writer = AsyncWriter(logdir, flush_secs=3600)
    stream = writer.file.stream
    out: dict[int, tuple[int, int, int]] = {}
    for second in range(max(minutes) * 60):
        _second(writer.add_scalar, second)
        if second % EVENT_EVERY_S == 0:
            writer.add_text("events/note", f"step {second}", wall_time=1_700_000_000.0 + second)
        if (second + 1) % OUR_UPLOAD_S == 0:
            writer.flush()
        if (second + 1) % 60 == 0 and (second + 1) // 60 in minutes:
            names = fs.event_files(logdir)
            segments = sum(1 for n in names if not objects.is_delta(n.rsplit("/", 1)[-1]))
            out[(second + 1) // 60] = (
                stream.uploaded_bytes,
                counter.requests,
                segments,
                len(names) - segments,
            )
    writer.close()
    return out


def run_tensorboardx(bucket: str, minutes: list[int]) -> dict[int, tuple[int, int]]:
    """Cumulative (bytes uploaded, requests) after each horizon, tensorboardX's S3 writer."""
    from tensorboardX import SummaryWriter

    counter = Counter()
    _count_tensorboardx(counter)
    writer = SummaryWriter(f"{bucket}/tensorboardx")
    out: dict[int, tuple[int, int]] = {}

    def add(tag, value, wall_time):
        writer.add_scalar(tag, value, walltime=wall_time)

    for second in range(max(minutes) * 60):
        _second(add, second)
        if second % EVENT_EVERY_S == 0:
            writer.add_text("events/note", f"step {second}", walltime=1_700_000_000.0 + second)
        if (second + 1) % TBX_FLUSH_S == 0:
            writer.flush()
        if (second + 1) % 60 == 0 and (second + 1) // 60 in minutes:
            out[(second + 1) // 60] = (counter.bytes, counter.requests)
    writer.close()
    return out


def _visible(run: str) -> bool:
    try:
        return any(True for _ in readers.iter_scalars(run))
    except FileNotFoundError:  # nothing uploaded yet
        return False


def visibility(bucket: str, samples: int) -> list[float]:
    """Seconds from add_scalar to the point being read back, at default upload interval."""
    os.environ["TB_MONITOR_UPLOAD_SECS"] = str(OUR_UPLOAD_S)
    found = []
    for n in range(samples):
        run = f"{bucket}/visible{n}"
        with AsyncWriter(run) as writer:
            time.sleep(n * 0.7 % OUR_UPLOAD_S)  # calls land at different points of the cycle
            start = time.monotonic()
            writer.add_scalar("x", 1.0)
            while not _visible(run):
                time.sleep(0.1)
            found.append(time.monotonic() - start)
    return found


def caller_cost(bucket: str, n: int, rounds: int) -> tuple[float, float]:
    """Median µs per add_scalar into an s3:// writer and into a local one."""
    results = {"s3": [], "local": []}
    with tempfile.TemporaryDirectory() as local:
        for _ in range(rounds):
            for where, logdir in (("local", local), ("s3", f"{bucket}/cost")):
                writer = AsyncWriter(logdir, max_queue=n + 1)
                start = time.perf_counter()
                for i in range(n):
                    writer.add_scalar("loss", float(i))
                results[where].append((time.perf_counter() - start) / n * 1e6)
                writer.close()
    return statistics.median(results["s3"]), statistics.median(results["local"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visibility-samples", type=int, default=5)
    parser.add_argument("--cost-calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with benchmark_s3() as server:
        bucket = f"s3://{server.make_bucket()}"
        ours = run_ours(bucket, [1, 5, 10, 60])
        theirs = run_tensorboardx(bucket, [1, 5, 10])
        data_bytes = _data_bytes(f"{bucket}/ours")
        per_minute = data_bytes / 60
        print(
            f"{SCALARS_PER_S} scalars/s and an event every {EVENT_EVERY_S} s; data "
            f"{per_minute / 1e6:.2f} MB/min"
        )
        print(
            f"{'minutes':>8} {'ours: uploaded/data':>20} {'requests':>9} "
            f"{'tensorboardX: uploaded/data':>28} {'requests':>9}"
        )
        for minute in (1, 5, 10, 60):
            size = per_minute * minute
            up, requests, _, _ = ours[minute]
            tbx = theirs.get(minute)
            tbx_text = f"{tbx[0] / size:>28.2f} {tbx[1]:>9}" if tbx else f"{'-':>28} {'-':>9}"
            print(f"{minute:>8} {up / size:>20.2f} {requests:>9} {tbx_text}")
        _, _, segments, deltas = ours[60]
        print(
            f"objects per process-hour at defaults: {segments} segments (all TensorBoard "
            f"lists; goal <= 60) + {deltas} deltas of the open segment"
        )
        print("(tensorboardX 0.00: nothing uploaded yet; its first flush comes at 2 minutes)")
        seen = visibility(bucket, args.visibility_samples)
        print(
            f"visible in read_scalars after: median {statistics.median(seen):.1f} s, "
            f"max {max(seen):.1f} s (goal <= 10 s; tensorboardX: up to {TBX_FLUSH_S:.0f} s)"
        )
        s3_us, local_us = caller_cost(bucket, args.cost_calls, args.rounds)
        print(
            f"caller cost per scalar: s3:// {s3_us:.2f} µs, local {local_us:.2f} µs, "
            f"ratio {s3_us / local_us:.2f} (goal <= 1.10)"
        )


if __name__ == "__main__":
    main()
