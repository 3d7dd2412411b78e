"""``read_events`` on a long job's timeline: rows decoded from a columnar record's objects
against the same rows decoded from JSON text made only to be parsed again (the path before).

The logdir is issue 45's busy-close shape: writer processes each recording rendezvous keep-alives
through the public API (``construct_and_record_rdzv_event`` inside ``tb_monitor.init``), 32 nodes
per process, a distinct message each, so every event is distinct (no payload memo helps). Each
round reads it both ways, alternating which goes first; CPU seconds (the machine may be busy),
medians and their ratio. The anchor is the path before: ``decode_timeline(iter_timeline())``
into the same DataFrame, the collector running as it did.

    python benchmarks/bench_read_events.py [--writers 8] [--events 128000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tb_monitor.logdir import readers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from keep_alive_writers import record_in_parallel  # noqa: E402  (the busy-close test's writers)


def record(logdir: str, writers: int, events: int) -> None:
    """``writers`` processes at once, each recording ``events`` keep-alives into its own run."""
    record_in_parallel([f"{logdir}/agent-{i}" for i in range(writers)], events)


def before(logdir: str):
    """The path before: every distinct event's JSON made, then parsed, the collector on."""
    return readers.events_frame(readers.decode_timeline(readers.iter_timeline(logdir)))


def timed(read, logdir: str):
    start = time.process_time()
    frame = read(logdir)
    return time.process_time() - start, frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--events", type=int, default=128_000, help="keep-alives per writer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as logdir:
        record(logdir, args.writers, args.events)
        total = args.writers * args.events
        ours_s, anchor_s = [], []
        for round_ in range(args.rounds):
            sides = [("ours", readers.read_events), ("anchor", before)]
            if round_ % 2:
                sides.reverse()
            frames = {}
            for name, read in sides:
                seconds, frames[name] = timed(read, logdir)
                (ours_s if name == "ours" else anchor_s).append(seconds)
            assert len(frames["ours"]) == total
            assert frames["ours"].equals(frames["anchor"]), "the two paths read different frames"
        ours, anchor = statistics.median(ours_s), statistics.median(anchor_s)
        print(f"read_events of {total:,} distinct keep-alives ({args.writers} runs), CPU seconds:")
        print(f"  ours   {ours:7.2f} s  ({total / ours:10,.0f} events/s)")
        print(f"  anchor {anchor:7.2f} s  ({total / anchor:10,.0f} events/s)  the path before")
        print(f"  ratio ours / anchor {ours / anchor:.2f}")


if __name__ == "__main__":
    main()
