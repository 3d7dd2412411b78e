"""Soak: many threads at full speed for minutes, then many processes on one logdir at once.

Part 1, threads: ``--threads`` (8) threads each call ``Stat.add`` and ``put_metric`` in a tight
loop for ``--minutes`` (10), while the main thread logs a ``torch.monitor``-style event every
10 ms. Reported: the calls made and what is on disk afterwards (exact: every ``put_metric`` is
one scalar, the Stat's COUNT windows sum to its adds, every event one timeline record), the
records dropped, the process RSS at 1, 5 and 10 minutes (and the end), and the caller's cost per
call (p50 / p99 / p99.9 of one call in 32, timed with ``perf_counter_ns``).

Part 2, processes: ``--processes`` (64) processes started at once all write the same run
directory (the logdir itself: the case DESIGN.md warns about, where only steps interleave), each
``--per-process`` (20000) metrics on its own tag and on one shared tag, a Stat and 100 events.
Reported: records on disk per tag against what each process wrote, event files (one per
process: none clobbered), and the wall time. Processes beyond the machine's cores simply queue
for CPU; the figure to read is "nothing lost, nothing clobbered", not the speed.

    python benchmarks/bench_soak.py [--minutes 10] [--processes 64] [--threads 8]

Not a CI test: the default run takes over 15 minutes and writes gigabytes to a temporary
directory (removed at the end unless ``--keep``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timedelta

import tb_monitor
from tb_monitor import Aggregation, Event, Stat, log_event
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.logdir import fs, readers, tfrecord
from tb_monitor.sinks.writer import DROPPED_TAG

_SAMPLE_EVERY = 32  # one call in this many is timed
_EVENT_NAME = "soak.event"


# -- measuring --------------------------------------------------------------------------------


class Histogram:
    """Call costs in fixed buckets (no allocation while measuring): 10 ns wide up to 100 µs,
    then 10 µs wide up to 100 ms, then one overflow bucket."""

    FINE, FINE_NS, COARSE_NS = 10_000, 10, 10_000

    def __init__(self) -> None:
        self.counts = [0] * (2 * self.FINE + 1)

    def add(self, ns: int) -> None:
        if ns < self.FINE * self.FINE_NS:
            self.counts[ns // self.FINE_NS] += 1
        else:
            self.counts[min(self.FINE + ns // self.COARSE_NS, 2 * self.FINE)] += 1

    def merge(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]

    def percentile(self, q: float) -> float:
        """The upper edge of the bucket holding the q-th percentile, in ns."""
        total = sum(self.counts)
        wanted, seen = q / 100 * total, 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= wanted and n:
                if i < self.FINE:
                    return (i + 1) * self.FINE_NS
                return (i - self.FINE + 1) * self.COARSE_NS
        return float("nan")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- counting what is on disk -----------------------------------------------------------------


def count_on_disk(
    logdir: str, metric_tags: list[str], stat_tags: set[str]
) -> tuple[Counter, Counter, Counter, int]:
    """Per metric tag: scalar records; per Stat COUNT tag: summed counts; events; dropped.

    Every record is read with our CRC-checking reader (``tfrecord.iter_records``). Metric
    records are counted in bulk, 100k records at a time, by their tag field (``"\\n" <length>
    <tag>``: exact); the few Stat, event, layout and dropped records are parsed one by one.
    """
    from tensorboard.compat.proto import event_pb2

    scalars: Counter[str] = Counter()
    stat_sums: Counter[str] = Counter()
    events: Counter[str] = Counter()
    dropped = 0
    fields = {tag: b"\n" + bytes([len(tag.encode())]) + tag.encode() for tag in metric_tags}
    dropped_tag = DROPPED_TAG.encode()

    def count(chunk: list[bytes]) -> None:
        nonlocal dropped
        plain = []
        for data in chunk:
            if b"soak/" in data and b"timeline/" not in data and b"custom_scalars" not in data:
                plain.append(data)  # a metric record
            elif b".count" in data or b"timeline/" in data or dropped_tag in data:
                event = event_pb2.Event.FromString(data)
                for value in event.summary.value:
                    if value.tag in stat_tags:
                        stat_sums[value.tag] += round(value.simple_value)
                    elif value.tag == DROPPED_TAG:
                        dropped += round(value.simple_value)
                    elif (
                        value.tag.startswith("timeline/")
                        and _EVENT_NAME.encode() in value.tensor.string_val[0]
                    ):
                        events[_EVENT_NAME] += 1
        blob = b"\x00".join(plain)
        for tag, field in fields.items():
            scalars[tag] += blob.count(field)

    report = tfrecord.DamageReport()
    for _, directory in readers.iter_runs(logdir):
        for path in fs.event_files(directory):
            chunk: list[bytes] = []
            for data in tfrecord.iter_records(path, report):
                chunk.append(data)
                if len(chunk) == 100_000:
                    count(chunk)
                    chunk = []
            count(chunk)
    if report:
        print(f"  DAMAGE on disk: {report}")
    return scalars, stat_sums, events, dropped


# -- part 1: threads --------------------------------------------------------------------------


def soak_threads(logdir: str, minutes: float, threads: int) -> bool:
    print(f"part 1: {threads} threads x (Stat.add + put_metric) at full speed, {minutes} min")
    monitor = tb_monitor.init(logdir)
    deadline = time.monotonic() + minutes * 60
    stop = threading.Event()
    adds = [0] * threads
    histograms = [(Histogram(), Histogram()) for _ in range(threads)]
    stats = [Stat(f"soak.t{i}", [Aggregation.COUNT], timedelta(seconds=1)) for i in range(threads)]

    def work(i: int) -> None:
        stat, name = stats[i], f"t{i}"
        h_add, h_put = histograms[i]
        clock = time.perf_counter_ns
        n = 0
        while not stop.is_set():
            for _ in range(_SAMPLE_EVERY - 1):
                stat.add(1.0)
                put_metric(name, 1, "soak")
            t0 = clock()
            stat.add(1.0)
            t1 = clock()
            put_metric(name, 1, "soak")
            t2 = clock()
            h_add.add(t1 - t0)
            h_put.add(t2 - t1)
            n += _SAMPLE_EVERY
        adds[i] = n

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    rss: list[tuple[float, float]] = [(0.0, rss_mib())]
    marks = [0] + [m for m in (1, 5, 10) if m < minutes] + [minutes]
    logged = 0
    next_sample = started + 10
    while time.monotonic() < deadline:
        log_event(Event(_EVENT_NAME, datetime.now(), {"i": logged, "note": "soak"}))
        logged += 1
        time.sleep(0.01)
        now = time.monotonic()
        if now >= next_sample:
            rss.append(((now - started) / 60, rss_mib()))
            next_sample += 10
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    rss.append((elapsed / 60, rss_mib()))
    for stat in stats:
        stat.close()
    t_close = time.monotonic()
    monitor.close()
    close_s = time.monotonic() - t_close

    calls = sum(adds)
    print(
        f"  calls: {calls:,} Stat.add + {calls:,} put_metric in {elapsed:.0f} s "
        f"({calls / elapsed / 1e3:.0f}k/s each), {logged:,} events; close took {close_s:.1f} s"
    )
    for mark in marks:
        at = min(rss, key=lambda point: abs(point[0] - mark))
        print(f"  RSS at {at[0]:5.2f} min: {at[1]:7.1f} MiB")
    h_add, h_put = Histogram(), Histogram()
    for a, p in histograms:
        h_add.merge(a)
        h_put.merge(p)
    for label, h in (("Stat.add", h_add), ("put_metric", h_put)):
        print(
            f"  {label:<11} per call: p50 {h.percentile(50) / 1e3:.2f} us, "
            f"p99 {h.percentile(99) / 1e3:.2f} us, p99.9 {h.percentile(99.9) / 1e3:.2f} us"
        )

    t_count = time.monotonic()
    stat_tags = {f"soak.t{i}.count" for i in range(threads)}
    metric_tags = [f"soak/t{i}" for i in range(threads)]
    scalars, stat_sums, events, dropped = count_on_disk(logdir, metric_tags, stat_tags)
    ok = True
    for i in range(threads):
        got_put, got_add = scalars[f"soak/t{i}"], stat_sums[f"soak.t{i}.count"]
        if got_put != adds[i] or got_add != adds[i]:
            ok = False
            print(
                f"  thread {i}: wrote {adds[i]:,}, on disk put_metric {got_put:,}, "
                f"Stat count {got_add:,}"
            )
    if events[_EVENT_NAME] != logged:
        ok = False
        print(f"  events: logged {logged:,}, on disk {events[_EVENT_NAME]:,}")
    size = sum(os.path.getsize(p) for _, d in readers.iter_runs(logdir) for p in fs.event_files(d))
    print(
        f"  on disk: {sum(scalars.values()):,} metric records, Stat counts summing to "
        f"{sum(stat_sums.values()):,}, {events[_EVENT_NAME]:,} events, {dropped} dropped, "
        f"{size / 2**20:.0f} MiB (counted in {time.monotonic() - t_count:.0f} s)"
    )
    print(f"  exact: {'yes' if ok and not dropped else 'NO'}")
    return ok and not dropped


# -- part 2: processes ------------------------------------------------------------------------

_CHILD = r"""
import sys, time
from datetime import datetime, timedelta
import tb_monitor
from tb_monitor import Aggregation, Event, Stat, log_event
from tb_monitor.elastic.metrics import put_metric
logdir, k, n, start_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
monitor = tb_monitor.init(logdir)
stat = Stat(f"soak.p{k}", [Aggregation.COUNT], timedelta(seconds=1))
while time.time() < start_at:
    time.sleep(0.005)
