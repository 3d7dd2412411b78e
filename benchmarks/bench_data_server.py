"""What TensorBoard's Rust data server holds per timeline record, and per byte of one.

``--load_fast`` TensorBoard keeps every record of every timeline series in its data server (the
plugin asks for all of them), so a logdir's records cost the data server's memory on top of
TensorBoard's own. This writes logdirs of timeline records (through ``summaries``, as the
writer does: 100 runs, 2-string tensors, the plugin's metadata) with few and many records, small
and large, loads each in a data server (``--reload once``), and fits its resident memory to
``base + per_record * records + per_byte * payload bytes``: the anchor is an empty logdir's.
With ``--logdir``, that logdir's data server too (e.g. a day written by ``generate_job``).

    python benchmarks/bench_data_server.py [--records 100000] [--logdir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

from tensorboard.compat.proto import event_pb2
from tensorboard.data import server_ingester
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tb_monitor import contract
from tb_monitor.sinks.summaries import timeline_batch_summary

RUNS = 100
SETTLE_S = 6.0  # a data server with --reload once has loaded 200k records well before


def _write(logdir: str, records: int, payload_bytes: int) -> int:
    """``records`` timeline records of two strings, ``payload_bytes`` in all; the bytes on disk."""
    half = "x" * (payload_bytes // 2)
    for run in range(RUNS):
        writer = EventFileWriter(os.path.join(logdir, f"run-{run}"))
        for step in range(records // RUNS):
            summary = timeline_batch_summary(contract.RENDEZVOUS, f"{step:>{len(half)}}", [half])
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
        writer.close()
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir) for f in fs)


def _rss_mib(logdir: str) -> float:
    """The data server's resident memory once it has loaded ``logdir`` (every timeline record
    kept, as the plugin asks)."""
    server = subprocess.Popen(
        [
            server_ingester.get_server_binary().path,
            *("--logdir", logdir, "--port", "0", "--host", "127.0.0.1", "--reload", "once"),
            f"--samples-per-plugin={contract.PLUGIN_NAME}=all",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(SETTLE_S)
        with open(f"/proc/{server.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records of the big logdirs")
    parser.add_argument("--logdir", help="also load this logdir")
    args = parser.parse_args()
    n = args.records
    cases = [(0, 0), (n, 16), (2 * n, 16), (n, 900)]
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        for records, size in cases:
            logdir = tempfile.mkdtemp(dir=folder)
            on_disk = _write(logdir, records, size) if records else 0
            figures[(records, size)] = _rss_mib(logdir)
            print(
                f"{records:>9,} records of {size:>4} B: on disk {on_disk / 2**20:7.1f} MiB, "
                f"data server RSS {figures[(records, size)]:7.1f} MiB"
            )
    base = figures[(0, 0)]
    per_record = (figures[(2 * n, 16)] - figures[(n, 16)]) * 2**20 / n
    per_byte = (figures[(n, 900)] - figures[(n, 16)]) * 2**20 / (n * (900 - 16))
    print(f"\nempty logdir (the anchor): {base:.1f} MiB")
    print(
        f"per record: {per_record:.0f} B of the data server's memory (x{per_record / 16:.0f} its 16 payload bytes)"
    )
    print(f"per payload byte: {per_byte:.2f} B")
    if args.logdir:
        print(f"{args.logdir}: data server RSS {_rss_mib(args.logdir) / 1024:.3f} GiB")


if __name__ == "__main__":
    main()
