"""Helpers for the Timeline plugin tests: synthetic jobs, payload columns, a real TensorBoard server."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from ports import free_port
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

from tb_monitor import contract
from tb_monitor.testing import SyntheticJob, generate_job

STARTUP_TIMEOUT_S = 90.0


def small_job(logdir, **overrides) -> SyntheticJob:
    """A 4-node, 2-workers-per-node job with one restart: every lane kind, a failure, a straggler."""
    options = {"nodes": 4, "workers_per_node": 2, "restarts": 1, "events": 600}
    options.update(overrides)
    return generate_job(logdir, **options)


def job_and_extra_run(logdir) -> SyntheticJob:
    """A small job written by two processes of our writer (columnar records), and a run
    ``extra`` holding an undecodable payload and a monitor event of its own (single-event
    records)."""
    from tb_monitor.sinks.writer import AsyncWriter

    job = small_job(logdir, processes=2)
    with AsyncWriter(f"{job.logdir}/extra") as writer:
        writer.add_timeline(contract.RENDEZVOUS, "not json", job.end + 1)
        writer.add_timeline(contract.MONITOR, '{"name": "late", "timestamp": 1}', job.end + 2)
    return job


def loaded_data_server(job: SyntheticJob, keep: int = 0) -> Any:
    """``data_server_provider`` over a ``job_and_extra_run`` job, once its listing holds the
    run ``extra`` and has stopped growing."""
    provider = data_server_provider(job.logdir, keep)
    ctx = tb_context.RequestContext()

    def listed():
        listing = provider.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
        steps = sum(s.max_step + 1 for tags in listing.values() for s in tags.values())
        return "extra" in listing and steps

    wait_for(lambda: (n := listed()) and n == listed(), what="the data server to load the job")
    return provider


def assert_same_store(ours: Any, theirs: Any) -> None:
    """Two timeline stores hold the same events (times, records, ids, in order), lanes, runs,
    messages, attempts and skipped records."""
    a, b = ours.snapshot(), theirs.snapshot()
    for name in ("t", "rec", "ids"):
        assert np.array_equal(getattr(a.columns, name), getattr(b.columns, name)), name
    assert (a.lanes, a.runs, list(a.msgs), a.attempts) == (
        b.lanes,
        b.runs,
        list(b.msgs),
        b.attempts,
    )
    assert ours.skipped() == theirs.skipped()


def expected_lanes(nodes: int, world: int) -> int:
    """Lanes of a synthetic job: a rendezvous and an agent lane per node, two per worker rank."""
    return 2 * nodes + 2 * world


def local_provider(logdir) -> data_provider.MultiplexerDataProvider:
    """TensorBoard's in-process data provider over a logdir, every timeline record kept."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={contract.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, str(logdir))


def data_server_provider(logdir, keep: int = 0) -> Any:
    """TensorBoard's Rust data server (what ``--load_fast=true`` runs) over a logdir, loaded
    once with ``keep`` timeline records kept per series (0: every one), and the
    ``GrpcDataProvider`` talking to it. The server exits with the test process (it dies when
    its stdin closes)."""
    from tensorboard.data import server_ingester
    from tensorboard.util import grpc_util

    binary = server_ingester.get_server_binary()
    ingester = server_ingester.SubprocessServerDataIngester(
        binary,
        str(logdir),
        reload_interval=0,  # load once
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin={contract.PLUGIN_NAME: keep},
    )
    ingester.start()
    return ingester.data_provider


