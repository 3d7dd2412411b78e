"""The Timeline tab on big jobs: data route, first render and zoom/pan frames in a real Chromium.

TensorBoard's own page takes most of the first render on a slow machine (its 6 MB bundle is
parsed, then it lists plugins, runs and environment before it creates the plugin's iframe), so the
first render is printed next to an ANCHOR measured in the same rounds, on the same TensorBoard and
logdir: the first render of TensorBoard's built-in Scalars tab (its first chart drawn). The
plugin's share, from its iframe's start to the first complete frame, is printed as well.

1. In process, 100k events over 64 nodes: the cold first decode, split into TensorBoard's
   ``read_tensors`` (its numpy conversion) and ours; then the warm data route of the plugin
   (``TimelineStore``: decoded once; ``timeline_payload``: filtered with numpy) against the
   anchor, a plugin that does what TensorBoard's own plugins do per request (``read_tensors`` of
   every record, then decode each one's JSON). Rounds alternate which side runs first; medians in seconds and their ratio.
2. Against a real ``tensorboard --logdir`` and Debian chromium, for 100k events over 64 nodes and
   1M events over 512 nodes: how long until TensorBoard has loaded and the plugin decoded every
   record (and the longest a request waited meanwhile: never the whole decode), the warm data
   route over HTTP, the first render from navigation against the Scalars anchor, and the time of
   one zoom or pan frame, each printed against its target. The 1M job is served as
   level-of-detail buckets; a zoomed-in window is fetched as detail.

3. The Ranks view's server side in process at the full 1,024 ranks x 24 h (no TensorBoard: the
   grid scored and flagged, then the payload of the whole job and of a zoomed hour), then the
   Ranks view (``tb_plugin.ranks``) on a synthetic 1,024-rank x 24-h logdir of 10-s rank
   windows (``tb_monitor.testing.generate_rank_windows``, two slow ranks; ``--ranks``,
   ``--ranks-hours`` choose a smaller one): how long until TensorBoard has loaded it and the
   view has every window, the warm ``ranks`` route (the whole job bucketed to 1,000 px), the
   first render of the Ranks view from navigation and from the plugin's iframe start (after
   TensorBoard's shell), and one zoom or pan frame; the anchor is TensorBoard's Scalars tab with
   every rank's run selected, on the same TensorBoard and logdir, in the same rounds. TensorBoard
   keeps every window of each scalar series (``--samples_per_plugin scalars=N``), so that both
   see them all.

    python benchmarks/bench_timeline.py [--rounds 5] [--skip-big] [--screenshot docs/timeline.png]
                                        [--ranks 1024] [--ranks-hours 24] [--only-ranks]

``--screenshot`` also saves the tab on a realistic small job at 1280x800 (the README's picture).
"""

from __future__ import annotations

import argparse
import base64
import functools
import gzip
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import numpy as np
from tensorboard import context as tb_context

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.scoring import longest_over
from tb_monitor.testing import generate_job, generate_rank_windows
from tb_plugin.query import Query, timeline_payload
from tb_plugin.rank_payload import ranks_payload
from tb_plugin.rank_snapshot import RankSnapshot
from tb_plugin.requests import RankQuery
from tb_plugin.store import TimelineStore

# The browser flags the tests' browser uses (tests/conftest.py: Debian chromium, no network of
# its own) and the plugin tests' chunked provider: both folders go on the path.
_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
sys.path[:0] = [_TESTS, os.path.join(_TESTS, "plugin")]
from conftest import CHROMIUM_ARGS  # noqa: E402
from plugin_helpers import local_provider  # noqa: E402

ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/timeline"
RANKS_ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/ranks"
CHROMIUM = os.environ.get("TB_MONITOR_CHROMIUM", "/usr/bin/chromium")
TARGET_ROUTE_S, TARGET_FIRST_RENDER_S, TARGET_FRAME_MS = 0.5, 1.5, 16.0
#: The Ranks view's first render is counted from the plugin's iframe start (issue 13).
TARGET_RANKS_RENDER_S = 1.0


def _report(what: str, value: float, target: float, unit: str) -> None:
    verdict = "ok" if value <= target else "OVER TARGET"
    print(f"  {what:<44} {value:9.3f} {unit:<3} (target <= {target:g} {unit})  {verdict}")


# ---------------------------------------------------------------------------------------------
# 1. In process: warm route against the naive per-request read
# ---------------------------------------------------------------------------------------------


