"""Exports of a big logdir: throughput and peak memory of jsonl and csv against TensorBoard's loader.

1. (default) On one logdir (``--logdir``, or a generated 64-node x 1-h job with every rank's
   step windows as scalars), side by side, each side in a fresh process so that peaks do not mix:

   - ``write_jsonl`` to a file: timeline events/s, and the growth of the process's peak RSS
     (``ru_maxrss`` after the work over ``ru_maxrss`` once everything is imported); once with
     the default ``chunk_lines`` (a logdir this size fits in one chunk) and once with a small
     one (``--spill-chunk``), which sorts on disk and merges, as a 1,024-node day does;
   - ``write_csv`` to a file: scalar rows/s and peak RSS growth;
   - the anchor, TensorBoard's ``EventAccumulator`` loading the same runs with every tensor and
     scalar kept (size guidance 0), all runs held as TensorBoard holds them: loaded
     items (timeline events and scalar points)/s and peak RSS growth.

   Every side is one whole pass over the same logdir, so the ratios are of whole passes: the
   anchor's seconds over the side's (above 1: faster than TensorBoard loading it), and the
   side's RSS growth over the anchor's (below 1: smaller). Rates are each in their own unit.

2. ``--chrome-trace``: the Chrome-trace export of a 100k-event logdir against a naive export
   with TensorBoard's ``EventFileLoader`` (read every record, ``json.loads`` each timeline
   payload, one instant event per record). Rounds alternate which side runs first; medians in
   seconds. Target: ours / anchor <= 1.0 (while doing more: lanes, intervals, metadata).

    python benchmarks/bench_export.py [--logdir DIR | --nodes 64 --hours 1] [--spill-chunk 10000]
    python benchmarks/bench_export.py --chrome-trace [--events 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tb_monitor import contract, export
from tb_monitor.logdir import readers
from tb_monitor.testing import generate_job

# ---------------------------------------------------------------------------------------------
# 1. jsonl and csv against EventAccumulator: throughput and peak RSS, one process a side
# ---------------------------------------------------------------------------------------------


def _max_rss_bytes() -> int:
    """This process's peak resident set so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def side_jsonl(logdir: str, out: str, chunk_lines: int) -> dict[str, int]:
    """``export.write_jsonl`` to a file."""
    return {"events": export.write_jsonl(logdir, out, progress=False, chunk_lines=chunk_lines)}


def side_csv(logdir: str, out: str, chunk_lines: int) -> dict[str, int]:
    """``export.write_csv`` to a file."""
    return {"scalars": export.write_csv(logdir, out, progress=False)}


def side_anchor(logdir: str, out: str, chunk_lines: int) -> dict[str, int]:
    """TensorBoard's ``EventAccumulator`` loading every run, every tensor and scalar kept."""
    keep_all = {ea.TENSORS: 0, ea.SCALARS: 0}
    loaded = []  # every run's accumulator, held as TensorBoard's multiplexer holds them
    for _, directory in readers.iter_runs(logdir):
        accumulator = ea.EventAccumulator(directory, size_guidance=keep_all)
        accumulator.Reload()
        loaded.append(accumulator)
    events = scalars = 0
    for accumulator in loaded:
        tags = accumulator.Tags()
        scalars += sum(len(accumulator.Scalars(tag)) for tag in tags["scalars"])
        for tag in tags["tensors"]:
            if contract.kind_of_tag(tag) is None:
                scalars += len(accumulator.Tensors(tag))  # the scalars plugin's tensors
                continue
            for datum in accumulator.Tensors(tag):
                tensor = datum.tensor_proto
                batched = bool(tensor.tensor_shape.dim)
                events += len(contract.record_events(tensor.string_val, datum.wall_time, batched))
    return {"events": events, "scalars": scalars}


SIDES = {"jsonl": side_jsonl, "csv": side_csv, "anchor": side_anchor}


def run_side(side: str, logdir: str, out: str, chunk_lines: int) -> None:
    """Inside the side's own process: do the work once, print its figures as one JSON line."""
    before = _max_rss_bytes()
    start = time.perf_counter()
    counts = SIDES[side](logdir, out, chunk_lines)
    seconds = time.perf_counter() - start
    peak = _max_rss_bytes()
    print(json.dumps({**counts, "seconds": seconds, "rss_peak": peak, "rss_growth": peak - before}))


def measure(side: str, logdir: str, out: str, chunk_lines: int = export.CHUNK_LINES) -> dict:
    """Run one side in a fresh interpreter; its figures."""
    command = [sys.executable, os.path.abspath(__file__), "--side", side, "--logdir", logdir]
    command += ["--out", out, "--chunk-lines", str(chunk_lines)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _size(logdir: str) -> int:
    return sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(logdir) for f in files
    )