for i in range(n):
    put_metric(f"p{k}", i, "soak")
    put_metric("shared", 1, "soak")
    stat.add(1.0)
    if i % (n // 100 or 1) == 0:
        log_event(Event("soak.event", datetime.now(), {"k": k, "i": i}))
stat.close()
monitor.close()
"""


def soak_processes(logdir: str, processes: int, per_process: int) -> bool:
    print(
        f"part 2: {processes} processes x {per_process:,} metrics (+ a shared tag, a Stat, "
        f"events) into one run directory, all at once, on {os.cpu_count()} cores"
    )
    events_each = len(range(0, per_process, per_process // 100 or 1))
    start_at = time.time() + 3 + processes * 0.15  # after every child has imported and opened
    started = time.monotonic()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, logdir, str(k), str(per_process), str(start_at)]
        )
        for k in range(processes)
    ]
    failed = [k for k, child in enumerate(children) if child.wait() != 0]
    wall = time.monotonic() - started
    files = list(fs.event_files(logdir))
    stat_tags = {f"soak.p{k}.count" for k in range(processes)}
    metric_tags = [f"soak/p{k}" for k in range(processes)] + ["soak/shared"]
    scalars, stat_sums, events, dropped = count_on_disk(logdir, metric_tags, stat_tags)
    lost = {
        f"soak/p{k}": (per_process, scalars[f"soak/p{k}"])
        for k in range(processes)
        if scalars[f"soak/p{k}"] != per_process
    }
    lost.update(
        {
            f"soak.p{k}.count": (per_process, stat_sums[f"soak.p{k}.count"])
            for k in range(processes)
            if stat_sums[f"soak.p{k}.count"] != per_process
        }
    )
    if scalars["soak/shared"] != processes * per_process:
        lost["soak/shared"] = (processes * per_process, scalars["soak/shared"])
    if events[_EVENT_NAME] != processes * events_each:
        lost["events"] = (processes * events_each, events[_EVENT_NAME])
    total = sum(scalars.values())
    print(
        f"  {len(files)} event files for {processes} processes, {len(failed)} failed, "
        f"{total:,} metric records, {events[_EVENT_NAME]:,} events, {dropped} dropped, "
        f"wall {wall:.1f} s"
    )
    for tag, (wrote, got) in sorted(lost.items())[:10]:
        print(f"  {tag}: wrote {wrote:,}, on disk {got:,}")
    ok = not failed and not lost and not dropped and len(files) == processes
    print(f"  nothing lost, nothing clobbered: {'yes' if ok else 'NO'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="part 1's duration")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64, help="part 2's processes (0: skip)")
    parser.add_argument("--per-process", type=int, default=20_000)
    parser.add_argument("--keep", action="store_true", help="keep the logdirs")
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="tb_monitor-soak-")
    ok = True
    try:
        if args.minutes > 0:
            ok &= soak_threads(os.path.join(root, "threads"), args.minutes, args.threads)
        if args.processes > 0:
            shared = os.path.join(root, "processes")
            os.makedirs(shared)
            ok &= soak_processes(shared, args.processes, args.per_process)
    finally:
        if args.keep:
            print(f"logdirs kept under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