def anchor(provider, ctx) -> int:
    """A plugin without a cache: read every record through the provider and decode it."""
    data = provider.read_tensors(
        ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME, downsample=2**31 - 1
    )
    rows = [
        contract.decode_record(contract.kind_of_tag(tag), payload)
        for tags in data.values()
        for tag, series in tags.items()
        for datum in series
        for _, payload in _events_of(datum)
    ]
    return len(rows)


def _events_of(datum) -> list[tuple[float, str]]:
    values = datum.numpy
    return contract.record_events(values.reshape(-1).tolist(), datum.wall_time, values.ndim > 0)


def ours(store: TimelineStore, ctx) -> int:
    """The plugin's route body: refresh (nothing new) and the whole-job payload."""
    store.refresh(ctx, force=True)
    return timeline_payload(store.snapshot(), Query())["total"]


class _TimedReads:
    """A data provider that adds up the time its ``read_tensors`` takes (TensorBoard's share)."""

    def __init__(self, provider) -> None:
        self.provider = provider
        self.read_s = 0.0

    def list_tensors(self, *args, **kwargs):
        return self.provider.list_tensors(*args, **kwargs)

    def read_tensors(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.provider.read_tensors(*args, **kwargs)
        finally:
            self.read_s += time.perf_counter() - start


def compare_in_process(logdir: str, rounds: int) -> None:
    ctx = tb_context.RequestContext()
    provider = local_provider(logdir)
    timed = _TimedReads(provider)
    store = TimelineStore(timed)
    start = time.perf_counter()
    total = ours(store, ctx)
    cold_s = time.perf_counter() - start
    print(f"  cold: first decode of {total:,} records      {cold_s:9.3f} s")
    print(f"    of which TensorBoard's read_tensors         {timed.read_s:9.3f} s")
    print(f"    of which ours (decode, lanes, intervals)    {cold_s - timed.read_s:9.3f} s")
    times: dict[str, list[float]] = {"ours": [], "anchor": []}
    sides = [("ours", lambda: ours(store, ctx)), ("anchor", lambda: anchor(provider, ctx))]
    for r in range(rounds):
        for name, fn in sides if r % 2 == 0 else reversed(sides):
            start = time.perf_counter()
            assert fn() == total
            times[name].append(time.perf_counter() - start)
    ours_s, anchor_s = statistics.median(times["ours"]), statistics.median(times["anchor"])
    print(f"  warm data route, ours (median)               {ours_s:9.3f} s")
    print(f"  anchor: read_tensors + decode (median)       {anchor_s:9.3f} s")
    print(f"  ratio ours / anchor                          {ours_s / anchor_s:9.3f}")


# ---------------------------------------------------------------------------------------------
# 2. A real TensorBoard and Chromium
# ---------------------------------------------------------------------------------------------


class TensorBoard:
    """`tensorboard --logdir` on a free 127.0.0.1 port, as a context manager."""

    def __init__(self, logdir: str, *extra: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", logdir]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "5", *extra]
        self.started = time.perf_counter()
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __enter__(self) -> TensorBoard:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get("/data/plugins_listing")
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"tensorboard did not start on {self.url}")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)

    def get(self, route: str) -> tuple[float, dict]:
        start = time.perf_counter()
        request = urllib.request.Request(self.url + route, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=600) as response:
            body = response.read()
        elapsed = time.perf_counter() - start
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return elapsed, json.loads(body)


def _report_frames(frames: list[float]) -> None:
    frames = sorted(frames)
    _report(
        f"zoom/pan frame, median of {len(frames)}", statistics.median(frames), TARGET_FRAME_MS, "ms"
    )
    _report(
        "zoom/pan frame, 95th percentile", frames[int(len(frames) * 0.95)], TARGET_FRAME_MS, "ms"
    )


@dataclass
class _Polled:
    """What polling a route until it was done saw."""

    first_s: float  # how long the first request took
    longest_s: float  # the longest request
    first: dict  # the first answer
    first_at: float  # when it came (perf_counter)
    done_at: float  # when the answer that was done came
    data: dict  # that answer
    progress_at: float | None = None  # when the first answer with events or loading came


def _poll_until(
    tb: TensorBoard, route: str, done, timeout_s: float, interval_s: float = 2.0
) -> _Polled:
    """Request ``route`` every ``interval_s`` until ``done(answer)``."""
    deadline = time.monotonic() + timeout_s
    polled = None
    while time.monotonic() < deadline:
        elapsed, data = tb.get(route)
        now = time.perf_counter()
        if polled is None:
            polled = _Polled(elapsed, elapsed, data, now, now, data)
        polled.longest_s, polled.done_at, polled.data = max(polled.longest_s, elapsed), now, data
        if polled.progress_at is None and (data.get("loading") or data.get("total")):
            polled.progress_at = now
        if done(data):
            return polled
        time.sleep(interval_s)
    raise RuntimeError(f"{route} was not done after {timeout_s:.0f} s: {polled and polled.data}")


