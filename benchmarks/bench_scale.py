"""Scale: distinct timeline events written, stored and loaded, today's code against this tree's.

For each size (``--sizes``, default 10k, 100k and 1M events; ``--day`` adds the 1,024-node,
17.8M-event day), one job's records (``tb_monitor.synthetic.job_records``: 256 nodes, one
worker each, every keep-alive distinct, ``distinct_beats``) are written through the public API
(``AsyncWriter.add_timeline``) by 8 writer processes, once with *today's* code (a checkout of
``--baseline``, by default the last commit writing content version 3) and once with this tree's
(version 5). For each: the write time, the size on disk, a cold TensorBoard (a fresh
``tensorboard --logdir`` process) until the Timeline shows every event, the warm whole-job and
zoomed-in (1% window) queries, and TensorBoard's resident memory with its data server. Both
versions are written first; then ``--loads`` cold TensorBoards each, the versions alternated, and
each load figure is their median (a cold load on a shared VM moves by a second between minutes).
Then how each figure grows with size (exponent of a power law between sizes; 1.0 is linear).

    python benchmarks/bench_scale.py [--sizes 10k,100k,1M] [--day] [--baseline REV] [--loads 3]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_timeline import ROUTE, TensorBoard, _poll_until, _rss_bytes  # noqa: E402

from tb_monitor.synthetic import job_records  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The last commit that wrote content version 3 (and read it with one object per event).
BASELINE = "9a66934"
WRITERS, NODES = 8, 256
TARGET_COLD_S, TARGET_DAY_COLD_S, TARGET_WARM_S, TARGET_ZOOM_S, TARGET_RSS_GB = 8, 10, 1, 0.1, 1
#: Resident memory is read this long after the last query: at rest (the plugin gives the heap's
#: free pages back after a poll with no request, ``refresher.POLL_S``, plus its listing).
REST_S = 5.0
_WRITE = """
import json, sys
from tb_monitor.sinks.writer import AsyncWriter
logdir, share = sys.argv[1], sys.argv[2]
with open(share) as f:
    runs = json.load(f)
for run, records in runs.items():
    with AsyncWriter(logdir + "/" + run) as writer:
        for kind, payload, wall_time in records:
            writer.add_timeline(kind, payload, wall_time)
"""


@dataclass
class Figures:
    """One size's figures for one version."""

    events: int
    write_s: float
    bytes: int
    cold_s: float
    warm_s: float
    zoom_s: float
    rss: int
    rss_tb: int  # TensorBoard's own process, without its data server


def _size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 10**3, "m": 10**6}.get(text[-1], 1)
    return round(float(text.rstrip("km")) * scale)