def compare_memory(logdir: str, spill_chunk: int) -> None:
    runs = sum(1 for _ in readers.iter_runs(logdir))
    print(f"logdir {logdir}: {runs:,} runs, {_size(logdir) / 2**20:,.1f} MiB on disk")
    print("each side in a fresh process: seconds, throughput, and peak RSS growth (ru_maxrss)")
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = measure("jsonl", logdir, os.path.join(tmp, "events.jsonl"))
        jsonl_size = os.path.getsize(os.path.join(tmp, "events.jsonl"))
        spill = measure("jsonl", logdir, os.path.join(tmp, "spilled.jsonl"), spill_chunk)
        csv = measure("csv", logdir, os.path.join(tmp, "scalars.csv"))
        csv_size = os.path.getsize(os.path.join(tmp, "scalars.csv"))
        anchor = measure("anchor", logdir, os.path.join(tmp, "unused"))
    events, scalars = jsonl["events"], csv["scalars"]
    print(f"  {events:,} timeline events (jsonl {jsonl_size / 2**20:,.1f} MiB), ", end="")
    print(f"{scalars:,} scalar points (csv {csv_size / 2**20:,.1f} MiB)")
    if (anchor["events"], anchor["scalars"]) != (events, scalars):
        print(
            f"  NOTE: the anchor loaded {anchor['events']:,} events, {anchor['scalars']:,} scalars"
        )
    items = anchor["events"] + anchor["scalars"]
    rows = [
        (f"write_jsonl, chunk_lines={export.CHUNK_LINES:,}", jsonl, events, "events"),
        (f"write_jsonl, chunk_lines={spill_chunk:,} (spills)", spill, events, "events"),
        ("write_csv", csv, scalars, "rows"),
        ("anchor: EventAccumulator, all kept", anchor, items, "items"),
    ]
    print(
        f"  {'':<40}{'s':>7}{'per s':>11}{'':<7}{'peak':>6}{'growth':>8}{'speed x':>9}{'RSS x':>7}"
    )
    for name, figures, count, unit in rows:
        rate = count / figures["seconds"]
        peak, growth = figures["rss_peak"] / 2**20, figures["rss_growth"] / 2**20
        speed = anchor["seconds"] / figures["seconds"]
        print(
            f"  {name:<40}{figures['seconds']:7.2f}{rate:11,.0f} {unit:<6}{peak:6.0f}{growth:8.1f}"
            f"{speed:9.2f}{figures['rss_growth'] / anchor['rss_growth']:7.3f}"
        )
    print("  peak: the process's peak RSS, MiB; growth: over its RSS once imports were done, MiB")
    print("  speed x: the anchor's seconds / the side's; RSS x: the side's growth / the anchor's")


# ---------------------------------------------------------------------------------------------
# 2. Chrome trace against a naive export with EventFileLoader: time
# ---------------------------------------------------------------------------------------------


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


def compare_chrome_trace(events: int, nodes: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logdir = os.path.join(tmp, "logs")
        job = generate_job(logdir, nodes=nodes, workers_per_node=8, events=events)
        out = os.path.join(tmp, "trace.json")
        print(f"logdir: {job.total_events} timeline records, {len(job.runs)} runs")
        sides = {"anchor": anchor, "ours": ours}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for round_ in range(rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                times[side].append(_seconds(sides[side], logdir, out))
        theirs, mine = (statistics.median(times[side]) for side in ("anchor", "ours"))
        print(f"{'case':<34}{'anchor s':>10}{'ours s':>10}{'ratio':>8}")
        case = f"chrome trace, {job.total_events} events"
        print(f"{case:<34}{theirs:>10.2f}{mine:>10.2f}{mine / theirs:>7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="an existing logdir (default: generate a job)")
    parser.add_argument("--nodes", type=int, default=64, help="nodes of the generated job")
    parser.add_argument("--hours", type=float, default=1.0, help="hours of the generated job")
    parser.add_argument(
        "--spill-chunk", type=int, default=10_000, help="chunk_lines of the spilling jsonl run"
    )
    parser.add_argument("--chrome-trace", action="store_true", help="run part 2 instead")
    parser.add_argument("--events", type=int, default=100_000, help="events of part 2's job")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of part 2")
    # One side, inside its own process (see measure()).
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument(
        "--chunk-lines", type=int, default=export.CHUNK_LINES, help=argparse.SUPPRESS
    )
    args = parser.parse_args()

    if args.side:
        run_side(args.side, args.logdir, args.out, args.chunk_lines)
        return
    if args.chrome_trace:
        compare_chrome_trace(args.events, args.nodes, args.rounds)
        return
    print(__doc__.split("\n\n")[0].splitlines()[0])
    if args.logdir:
        compare_memory(args.logdir, args.spill_chunk)
        return
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        generate_job(
            tmp,
            nodes=args.nodes,
            workers_per_node=4,
            hours=args.hours,
            restarts=3,
            scalars=True,
            rank_stats=True,
            processes=min(args.nodes, os.cpu_count() or 1),
        )
        elapsed = time.perf_counter() - start
        print(
            f"generated {args.nodes} nodes x 4 workers x {args.hours:g} h, 3 restarts, every "
            f"rank's step windows as scalars ({elapsed:.1f} s)"
        )
        compare_memory(tmp, args.spill_chunk)


if __name__ == "__main__":
    main()