def _wait_all_loaded(tb: TensorBoard, total: int) -> tuple[float, float]:
    """Poll the route until every record is loaded and decoded; the first and longest requests."""
    polled = _poll_until(
        tb, ROUTE + "?width=1000", lambda d: d["total"] == total and not d["loading"], 900
    )
    return polled.first_s, polled.longest_s


def _warm_route(
    tb: TensorBoard, query: str = "?width=1000", n: int = 5, route: str = ROUTE
) -> float:
    """The median of ``n`` requests, each for a window no earlier request asked for: the
    plugin keeps the payloads of the windows it served, and a warm route must compute one."""
    times = []
    for i in range(n):
        time.sleep(1.1)  # past the store's refresh interval: each request also lists the series
        fresh = re.sub(r"width=(\d+)", lambda m, i=i: f"width={int(m.group(1)) - i}", query)
        times.append(tb.get(route + fresh)[0])
    return statistics.median(times)


_FRAMES_JS = """() => {
    const tl = window.tbTimeline, out = [];
    const frame = (change) => { change(); const t = performance.now(); tl.drawNow();
                                out.push(performance.now() - t); };
    for (let k = 0; k < 20; k++) frame(() => tl.zoomBy(0.8, tl.width * 0.4));
    for (let k = 0; k < 20; k++) frame(() => tl.panBy(k % 2 ? -60 : 45));
    for (let k = 0; k < 20; k++) frame(() => tl.zoomBy(1.25, tl.width * 0.4));
    return out;
}"""


def _open_tab(page, url: str):
    page.goto(f"{url}/#{contract.PLUGIN_NAME}")
    frame = page.wait_for_selector("iframe[src*='plugin_entry.html']").content_frame()
    frame.wait_for_function("() => window.tbTimeline && window.tbTimeline.stats.firstRender")
    return frame


def _drawn_figures(page, frame, app: str, frames_js: str) -> tuple[float, float, list[float]]:
    """When ``window.<app>`` first drew, from navigation and from its iframe's start (s), and
    the frame times ``frames_js`` measures (ms)."""
    drawn = frame.evaluate(f"window.{app}.stats.firstRender")
    first = (drawn - page.evaluate("performance.timeOrigin")) / 1000.0
    own = (drawn - frame.evaluate("performance.timeOrigin")) / 1000.0
    return first, own, frame.evaluate(frames_js)


def browser_figures(browser, url: str) -> tuple[float, float, list[float]]:
    """First render from navigation and from the plugin's iframe start (s), frame times (ms)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        frame = _open_tab(page, url)
        return _drawn_figures(page, frame, "tbTimeline", _FRAMES_JS)
    finally:
        page.close()


# The first chart of TensorBoard's Scalars tab has drawn data: paths (lines or point symbols)
# inside a vz-line-chart2's shadow root; its axes alone draw none.
_SCALARS_DRAWN_JS = """() => {
    const charts = [];
    const walk = (root) => {
        for (const el of root.querySelectorAll("*")) {
            if (el.localName === "vz-line-chart2") charts.push(el);
            if (el.shadowRoot) walk(el.shadowRoot);
        }
    };
    walk(document);
    const drawn = charts.some((c) => [...(c.shadowRoot || c).querySelectorAll("path")]
        .some((p) => (p.getAttribute("d") || "").length > 20));
    return drawn ? performance.now() / 1000 : 0;
}"""


def _scalars_hash(tb: TensorBoard) -> str:
    """``#scalars`` with the runs holding scalars selected (in its URL state, base64 JSON).

    TensorBoard's run selector enables no run by default when there are more than 40, as in
    these jobs (one run per agent and rank), so the Scalars tab would draw nothing.
    """
    _, tags = tb.get("/data/plugin/scalars/tags")
    state = base64.b64encode(json.dumps(dict.fromkeys(tags, True)).encode()).decode()
    return f"#scalars&runSelectionState={urllib.parse.quote(state)}"


#: How long the anchor may take to draw before it counts as not drawing at all.
ANCHOR_TIMEOUT_S = 120.0


def anchor_first_render(browser, url: str, fragment: str) -> float:
    """The anchor: first render of TensorBoard's own Scalars tab from navigation (s), or
    ``math.inf`` when it has drawn nothing within ``ANCHOR_TIMEOUT_S``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{url}/{fragment}")
        timeout_ms = ANCHOR_TIMEOUT_S * 1000
        return page.wait_for_function(_SCALARS_DRAWN_JS, timeout=timeout_ms).json_value()
    except PlaywrightTimeout:
        return math.inf
    finally:
        page.close()