def _shares(size: int, folder: str) -> tuple[list[str], int]:
    """The job's records dealt out run by run into one JSON file per writer; the event count."""
    runs = job_records(nodes=NODES, workers_per_node=1, events=size, distinct_beats=True)
    shares: list[dict] = [{} for _ in range(WRITERS)]
    for i, run in enumerate(sorted(runs)):
        shares[i % WRITERS][run] = runs[run]
    paths = []
    for i, share in enumerate(shares):
        paths.append(os.path.join(folder, f"share-{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(share, f)
    return paths, sum(len(r) for r in runs.values())


@contextlib.contextmanager
def _source(src: str) -> Iterator[None]:
    """Child processes import ``tb_monitor`` and ``tb_plugin`` from ``src`` (and start in it:
    ``python -c``/``-m`` put their working directory first on the path)."""
    before, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = src
    os.chdir(src)
    try:
        yield
    finally:
        os.chdir(cwd)
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def _write(src: str, shares: list[str], logdir: str) -> float:
    """Seconds for ``WRITERS`` processes to write their shares with the code in ``src``."""
    start = time.perf_counter()
    with _source(src):
        procs = [
            subprocess.Popen([sys.executable, "-c", _WRITE, logdir, share]) for share in shares
        ]
    if any(p.wait() for p in procs):
        raise RuntimeError(f"a writer of {src} failed")
    return time.perf_counter() - start


def _write_day(src: str, logdir: str) -> tuple[float, int]:
    """Seconds to generate and write the day with ``src``'s own generator (8 processes; its
    keep-alives are alike, so no list of 17.8M records is handed around), and its events."""
    code = (
        "import sys; from tb_monitor.synthetic import generate_job\n"
        "if __name__ == '__main__':\n"
        "    job = generate_job(sys.argv[1], nodes=1024, workers_per_node=4, hours=24,"
        " restarts=3, processes=8)\n"
        "    print(job.total_events)\n"
    )
    start = time.perf_counter()
    with _source(src):
        out = subprocess.run([sys.executable, "-c", code, logdir], check=True, capture_output=True)
    return time.perf_counter() - start, int(out.stdout.split()[-1])


def _median_get(tb: TensorBoard, queries: list[str]) -> float:
    """The median time of ``queries``, each a window not asked before: the plugin keeps the
    payloads of the windows it served, so asking one again would time a cache hit."""
    return statistics.median(tb.get(ROUTE + query)[0] for query in queries)


def _load(src: str, logdir: str, events: int) -> tuple[float, float, float, int, int]:
    """A cold TensorBoard on ``logdir`` with the plugin of ``src``: seconds from its start until
    the Timeline shows every event, the warm whole-job and zoomed-in queries, and its RSS with
    its data server's and without."""
    with _source(src), TensorBoard(logdir) as tb:
        polled = _poll_until(
            tb,
            ROUTE + "?width=1000",
            lambda d: d["total"] == events and not d["loading"],
            1800,
            interval_s=0.25,
        )
        cold = polled.done_at - tb.started
        warm = _median_get(tb, [f"?width={1001 + i}" for i in range(5)])
        lo, hi = polled.data["extent"]
        mids = [lo + (hi - lo) * (0.37 + 0.05 * i) for i in range(5)]
        zoom = _median_get(tb, [f"?start={m}&end={m + (hi - lo) * 0.01}&width=2000" for m in mids])
        time.sleep(REST_S)
        with open(f"/proc/{tb.process.pid}/status") as f:
            own = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
        return cold, warm, zoom, _rss_bytes(tb.process.pid), own


def _baseline_source(rev: str, folder: str) -> str:
    """Today's code: ``git archive`` of ``rev`` (read-only on the repository), with the C
    accelerators it has built as ours are: else it would be measured on their Python twins."""
    out = os.path.join(folder, "baseline")
    os.makedirs(out)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", out], input=archive.stdout, check=True)
    if os.path.exists(os.path.join(out, "setup.py")):  # none before the first accelerator
        build = [sys.executable, "setup.py", "-q", "build_ext", "--inplace"]
        done = subprocess.run(build, cwd=out, capture_output=True, text=True)
        missing = _unbuilt(out)
        if done.returncode or missing:  # optional extensions fail quietly: say it, loudly
            raise SystemExit(f"baseline {rev}: {missing or 'build'} failed\n{done.stderr}")
    return out


def _unbuilt(tree: str) -> list[str]:
    """The C accelerators of ``tree`` (each ``tb_monitor/**/<name>.c``) with no built module
    beside them: measured on their Python twins, a tree would not be the one we ship."""
    sources = glob.glob(os.path.join(tree, "tb_monitor", "**", "*.c"), recursive=True)
    return [
        os.path.relpath(source, tree) for source in sources if not glob.glob(f"{source[:-2]}.*.so")
    ]


@dataclass
class Written:
    """One version's logdir, as its writers left it."""

    logdir: str
    events: int
    write_s: float
    bytes: int


def write(src: str, shares: list[str] | None, events: int, folder: str) -> Written:
    """One version's logdir written (``shares`` None: the day)."""
    logdir = tempfile.mkdtemp(dir=folder)
    if shares is None:
        write_s, events = _write_day(src, logdir)
    else:
        write_s = _write(src, shares, logdir)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir) for f in fs)
    return Written(logdir, events, write_s, size)


