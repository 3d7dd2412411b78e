"""Noise that is no fault, made inside a worker by the campaign hook (``sitecustomize.py``).

- ``TB_MONITOR_CAMPAIGN_GC_PAUSE_S``: long garbage collections. A thread builds a graph of small
  containers, doubling it until one full collection takes the time asked (or the cap is reached;
  it grows while the worker starts, beside its imports, so the pauses in training come out
  shorter), then every few seconds makes the main thread collect, between two of its Python
  lines, as an allocation there would: the rank stops wherever it was, its heartbeat thread too
  (the collection holds the GIL). ``TB_MONITOR_CAMPAIGN_GC_RANKS=one`` does it on one rank only,
  the same one on every worker (drawn from the run's id); else on every rank.
- ``TB_MONITOR_CAMPAIGN_SLOW_LOAD_S``: now and then (a batch in ``LOAD_ONE_IN``) a DataLoader
  batch first reads from disk for a while, up to that long: random 1-MiB blocks of a file of the
  rank's own, with ``O_DIRECT`` so every read waits for the disk (the rank in state D), or, where
  the filesystem refuses ``O_DIRECT``, with the page cache dropped before each read.
"""

import gc
import itertools
import mmap
import os
import random
import signal
import threading
import time

GC_SIGNAL = signal.SIGRTMIN + 6
GC_EVERY_S = (2.0, 5.0)  # the time between two pauses of one rank, drawn in this range
GC_MOST_OBJECTS = 12_000_000  # the graph's cap (about 0.9 GB), whatever the collection takes
LOAD_ONE_IN = 30  # about one batch in this many loads slowly
LOAD_FILE_MIB = 64
_BLOCK = 1 << 20


def start():
    """Start the noise that the environment asks for, in this worker."""
    rank = int(os.environ["RANK"])
    rng = random.Random(f"{os.environ.get('TORCHELASTIC_RUN_ID')}-{rank}")
    if os.environ.get("TB_MONITOR_CAMPAIGN_GC_PAUSE_S") and _gc_here(rank):
        pause_s = float(os.environ["TB_MONITOR_CAMPAIGN_GC_PAUSE_S"])
        signal.signal(GC_SIGNAL, _collect)
        main = threading.main_thread().ident
        threading.Thread(
            target=_pause_now_and_then, args=(pause_s, main, rng), name="campaign-gc", daemon=True
        ).start()
    if os.environ.get("TB_MONITOR_CAMPAIGN_SLOW_LOAD_S"):
        from tb_monitor.rank.progress_marks import when_imported

        longest_s = float(os.environ["TB_MONITOR_CAMPAIGN_SLOW_LOAD_S"])
        when_imported(
            "torch.utils.data.dataloader", lambda module: _slow_batches(module, longest_s, rng)
        )


def _collect(signum, frame):
    start = time.monotonic()
    gc.collect()
    _say(f"collected garbage for {time.monotonic() - start:.2f} s")


def _say(what):
    """A line in the job's output, to check the noise happened (the scripts' own lines are
    told apart by their form)."""
    # a system call, not print: a signal handler's print can meet the main thread's, mid-write
    os.write(2, f"[campaign] rank {os.environ['RANK']} {what}\n".encode())


def _gc_here(rank):
    """Every rank, or with ``TB_MONITOR_CAMPAIGN_GC_RANKS=one`` the one the run's id draws."""
    if os.environ.get("TB_MONITOR_CAMPAIGN_GC_RANKS") != "one":
        return True
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return random.Random(os.environ.get("TORCHELASTIC_RUN_ID")).randrange(world) == rank


def _pause_now_and_then(pause_s, main, rng):
    graph = _graph_collected_in(pause_s)  # alive as long as this thread: the worker's life
    while graph:
        time.sleep(rng.uniform(*GC_EVERY_S))
        signal.pthread_kill(main, GC_SIGNAL)


def _graph_collected_in(pause_s):
    """A graph of containers (a cycle: the list holds itself) whose full collection takes at
    least ``pause_s``, or the cap's worth."""
    graph = [None]
    graph[0] = graph
    size = 1_000_000
    while len(graph) < GC_MOST_OBJECTS:
        graph.extend(map(list, itertools.repeat((), size)))
        start = time.monotonic()
        gc.collect()
        if time.monotonic() - start >= pause_s:
            break
        size = min(len(graph), GC_MOST_OBJECTS - len(graph))
    return graph


def _slow_batches(module, longest_s, rng):
    """Wrap the DataLoader iterators' ``__next__``: now and then a batch reads from disk first."""
    iterator = module._BaseDataLoaderIter
    fetch = iterator.__next__
    disk = _Disk(f"campaign-data-rank{os.environ['RANK']}.bin")

    def __next__(self):
        if rng.randrange(LOAD_ONE_IN) == 0:
            start = time.monotonic()
            disk.read_for(rng.uniform(0.3, longest_s), rng)
            _say(f"read from disk for {time.monotonic() - start:.2f} s")
        return fetch(self)

    iterator.__next__ = __next__


class _Disk:
    """A file of the rank's own, read past the page cache."""

    def __init__(self, path):
        self._path = path
        self._fd = None
        self._direct = True
        self._buffer = mmap.mmap(-1, _BLOCK)  # page-aligned, as O_DIRECT needs

    def read_for(self, seconds, rng):
        """Read random blocks until ``seconds`` have passed."""
        fd = self._open()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not self._direct:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.preadv(fd, [self._buffer], rng.randrange(LOAD_FILE_MIB) * _BLOCK)

    def _open(self):
        if self._fd is None:
            with open(self._path, "wb") as out:
                for _ in range(LOAD_FILE_MIB):
                    out.write(os.urandom(_BLOCK))
                os.fsync(out.fileno())
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_DIRECT)
            except OSError:  # a filesystem without O_DIRECT (tmpfs)
                self._direct = False
                self._fd = os.open(self._path, os.O_RDONLY)
        return self._fd