def _anchor(anchor_s: list[float], measure) -> None:
    """One more anchor round, unless the anchor already failed to draw (then: inf again)."""
    anchor_s.append(measure() if all(map(math.isfinite, anchor_s)) else math.inf)


def _anchor_text(seconds: float) -> str:
    return f"{seconds:9.3f} s" if math.isfinite(seconds) else f"none within {ANCHOR_TIMEOUT_S:g} s"


def first_renders(tb: TensorBoard, browser, rounds: int) -> tuple[float, float, float, list[float]]:
    """Interleaved rounds: medians of ours, our plugin's share and the anchor; our frame times."""
    url, fragment = tb.url, _scalars_hash(tb)
    ours_s, share_s, anchor_s, frames = [], [], [], []
    for r in range(rounds):
        if r % 2:
            anchor_s.append(anchor_first_render(browser, url, fragment))
        first, own, round_frames = browser_figures(browser, url)
        ours_s.append(first)
        share_s.append(own)
        frames += round_frames
        if not r % 2:
            anchor_s.append(anchor_first_render(browser, url, fragment))
    med = statistics.median
    return med(ours_s), med(share_s), med(anchor_s), frames


def run_job(browser, name, nodes: int, events: int, workers: int, lod: bool, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        job = generate_job(
            tmp, nodes=nodes, workers_per_node=workers, events=events, restarts=2, scalars=True
        )
        print(f"\n{name}: {job.total_events:,} events, {nodes} nodes, {len(job.runs)} runs")
        print(
            f"  generated in                                 {time.perf_counter() - start:9.1f} s"
        )
        with TensorBoard(tmp) as tb:
            start = time.perf_counter()
            first_request, longest = _wait_all_loaded(tb, job.total_events)
            print(
                f"  loaded by TensorBoard, decoded by us after   {time.perf_counter() - start:9.1f} s"
            )
            print(f"  first data request (may answer 'loading')    {first_request:9.3f} s")
            print(f"  longest data request while loading           {longest:9.3f} s")
            _report("data route, warm (median of 5)", _warm_route(tb), TARGET_ROUTE_S, "s")
            first, own, scalars, frames = first_renders(tb, browser, rounds)
            _report(
                f"first render from navigation (median of {rounds})",
                first,
                TARGET_FIRST_RENDER_S,
                "s",
            )
            print(f"    of which TensorBoard's shell, to our iframe {first - own:9.3f} s")
            print(f"    of which the plugin (iframe start to drawn) {own:9.3f} s")
            print(f"  anchor: Scalars tab first render (median)    {scalars:9.3f} s")
            print(f"  ratio ours / anchor                          {first / scalars:9.3f}")
            _report_frames(frames)
            if lod:
                _, data = tb.get(ROUTE + "?width=1000")
                print(f"  whole job served as                          {data['mode']:>9}")
                lo, hi = data["extent"]
                query = f"?start={lo + (hi - lo) * 0.5}&end={lo + (hi - lo) * 0.51}&width=2000"
                _, detail = tb.get(ROUTE + query)
                print(f"  1% window served as                          {detail['mode']:>9}")
                _report("zoomed-in detail route, warm", _warm_route(tb, query), TARGET_ROUTE_S, "s")


def screenshot(browser, path: str) -> None:
    """The tab on a realistic small job, its failure's details open, at 1280x800."""
    with tempfile.TemporaryDirectory() as tmp:
        generate_job(tmp, nodes=8, workers_per_node=2, restarts=1)
        with TensorBoard(tmp) as tb:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            frame = _open_tab(page, tb.url)
            failed = """() => {
                const tl = window.tbTimeline, e = tl.data.events;
                const i = [...e.state].findIndex((s) => tl.data.states[s] === "FAILED");
                const row = tl.rows[tl.rowOfLane[e.lane[i]]];
                return {id: e.id[i], x: tl.x(e.t[i]), y: row.y + row.h / 2};
            }"""
            frame.evaluate(f"window.tbTimeline.select(({failed})().id, false)")
            frame.wait_for_selector(".tl-details pre.tl-error")
            spot = frame.evaluate(failed)
            box = frame.locator(".tl-plot canvas").bounding_box()
            page.mouse.move(box["x"] + spot["x"], box["y"] + spot["y"])
            page.wait_for_timeout(300)
            page.screenshot(path=path)
            page.close()
    print(f"\nscreenshot saved to {path}")


# ---------------------------------------------------------------------------------------------
# 3. The Ranks view
# ---------------------------------------------------------------------------------------------

_RANK_FRAMES_JS = """() => {
    const v = window.tbRanks, out = [];
    const zoom = (f, at) => { const s = v.view.start, e = v.view.end, t = s + (e - s) * at;
                              v.setView(t - (t - s) * f, t + (e - t) * f); };
    const pan = (px) => { const dt = px / (v.w - 64) * (v.view.end - v.view.start);
                          v.setView(v.view.start + dt, v.view.end + dt); };
    const frame = (change) => { change(); const t = performance.now(); v.drawNow();
                                out.push(performance.now() - t); };
    for (let k = 0; k < 20; k++) frame(() => zoom(0.8, 0.4));
    for (let k = 0; k < 20; k++) frame(() => pan(k % 2 ? -60 : 45));
    for (let k = 0; k < 10; k++) frame(() => { v.scroll.scrollTop += 97; });
    for (let k = 0; k < 20; k++) frame(() => zoom(1.25, 0.4));
    return out;
}"""


def ranks_in_process(ranks: int, hours: float, rounds: int) -> None:
    """The server's share at full size without TensorBoard: a ranks x windows grid (numpy) scored
    (``tb_monitor.analysis.grid.RankGrid``: relative scores, flags) and bucketed per request."""
    windows = int(round(hours * 360))
    rng = np.random.default_rng(0)
    compute = (0.1 * (1 + rng.uniform(-0.05, 0.05, (ranks, windows)))).astype(np.float32)
    compute[7] *= 1.5
    wait = np.full((ranks, windows), 0.01, dtype=np.float32)
    steps = np.full((ranks, windows), 50.0, dtype=np.float32)
    runs = [f"job/rank-{r}" for r in range(ranks)]
    start = time.perf_counter()
    grid = RankGrid(runs, 10.0, 174_100_000, steps, compute + wait, wait)
    longest = longest_over(grid.relative)
    scored = time.perf_counter() - start
    snap = RankSnapshot(generation=1, loading=None, grid=grid)
    lo, hi = snap.extent
    whole, zoomed = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        ranks_payload(snap, RankQuery(width=1000))
        whole.append(time.perf_counter() - t)
        t = time.perf_counter()
        mid = (lo + hi) / 2
        ranks_payload(snap, RankQuery(start=mid - 1800, end=mid + 1800, width=2000))
        zoomed.append(time.perf_counter() - t)
    print(f"\nRanks view in process: {ranks:,} ranks x {hours:g} h = {ranks * windows:,} cells")
    print(
        f"  scores and flags of every cell (first load)   {scored:9.3f} s  "
        f"(flagged {np.flatnonzero(longest >= 3).tolist()}; the grid slows rank 7 only)"
    )
    _report("payload, whole job at 1000 px (median)", statistics.median(whole), TARGET_ROUTE_S, "s")
    _report(
        "payload, 1 h zoomed at 2000 px (median)", statistics.median(zoomed), TARGET_ROUTE_S, "s"
    )


def _wait_ranks_loaded(tb: TensorBoard, ranks: int, windows: int) -> tuple[float, float]:
    """Poll the ranks route until every rank and window is there; the first and longest requests."""
    polled = _poll_until(
        tb,
        RANKS_ROUTE + "?width=1000",
        lambda d: d["recorded"] >= ranks * windows and not d["loading"],
        3600,
    )
    return polled.first_s, polled.longest_s


def ranks_figures(browser, url: str) -> tuple[float, float, list[float]]:
    """The Ranks view opened directly (the view is remembered in localStorage): first render
    from navigation and from the iframe's start (s), and frame times (ms)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.add_init_script("try { localStorage.setItem('tb-monitor.view', 'ranks'); } catch {}")
    try:
        page.goto(f"{url}/#{contract.PLUGIN_NAME}")
        frame = page.wait_for_selector("iframe[src*='plugin_entry.html']").content_frame()
        frame.wait_for_function(
            "() => window.tbRanks && window.tbRanks.stats.firstRender", timeout=300_000
        )
        return _drawn_figures(page, frame, "tbRanks", _RANK_FRAMES_JS)
    finally:
        page.close()


def run_ranks(browser, ranks: int, hours: float, rounds: int) -> None:
    windows = int(round(hours * 360))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        # A small elastic job for the tab's timeline records, and the ranks' windows after it.
        job = generate_job(tmp, nodes=4, workers_per_node=2, restarts=1)
        generate_rank_windows(
            tmp,
            ranks,
            hours,
            slow_ranks=(7, ranks // 2 + 3),
            start=job.start,
            run_id=job.run_id,
            processes=os.cpu_count() or 1,
        )
        print(
            f"\nRanks view: {ranks:,} ranks x {hours:g} h of 10-s windows = {ranks * windows:,} cells"
        )
        print(
            f"  generated in                                 {time.perf_counter() - start:9.1f} s"
        )
        keep = (
            f"scalars={max(1000, windows + 10)}"  # every window (0, "all", breaks the Scalars tab)
        )
        with TensorBoard(tmp, "--samples_per_plugin", keep) as tb:
            start = time.perf_counter()
            first_request, longest = _wait_ranks_loaded(tb, ranks, windows)
            print(
                f"  loaded by TensorBoard, read by us after      {time.perf_counter() - start:9.1f} s"
            )
            print(f"  first ranks request (may answer 'loading')   {first_request:9.3f} s")
            print(f"  longest ranks request while loading          {longest:9.3f} s")
            _, data = tb.get(RANKS_ROUTE + "?width=1000")
            flagged = [s["rank"] for s in data["stragglers"]]
            print(
                f"  payload: {len(data['ranks'])} ranks x {data['bins']} buckets of {data['bin_s']:g} s, "
                f"{len(data['cells']) / 1e6:.2f} MB of cells; stragglers {flagged}"
            )
            _report(
                "ranks route, warm (median of 5)",
                _warm_route(tb, route=RANKS_ROUTE),
                TARGET_ROUTE_S,
                "s",
            )
            fragment = _scalars_hash(tb)
            ours_s, share_s, anchor_s, frames = [], [], [], []
            anchor = functools.partial(anchor_first_render, browser, tb.url, fragment)
            for r in range(rounds):
                if r % 2:
                    _anchor(anchor_s, anchor)
                first, own, round_frames = ranks_figures(browser, tb.url)
                ours_s.append(first)
                share_s.append(own)
                frames += round_frames
                if not r % 2:
                    _anchor(anchor_s, anchor)
            med = statistics.median
            print(f"  first render from navigation (median of {rounds})  {med(ours_s):9.3f} s")
            _report(
                "first render after TensorBoard's shell", med(share_s), TARGET_RANKS_RENDER_S, "s"
            )
            print(
                f"  anchor: Scalars tab, {ranks} runs, first render {_anchor_text(med(anchor_s))}"
            )
            print(
                f"  ratio ours (from navigation) / anchor        {med(ours_s) / med(anchor_s):9.3f}"
            )
            frames.sort()
            _report(
                f"zoom/pan/scroll frame, median of {len(frames)}",
                med(frames),
                TARGET_FRAME_MS,
                "ms",
            )
            _report(
                "zoom/pan/scroll frame, 95th percentile",
                frames[int(len(frames) * 0.95)],
                TARGET_FRAME_MS,
                "ms",
            )


# ---------------------------------------------------------------------------------------------
# 4. The 1,024-node day (issue 16)
# ---------------------------------------------------------------------------------------------

TARGET_COLD_S, TARGET_RSS_GB, TARGET_DETAILS_S = 30.0, 2.0, 0.3


def _rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (TensorBoard's data server), from /proc."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                pids += [int(c) for c in f.read().split()]
        except (OSError, StopIteration):
            continue
    return total


def writer_side(events: int = 200_000) -> None:
    """Bytes per event on disk and the caller's cost per event, before (content version 1: a
    record and a text line per event) and after (version 3), for one node's stream of
    torchelastic events through the logging handler: a keep-alive every 5 s and, every 100th,
    another rendezvous event. "Before" replays version 1's handler: parse, a timeline record
    and a text line per event; its bytes are version 1's records, one per event."""
    import logging

    from tb_monitor.elastic.events.api import RdzvEvent
    from tb_monitor.sinks import TensorboardLoggingHandler, summaries
    from tb_monitor.sinks.handlers import _kind_and_time, _summary_line
    from tb_monitor.sinks.writer import AsyncWriter

    def rdzv(name: str) -> str:
        message = "The node 'node-001_4097_0' has sent a keep-alive heartbeat to the rendezvous."
        return RdzvEvent(name, "job", message, "node-001", 4097, "RUNNING", local_id=0).serialize()

    beat = rdzv("DynamicRendezvousHandler._keep_alive")
    other = rdzv("DynamicRendezvousHandler.next_rendezvous")
    records = [
        logging.LogRecord(
            "x", logging.INFO, __file__, 1, other if i % 100 == 0 else beat, None, None
        )
        for i in range(events)
    ]
    for i, record in enumerate(records):
        record.created = 1.7e9 + 5.0 * i

    def v1_emit(writer, record):  # version 1's TensorboardLoggingHandler.emit
        data = json.loads(record.getMessage())
        kind, wall_time = _kind_and_time(data, record.created)
        writer.add_timeline(kind, record.getMessage(), wall_time)
        line = _summary_line(contract.decode_record(kind, data))
        writer.add_text(f"events/{kind}", line, wall_time)

    def v1_layout(writer, record):  # version 1's bytes: a record per event, and its text
        data = json.loads(record.getMessage())
        kind, wall_time = _kind_and_time(data, record.created)
        writer.add_summary(summaries.timeline_summary(kind, record.getMessage()), wall_time)
        line = _summary_line(contract.decode_record(kind, data))
        writer.add_text(f"events/{kind}", line, wall_time)

    def run(emit_for) -> tuple[float, int]:
        with tempfile.TemporaryDirectory() as tmp:
            with AsyncWriter(tmp, max_queue=events * 3) as writer:
                emit = emit_for(writer)
                start = time.perf_counter()
                for record in records:
                    emit(record)
                caller = (time.perf_counter() - start) / events
            size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
        return caller, size

    print(f"\nwriter side: {events:,} events of one node (keep-alives, 1% other)")
    before_s, _ = run(lambda w: lambda r: v1_emit(w, r))
    _, before_bytes = run(lambda w: lambda r: v1_layout(w, r))
    after_s, after_bytes = run(lambda w: TensorboardLoggingHandler(w).emit)
    print(
        f"  before (v1)  bytes/event {before_bytes / events:8.1f}   caller {before_s * 1e6:6.2f} us/event"
    )
    print(
        f"  after (v3)   bytes/event {after_bytes / events:8.1f}   caller {after_s * 1e6:6.2f} us/event"
    )
    print(
        f"  ratio after / before: bytes {after_bytes / before_bytes:.3f}, caller {after_s / before_s:.2f}"
    )