def measure(versions: list[tuple[str, Written]], loads: int) -> list[Figures]:
    """Each version's figures: ``loads`` cold loads of its logdir, the versions in turn (each
    round starting with the other one), each load figure the median of its loads (the lower
    middle one for an even ``loads``: a figure measured, not a mean of two)."""
    # The writers' dirty pages written back first: the kernel's writeback of two versions' days
    # (~0.66 GB) would otherwise run inside the cold loads measured.
    os.sync()
    loads_of: list[list[tuple[float, float, float, int, int]]] = [[] for _ in versions]
    for round_ in range(loads):
        turn = list(zip(versions, loads_of, strict=True))
        for (src, written), found in turn if round_ % 2 == 0 else turn[::-1]:
            found.append(_load(src, written.logdir, written.events))
    return [
        Figures(w.events, w.write_s, w.bytes, *map(statistics.median_low, zip(*found, strict=True)))
        for (_, w), found in zip(versions, loads_of, strict=True)
    ]


def _row(what: str, today: float, ours: float, unit: str, target: float | None = None) -> None:
    ratio = ours / today if today else math.nan
    goal = (
        ""
        if target is None
        else f"  target {target:g} {unit}: {'ok' if ours <= target else 'MISSED'}"
    )
    print(
        f"  {what:<24} today {today:10.3f} {unit:<3} ours {ours:10.3f} {unit:<3} x{ratio:6.3f}{goal}"
    )


def report(today: Figures, ours: Figures, day: bool, loads: int) -> None:
    events = ours.events
    what = "the 1,024-node day" if day else f"{NODES} nodes, distinct"
    print(f"\n{events:,} events ({what}; load figures: median of {loads} cold loads)")
    _row(
        "generate+write (8 proc)" if day else "write (8 processes)",
        today.write_s,
        ours.write_s,
        "s",
    )
    _row("on disk", today.bytes / 2**20, ours.bytes / 2**20, "MiB")
    _row("on disk per event", today.bytes / events, ours.bytes / events, "B")
    _row(
        "cold, all shown",
        today.cold_s,
        ours.cold_s,
        "s",
        TARGET_DAY_COLD_S if day else TARGET_COLD_S,
    )
    _row("warm query, whole job", today.warm_s, ours.warm_s, "s", TARGET_WARM_S)
    _row("warm query, 1% window", today.zoom_s, ours.zoom_s, "s", TARGET_ZOOM_S)
    _row("RSS (TB + data server)", today.rss / 2**30, ours.rss / 2**30, "GiB", TARGET_RSS_GB)
    _row("RSS of TB alone", today.rss_tb / 2**30, ours.rss_tb / 2**30, "GiB")


def growth(results: list[tuple[int, Figures, Figures]]) -> None:
    """How each figure grows between consecutive sizes: the exponent k of figure ~ size**k."""
    print("\ngrowth between sizes (exponent k of figure ~ events**k; 1 is linear)")
    for (n0, t0, o0), (n1, t1, o1) in zip(results, results[1:], strict=False):
        print(f"  {n0:,} -> {n1:,}")
        for field in ("write_s", "bytes", "cold_s", "warm_s", "zoom_s", "rss"):
            k = [
                math.log(getattr(b, field) / getattr(a, field)) / math.log(n1 / n0)
                for a, b in ((t0, t1), (o0, o1))
            ]
            print(f"    {field:<8} today k={k[0]:5.2f}  ours k={k[1]:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k,1M", help="events per job, comma-separated")
    parser.add_argument("--day", action="store_true", help="also the 17.8M-event day (slow)")
    parser.add_argument("--baseline", default=BASELINE, help="the git revision of 'today'")
    parser.add_argument("--loads", type=int, default=3, help="cold loads of each version")
    args = parser.parse_args()
    if args.loads < 1:
        parser.error(f"--loads must be at least 1, got {args.loads}")
    results = []
    missing = _unbuilt(ROOT)
    if missing:
        raise SystemExit(f"ours: {missing} not built (python setup.py build_ext --inplace)")
    with tempfile.TemporaryDirectory() as folder:
        today_src = _baseline_source(args.baseline, folder)
        sizes = [(_size(s), False) for s in args.sizes.split(",") if s.strip()]
        for size, day in sizes + ([(17_800_000, True)] if args.day else []):
            shares, events = (None, size) if day else _shares(size, folder)
            versions = [(src, write(src, shares, events, folder)) for src in (today_src, ROOT)]
            today, ours = measure(versions, args.loads)
            report(today, ours, day, args.loads)
            if not day:
                results.append((events, today, ours))
    if len(results) > 1:
        growth(results)


if __name__ == "__main__":
    main()
