"""What every store refreshed from TensorBoard's data provider shares: one refresh, one template.

The Timeline's :class:`~tb_plugin.store.TimelineStore` and the Ranks view's
:class:`~tb_plugin.ranks.RankStore` read different series but refresh the same way, so the way
lives here once: list the provider's series (cheap), keep those whose ``max_step`` grew since
the last read, read them in chunks a request can watch the progress of, and say when a refresh
has read everything it listed. A poll (``settled_only``) leaves behind a series read whole
(:data:`WHOLE`) that is still growing: the provider hands back whole series, so reading each
while TensorBoard still loads it would decode it many times over. A subclass says which
series it reads and how (:meth:`ProviderStore._wants`), lists them (``_list``) and reads them
(``_read``); one that lists otherwise (the timeline's event files: what grew of each run's
files) says what is stale too (``_stale``). A :class:`~tb_plugin.refresher.Refresher` runs
its refreshes off the request threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import gc
import heapq
import importlib
import math
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from tensorboard.data import provider as tb_provider

__all__ = [
    "REFRESH_INTERVAL_S",
    "ChunkRequest",
    "ProviderStore",
    "Want",
    "chunk_requests",
    "cyclic_gc_paused",
    "listed_points",
    "release_freed_memory",
    "small_pages",
]

#: A refresh lists the provider's series at most this often (seconds); each request may trigger it.
REFRESH_INTERVAL_S = 1.0

#: run -> what a listing says of it: the provider's, tag -> its series' metadata.
Listing = Mapping[str, Any]


class Want(enum.Enum):
    """How a store reads a series it lists."""

    WHOLE = "whole"  # every point: a poll reads it only once it stopped growing
    NEWEST = "newest"  # only its newest point (a heartbeat): read whenever it grew


class ChunkRequest(NamedTuple):
    """Stale runs read together: their runs, the tags of any of them, and about how many
    points they hold; read from event files, the files' ``ranges`` to read
    (``tb_plugin.event_files.FileRange``)."""

    runs: list[str]
    tags: list[str]
    points: int
    ranges: tuple[Any, ...] = ()


def listed_points(stale: Mapping[str, Sequence[str]], listing: Listing) -> dict[str, int]:
    """How many points each stale run's stale series hold, as the provider lists them."""
    return {run: sum(listing[run][tag].max_step + 1 for tag in tags) for run, tags in stale.items()}


