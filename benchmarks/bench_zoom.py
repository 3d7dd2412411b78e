"""The warm zoomed-in window of a big job, as the plugin serves it, against the anchor.

Every window of one snapshot and filters says the same of its lanes, facets and attempts (on
the 1,024-node day, ~0.6 MB of a 1% window's ~1.8 MB of JSON). The plugin keeps that frame
encoded per snapshot and filters and encodes only the window (``tb_plugin.plugin._Payloads``);
the anchor is what it did before: the whole payload made and encoded for each window
(``timeline_payload``, then ``json.dumps``). Both then gzip as TensorBoard's ``Respond`` does
(level 3). In process, on one store read once; each round asks both sides a window neither
asked before (the plugin keeps each window it served), alternating which goes first.

    python benchmarks/bench_zoom.py [--logdir DIR]   # default: the 1,024-node day, made here
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time

from tensorboard import context as tb_context

from tb_monitor import contract
from tb_plugin.event_files import EventFiles
from tb_plugin.plugin import _Payloads
from tb_plugin.query import timeline_payload
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.requests import Query
from tb_plugin.store import TimelineStore

ROUNDS = 20
WIDTH = 2000  # pixels, as bench_scale's zoomed-in query
TARGET_S = 0.100  # issue 25: zoomed-in queries stay within 100 ms


def _store(logdir: str) -> TimelineStore:
    """A store over ``logdir`` as a local TensorBoard's: its Rust data server lists the series
    (each one's newest record kept), helpers read the event files."""
    from tensorboard.data import server_ingester
    from tensorboard.util import grpc_util

    ingester = server_ingester.SubprocessServerDataIngester(
        server_ingester.get_server_binary(),
        logdir,
        reload_interval=0,  # load once
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin={contract.PLUGIN_NAME: 1},
    )
    ingester.start()
    provider, ctx = ingester.data_provider, tb_context.RequestContext()
    listed, last = 0, -1
    while listed != last or not listed:  # the server loads in the background: until it is done
        time.sleep(2)
        listing = provider.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
        last, listed = listed, sum(s.max_step + 1 for t in listing.values() for s in t.values())
    store = TimelineStore(provider, helpers=ReadWorkers(None), files=EventFiles(logdir))
    store.refresh(ctx, force=True)
    return store


def _anchor(snap, query: Query) -> bytes:
    body = json.dumps({**timeline_payload(snap, query), "loading": snap.loading})
    return gzip.compress(body.encode(), compresslevel=3, mtime=0)


def _ours(payloads: _Payloads, snap, query: Query) -> bytes:
    return gzip.compress(payloads.get(snap, query).encode(), compresslevel=3, mtime=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", help="a logdir read already (default: the day, made here)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        logdir = args.logdir
        if logdir is None:
            from tb_monitor.synthetic import generate_job

            logdir = folder
            generate_job(logdir, nodes=1024, workers_per_node=4, hours=24, restarts=3, processes=8)
        started = time.perf_counter()
        snap = _store(logdir).snapshot()
        print(f"{len(snap.columns.t):,} events read in {time.perf_counter() - started:.1f} s")
        lo, hi = snap.columns.extent
        payloads = _Payloads()
        payloads.get(snap, Query(width=1000))  # the whole job first, as the tab opens
        times: dict[str, list[float]] = {"anchor": [], "ours": []}
        for i in range(ROUNDS):
            start = lo + (hi - lo) * (0.30 + 0.02 * i)
            window = {"start": start, "end": start + (hi - lo) * 0.01}
            sides = [
                ("anchor", lambda w=window: _anchor(snap, Query(**w, width=WIDTH))),
                ("ours", lambda w=window: _ours(payloads, snap, Query(**w, width=WIDTH))),
            ]
            for name, run in sides if i % 2 else sides[::-1]:
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
    anchor, ours = (statistics.median(times[name]) for name in ("anchor", "ours"))
    print(
        f"1% window, made, encoded and gzipped, median of {ROUNDS} (target {TARGET_S * 1e3:.0f} ms):"
    )
    print(f"  anchor (whole payload each window): {anchor * 1e3:6.1f} ms")
    print(f"  ours (frame kept per snapshot):     {ours * 1e3:6.1f} ms   x{ours / anchor:.2f}")


if __name__ == "__main__":
    main()