def read_throughput(logdir: str, runs: int = 64) -> None:
    """``read_events``' streaming core (iter_timeline + decode_timeline) against TensorBoard's
    own loader (EventAccumulator, the Python loader) reading the same files: events/s."""
    from tensorboard.backend.event_processing import event_accumulator

    from tb_monitor.logdir import readers

    chosen = sorted(os.listdir(os.path.join(logdir, "job")))[:runs]
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "job"))
        for run in chosen:
            shutil.copytree(os.path.join(logdir, "job", run), os.path.join(tmp, "job", run))
        start = time.perf_counter()
        ours = sum(1 for _ in readers.decode_timeline(readers.iter_timeline(tmp)))
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        theirs = 0
        for run in chosen:
            acc = event_accumulator.EventAccumulator(
                os.path.join(tmp, "job", run), size_guidance={event_accumulator.TENSORS: 0}
            )
            acc.Reload()
            for tag in acc.Tags()["tensors"]:
                if contract.kind_of_tag(tag):
                    theirs += sum(
                        len(
                            contract.record_events(
                                list(e.tensor_proto.string_val),
                                e.wall_time,
                                bool(e.tensor_proto.tensor_shape.dim),
                            )
                        )
                        for e in acc.Tensors(tag)
                    )
        theirs_s = time.perf_counter() - start
    assert ours == theirs, (ours, theirs)
    print(f"  read {ours:,} events of {runs} runs: ours {ours / ours_s:12,.0f} events/s")
    print(f"  anchor: TensorBoard's EventAccumulator {theirs / theirs_s:12,.0f} events/s")
    print(f"  ratio ours / anchor (throughput)             {theirs_s / ours_s:9.2f}")