def chunk_requests(
    stale: Mapping[str, Sequence[str]],
    weights: Mapping[str, int],
    limit: int,
    costs: Mapping[str, int] | None = None,
) -> list[ChunkRequest]:
    """Stale runs (run -> tags), each of ``weights[run]`` points (records, or bytes), dealt
    into reads costing about ``limit``, each run costing ``costs[run]`` (by default, its
    points): a read's cost is per run too (its files, its series), and runs of few points each
    (a big job's thousands of worker ranks) would otherwise make one chunk many times
    another's, read by one helper while the others wait.

    The runs are dealt, biggest first, each to the lightest chunk so far, so every chunk holds
    a like share of big runs and of small ones. In name order, a big job's many
    one-point rank runs filled the last chunks: their records cost TensorBoard's process the
    most to keep (each one described) and the helpers the least, so it kept them alone long
    after the helpers were done. Each chunk lists its runs in name order."""
    costs = weights if costs is None else costs
    total = sum(costs.values())
    lightest = [(0, at) for at in range(max(1, -(-total // max(1, limit))))]  # a heap
    dealt: list[list[str]] = [[] for _ in lightest]
    for run in sorted(weights, key=lambda run: (-weights[run], run)):
        size, at = heapq.heappop(lightest)
        dealt[at].append(run)
        heapq.heappush(lightest, (size + costs[run], at))
    return [
        ChunkRequest(
            sorted(runs),
            sorted({tag for run in runs for tag in stale[run]}),
            sum(weights[run] for run in runs),
        )
        for runs in dealt
        if runs
    ]


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system. A long read frees hundreds of MB of
    passing objects (the provider's replies, decoded chunks) in small blocks, which glibc
    keeps for the process (a sizeable share of TensorBoard's RSS at rest after a big read). Elsewhere
    than glibc, nothing to do."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class _ProcessSetting:
    """A process-wide setting turned off while any thread's bulk work runs: off at the first
    pause, back as it was when the last one ends (``flip(on)`` sets it and says what it was)."""

    def __init__(self, flip: Callable[[bool], bool]) -> None:
        self._flip = flip
        self._lock = threading.Lock()
        self._pauses = 0  # pauses going on, in every thread
        self._was = False  # the setting before the first of them

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        with self._lock:
            if self._pauses == 0:
                self._was = self._flip(False)
            self._pauses += 1
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                if self._pauses == 0 and self._was:
                    self._flip(True)


def _flip_gc(on: bool) -> bool:
    was = gc.isenabled()
    if on:
        gc.enable()
    else:
        gc.disable()
    return was


def _madvise_switch() -> Callable[[bool], bool] | None:
    """NumPy's switch of its huge-page advice (``NUMPY_MADVISE_HUGEPAGE`` at import): it sets
    the advice and says what it was. None where this numpy has none."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, then 1
        try:
            return importlib.import_module(name)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
    return None


_MADVISE = _madvise_switch()


def _flip_huge_pages(on: bool) -> bool:
    return bool(_MADVISE(on)) if _MADVISE is not None else False


_GC = _ProcessSetting(_flip_gc)
_HUGE_PAGES = _ProcessSetting(_flip_huge_pages)


def cyclic_gc_paused() -> contextlib.AbstractContextManager[None]:
    """Python's cyclic garbage collector paused while a bulk read or sort runs. These make
    millions of short-lived containers, and each collection they trigger walks every live
    object of TensorBoard's process: a big job's day reads markedly faster with it paused
    (``bench_scale.py``). Reference counting still frees what they drop; only garbage in cycles
    waits for the last pause (in any thread) to end, when the collector runs again as it did."""
    return _GC.off()


def small_pages() -> contextlib.AbstractContextManager[None]:
    """NumPy's huge-page advice off while a big sort runs. NumPy asks the kernel for huge
    pages for every array of 4 MB and more; where the kernel then compacts memory in the
    thread that touches the new array first (transparent huge pages' defrag ``madvise``, the
    default), each of a cold sort's new columns of a big job paid for it in TensorBoard's process,
    whose heap is fragmented by then: the tail of a day's load was slower with the advice. Back as it was once the last sort (in any thread) ends."""
    return _HUGE_PAGES.off()


class ProviderStore:
    """A store of one experiment's series, refreshed from TensorBoard's data provider.

    ``generation`` is bumped by the subclass whenever what it holds changed; ``refresh`` is
    safe to call from any thread (one runs at a time).
    """

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._provider = data_provider
        self._eid = experiment_id
        self._clock = clock
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._last_refresh = -math.inf
        self._listed: dict[tuple[str, str], int] = {}  # max_step at the previous listing
        #: The newest step read of each (run, tag): the subclass's reads keep it.
        self._last_step: dict[tuple[str, str], int] = {}
        self._progress: tuple[int, int] | None = None
        self._progress_unit = "record"  # what a read's progress counts
        self._read_all = False  # a full refresh has read everything it listed
        self.generation = 0

    # -- what a subclass says ----------------------------------------------------------------

    def _list(self, ctx: Any) -> Listing:
        """The provider's listing of the series this store may read."""
        raise NotImplementedError

    def _wants(self, run: str, tag: str) -> Want | None:
        """How this store reads ``run``'s series ``tag`` (None: not at all)."""
        raise NotImplementedError

    def _read(self, ctx: Any, stale: dict[str, list[str]], listing: Listing) -> None:
        """Read the series that grew (``stale``: run -> tags), keeping ``_last_step``."""
        raise NotImplementedError

    def _refreshed(self) -> None:
        """Runs at the end of every refresh, on the refresh's thread (by default nothing)."""

    # -- the refresh ---------------------------------------------------------------------

    def refresh(self, ctx: Any, force: bool = False, settled_only: bool = False) -> int:
        """Read what is new since the last refresh; return the generation (bumped on change).

        ``settled_only`` (a background poll) leaves behind the series read whole that grew
        since the previous listing; such a refresh counts as full only when it left none.
        """
        with self._refresh_lock:
            now = self._clock()
            if not force and now - self._last_refresh < REFRESH_INTERVAL_S:
                return self.generation
            if not settled_only:
                self._last_refresh = now
            listing = self._list(ctx)
            stale, left_behind = self._stale(listing, settled_only)
            if settled_only and not left_behind:  # it reads all there is: a full refresh
                self._last_refresh = now
            if stale:
                self._read(ctx, stale, listing)
            self._read_all = self._read_all or not left_behind
            self._refreshed()
            return self.generation

    def _stale(self, listing: Listing, settled_only: bool) -> tuple[dict[str, list[str]], bool]:
        """The series to read (run -> tags), and whether a growing one was left behind."""
        stale: dict[str, list[str]] = {}
        left_behind = False
        for run, tags in listing.items():
            for tag, series in tags.items():
                want = self._wants(run, tag)
                if want is None:
                    continue
                key = (run, tag)
                listed, self._listed[key] = self._listed.get(key), series.max_step
                if series.max_step <= self._last_step.get(key, -1):
                    continue
                if want is Want.WHOLE and settled_only and listed != series.max_step:
                    left_behind = True
                    continue
                stale.setdefault(run, []).append(tag)
        return stale, left_behind

    def _read_in_chunks(
        self, chunks: list[ChunkRequest], fetched: Iterable[Any], keep: Callable[[Any], None]
    ) -> None:
        """``keep`` what ``fetched`` hands back for each of ``chunks`` in turn (it may read
        them here as it is iterated, or elsewhere ahead), with the progress :meth:`loading`
        reports."""
        expected = sum(chunk.points for chunk in chunks)
        self._progress = (0, expected)
        found = iter(fetched)
        try:
            # One pause for the whole read: a pause per chunk let a collection run after each
            # one, walking every object kept so far: on a big read, a large share of its time.
            with cyclic_gc_paused():
                for chunk in chunks:
                    keep(next(found))
                    self._progress = (self._progress[0] + chunk.points, expected)
        finally:
            self._progress = None
            if isinstance(found, Generator):  # one that reads elsewhere stops its readers now
                found.close()
        if len(chunks) > 1:
            release_freed_memory()

    # -- what a request asks -------------------------------------------------------------

    def refreshed_within(self, seconds: float) -> bool:
        """Whether a full refresh started less than ``seconds`` ago."""
        return self._clock() - self._last_refresh < seconds

    def has_read_all(self) -> bool:
        """Whether a full refresh has read everything it listed: from then on a request may
        answer from the store at once while the next refresh runs behind it."""
        return self._read_all

    def nbytes(self) -> int:
        """About how many bytes of memory the store holds (what ``Refreshers`` bounds); a
        subclass that holds much says so (by default, 0)."""
        return 0

    def loading(self) -> dict[str, int | str] | None:
        """How far a refresh that is reading is (``done`` of ``expected``, counted in ``unit``:
        records, or bytes of event files), or None when none is."""
        progress = self._progress
        if progress is None:
            return None
        return {"done": progress[0], "expected": progress[1], "unit": self._progress_unit}
