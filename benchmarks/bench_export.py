"""Chrome-trace export of a 100k-event logdir: ``tb_monitor.export`` against TensorBoard's reader.

Ours: ``export.write_chrome_trace`` (read with our C-crc32c reader, decode torch's JSON, lanes
and intervals, write the trace). Anchor: the naive export a user would write with TensorBoard's
own ``EventFileLoader``: read every record, ``json.loads`` each timeline payload, write one
instant event per record. Rounds alternate which side runs first; figures are medians in
seconds. Target: ours / anchor <= 1.0 (while doing more: lanes, intervals, metadata).

    python benchmarks/bench_export.py [--events 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tb_monitor import contract, export
from tb_monitor.testing import generate_job


def anchor(logdir: str, out: str) -> int:
    """Export every timeline record as an instant event, reading with TensorBoard's loader."""
    events = []
    for directory, _, files in os.walk(logdir):
        for name in sorted(f for f in files if "tfevents" in f):
            for event in EventFileLoader(os.path.join(directory, name)).Load():
                for value in event.summary.value:
                    if contract.kind_of_tag(value.tag) is None:
                        continue
                    record = json.loads(value.tensor.string_val[0])
                    ts = round(event.wall_time * 1e6)
                    events.append({"name": record["name"], "ph": "i", "ts": ts, "args": record})
    with open(out, "w") as f:
        json.dump({"traceEvents": events}, f)
    return len(events)


def ours(logdir: str, out: str) -> int:
    """``tb_monitor.export.write_chrome_trace``, no progress bar."""
    return export.write_chrome_trace(logdir, out, progress=False)


def _seconds(fn, logdir: str, out: str) -> float:
    start = time.perf_counter()
    fn(logdir, out)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "logs")
        job = generate_job(logdir, nodes=args.nodes, workers_per_node=8, events=args.events)
        out = os.path.join(tmp, "trace.json")
        print(f"logdir: {job.total_events} timeline records, {len(job.runs)} runs")
        sides = {"anchor": anchor, "ours": ours}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                times[side].append(_seconds(sides[side], logdir, out))
        theirs, mine = (statistics.median(times[side]) for side in ("anchor", "ours"))
        print(f"{'case':<34}{'anchor s':>10}{'ours s':>10}{'ratio':>8}")
        case = f"chrome trace, {job.total_events} events"
        print(f"{case:<34}{theirs:>10.2f}{mine:>10.2f}{mine / theirs:>7.2f}x")


if __name__ == "__main__":
    main()