def run_day(
    browser, nodes: int, workers: int, hours: float, rounds: int, logdir: str | None
) -> None:
    writer_side()
    with tempfile.TemporaryDirectory() as tmp:
        root = logdir or tmp
        marker = os.path.join(root, "day.json")
        if logdir and os.path.exists(marker):
            with open(marker) as f:
                described = json.load(f)
            print(f"\nday: reusing {root}")
        else:
            start = time.perf_counter()
            job = generate_job(
                root,
                nodes=nodes,
                workers_per_node=workers,
                hours=hours,
                restarts=3,
                processes=os.cpu_count() or 2,
            )
            described = {
                "events": job.total_events,
                "runs": len(job.runs),
                "generated_s": time.perf_counter() - start,
            }
            with open(marker, "w") as f:
                json.dump(described, f)
        total = described["events"]
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        print(
            f"\nday: {nodes} nodes x {workers} workers x {hours:g} h, 3 restarts: {total:,} events, {described['runs']} runs"
        )
        if "generated_s" in described:
            print(
                f"  generated in (project's writer, {os.cpu_count()} processes) {described['generated_s']:9.1f} s"
            )
        print(f"  on disk {size / 2**20:,.0f} MiB = {size / total:.1f} bytes/event")
        read_throughput(root)
        with TensorBoard(root) as tb:
            polled = _poll_until(
                tb,
                ROUTE + "?width=1000",
                lambda d: d["total"] == total and not d["loading"],
                1200,
                interval_s=1.0,
            )
            first, now = polled.first_at - tb.started, polled.done_at - tb.started
            print(f"  first answer after                            {first:9.1f} s")
            if polled.progress_at is not None:
                shown = polled.progress_at - tb.started
                print(f"  first answer with progress (events or loading) {shown:8.1f} s")
            data = polled.data
            _report("cold: tensorboard start to the full picture", now, TARGET_COLD_S, "s")
            time.sleep(3.0)
            _report(
                "TensorBoard's RSS at rest (with data server)",
                _rss_bytes(tb.process.pid) / 2**30,
                TARGET_RSS_GB,
                "GiB",
            )
            _report("warm route, whole day (median of 5)", _warm_route(tb), TARGET_ROUTE_S, "s")
            lo, hi = data["extent"]
            for label, frac in (("1 h", 1 / 24), ("1 min", 1 / 1440)):
                mid = lo + (hi - lo) * 0.37
                query = f"?start={mid}&end={mid + (hi - lo) * frac}&width=2000"
                _report(
                    f"warm route, a {label} window (median of 5)",
                    _warm_route(tb, query),
                    TARGET_ROUTE_S,
                    "s",
                )
            rng = np.random.default_rng(0)
            details = []
            for event_id in rng.integers(0, total, 20).tolist():
                elapsed, body = tb.get(f"/data/plugin/{contract.PLUGIN_NAME}/event?id={event_id}")
                assert body["id"] == event_id
                details.append(elapsed)
            _report(
                "details of a random event (median of 20)",
                statistics.median(details),
                TARGET_DETAILS_S,
                "s",
            )
            _report("details of a random event (max of 20)", max(details), TARGET_DETAILS_S, "s")
            first, own, frames = browser_figures(browser, tb.url)
            print(
                f"  first render from navigation (warm)          {first:9.3f} s (plugin's own {own:.3f} s)"
            )
            _report_frames(frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-big", action="store_true", help="skip the 1M-event job")
    parser.add_argument("--screenshot", metavar="PNG", help="also save the README screenshot")
    parser.add_argument("--ranks", type=int, default=1024, help="ranks of the Ranks view's job")
    parser.add_argument(
        "--ranks-hours", type=float, default=24.0, help="hours of 10-s windows (default 24)"
    )
    parser.add_argument("--only-ranks", action="store_true", help="run only the Ranks view part")
    parser.add_argument("--day", action="store_true", help="run only the 1,024-node day")
    parser.add_argument("--day-nodes", type=int, default=1024)
    parser.add_argument("--day-hours", type=float, default=24.0)
    parser.add_argument(
        "--day-logdir", help="keep the generated day here (and reuse it on the next run)"
    )
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    if args.day:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                run_day(browser, args.day_nodes, 4, args.day_hours, args.rounds, args.day_logdir)
            finally:
                browser.close()
        return

    ranks_in_process(args.ranks, 24.0, args.rounds)  # always the full size
    if args.only_ranks:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                run_ranks(browser, args.ranks, args.ranks_hours, args.rounds)
            finally:
                browser.close()
        return

    with tempfile.TemporaryDirectory() as tmp:
        job = generate_job(tmp, nodes=64, workers_per_node=4, events=100_000, restarts=2)
        print(f"in process: {job.total_events:,} events over 64 nodes, {args.rounds} rounds")
        compare_in_process(tmp, args.rounds)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            run_job(browser, "100k job", 64, 100_000, 4, lod=False, rounds=args.rounds)
            if not args.skip_big:
                run_job(browser, "1M job", 512, 1_000_000, 4, lod=True, rounds=args.rounds)
            run_ranks(browser, args.ranks, args.ranks_hours, args.rounds)
            if args.screenshot:
                screenshot(browser, args.screenshot)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