def refreshed_store(logdir) -> Any:
    """A TimelineStore over ``logdir`` through TensorBoard's own data provider, refreshed once."""
    from tb_plugin.store import TimelineStore

    store = TimelineStore(local_provider(logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    return store


def picture(store: Any) -> list[tuple]:
    """Every event as drawn (time, lane, state) with its details (run, step, raw), unordered."""
    snap, ctx = store.snapshot(), tb_context.RequestContext()
    cols = snap.columns
    drawn = (cols.t.tolist(), cols.lane.tolist(), cols.state.tolist(), cols.ids.tolist())
    out = []
    for t, lane, state, event_id in zip(*drawn, strict=True):
        details = store.event(ctx, event_id)
        assert details["wall_time"] == t
        out.append(
            (
                t,
                snap.lanes[lane],
                snap.states[state],
                details["run"],
                details["step"],
                details["raw"],
            )
        )
    return sorted(out, key=repr)


def column(payload: dict, table: str, name: str, dtype: str | None = None) -> np.ndarray:
    """Decode one base64 typed-array column of a timeline payload (of the type the part's
    ``types`` names, for a part of narrowed columns)."""
    part = payload[table]
    dtype = dtype or "<" + part["types"][name]
    return np.frombuffer(base64.b64decode(part[name]), dtype=dtype)


def lanes(payload: dict) -> list[dict]:
    """A timeline payload's lanes, sent as columns, as one dict per lane (as ``api.js`` makes
    them): label, group, kind, run."""
    columns, facets = payload["lanes"], payload["facets"]
    return [
        {
            "label": columns["label"][i],
            "group": facets["run_ids"][columns["group"][i]],
            "kind": payload["kinds"][columns["kind"][i]],
            "run": facets["runs"][columns["run"][i]],
        }
        for i in range(columns["count"])
    ]


def bucket_lanes(payload: dict) -> np.ndarray:
    """Each level-of-detail bucket's lane position, from the lanes' first buckets."""
    lane_start = column(payload, "buckets", "lane_start")
    return np.repeat(np.arange(len(lane_start) - 1), np.diff(lane_start))


class GatedProvider:
    """A real data provider whose reads after the first wait for a gate: a long first decode."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = threading.Event()
        self.reads = 0
        self.fail_next_listing = False

    def list_tensors(self, *args, **kwargs):
        if self.fail_next_listing:
            self.fail_next_listing = False
            raise RuntimeError("data server not up yet")
        return self.inner.list_tensors(*args, **kwargs)

    def read_tensors(self, *args, **kwargs):
        self.reads += 1
        if self.reads > 1:
            assert self.gate.wait(60), "the test never opened the gate"
        return self.inner.read_tensors(*args, **kwargs)


@dataclass
class Server:
    """A `tensorboard` process serving one logdir on 127.0.0.1."""

    url: str
    process: subprocess.Popen
    log_path: str

    def get_json(self, route: str, timeout: float = 30.0) -> dict:
        with urllib.request.urlopen(self.url + route, timeout=timeout) as response:
            return json.load(response)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]


def start_tensorboard(logdir, log_dir, *extra: str) -> Server:
    """Start `tensorboard --logdir` on a free port and wait until it answers; a port another
    server took first is chosen again."""
    for _ in range(3):
        server = _launch_tensorboard(logdir, log_dir, free_port(), extra)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                if "could not bind" in server.log():
                    break
                pytest.fail(f"tensorboard exited with {server.process.returncode}:\n{server.log()}")
            try:
                server.get_json("/data/plugins_listing", timeout=5)
                return server
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        else:
            stop(server)
            pytest.fail(f"tensorboard did not answer within {STARTUP_TIMEOUT_S} s:\n{server.log()}")
    pytest.fail(f"tensorboard found no free port in three tries:\n{server.log()}")


def _launch_tensorboard(logdir, log_dir, port: int, extra: tuple[str, ...]) -> Server:
    log_path = os.path.join(log_dir, f"tensorboard-{port}.log")
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *extra]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return Server(f"http://127.0.0.1:{port}", process, log_path)


@contextmanager
def rank_windows_server(root, ranks: int, step_s: float, slow_ranks: list[int]) -> Iterator[Server]:
    """A TensorBoard over a small job's timeline (2 nodes x 2 workers) plus ``ranks`` ranks'
    health windows, ``slow_ranks`` computing longer: the Ranks view's usual test job."""
    from tb_monitor.testing import generate_rank_windows

    job = small_job(root / "logs", nodes=2, workers_per_node=2)
    generate_rank_windows(
        job.logdir, ranks, step_s, slow_ranks=slow_ranks, start=job.start, run_id=job.run_id
    )
    server = start_tensorboard(job.logdir, root, "--reload_interval=1")
    try:
        yield server
    finally:
        stop(server)


@contextmanager
def serving(root, build: Any) -> Iterator[Server]:
    """TensorBoard (reloading every second) over ``root/logs`` as ``build(logdir)`` wrote it,
    stopped after."""
    build(root / "logs")
    server = start_tensorboard(root / "logs", root, "--reload_interval=1")
    try:
        yield server
    finally:
        stop(server)


def stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=20)


def wait_for(condition, timeout: float = 60.0, interval: float = 0.25, what: str = "condition"):
    """Poll ``condition()`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last value {last!r})")


@pytest.fixture
def tensorboard_server(tmp_path) -> Iterator:
    """Factory: start `tensorboard` on a logdir with extra flags; stopped after the test."""
    servers: list[Server] = []

    def start(logdir, *extra: str) -> Server:
        server = start_tensorboard(logdir, tmp_path, *extra)
        servers.append(server)
        return server

    yield start
    for server in servers:
        stop(server)


class RanksTab:
    """The Timeline iframe switched to the Ranks view; page errors and dialogs recorded."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport={"width": 1280, "height": 800})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("dialog", lambda d: (self.errors.append(d.message), d.dismiss()))
        self.page.goto(f"{url}/#{contract.PLUGIN_NAME}")
        iframe = self.page.wait_for_selector("iframe[src*='plugin_entry.html']", timeout=60_000)
        self.frame = iframe.content_frame()
        self.frame.wait_for_selector(".tl-summary:has-text('events')", timeout=60_000)
        self.frame.locator("button.tl-view-toggle").click()
        self.frame.wait_for_selector(".tl-ranks:not([hidden])", timeout=10_000)

    def close(self) -> None:
        self.page.close()
        assert self.errors == [], self.errors


def huge_pages_advised() -> bool:
    """Whether numpy advises huge pages for its big arrays now (read, and left as it was)."""
    from tb_plugin import provider_store

    was = provider_store._MADVISE(False)
    provider_store._MADVISE(was)
    return was


#: Each character of an element's text in the order it is drawn, left to right.
VISUAL_ORDER = """(node) => {
    const chars = [], walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
    for (let t; (t = walker.nextNode()); ) {
        for (let i = 0; i < t.data.length; i++) {
            const range = document.createRange();
            range.setStart(t, i);
            range.setEnd(t, i + 1);
            const box = range.getBoundingClientRect();
            if (box.width > 0) chars.push([box.left, t.data[i]]);
        }
    }
    chars.sort((a, b) => a[0] - b[0]);
    return chars.map((c) => c[1]).join("");
}"""
