"""Timeline records, decoded once into columns, because the data provider is slow to read.

Reading a record through TensorBoard's data provider is slow (:mod:`tb_plugin.records`): a big
job's would take seconds per request. :class:`TimelineStore` decodes each record once, reads
only what a refresh finds new (the refresh itself is
:class:`~tb_plugin.provider_store.ProviderStore`'s), in chunks so a query during a long first
decode answers with what is there (a big read's chunks decoded in helper processes,
:mod:`tb_plugin.read_workers`), and hands :mod:`tb_plugin.query` a
:class:`~tb_plugin.columns.Snapshot` of sorted numpy columns. A record may hold several events
(content versions 2 to 5, ``tb_monitor.contract.decode_records``); each is an event here.

The store owns its parts and the lock they are used under: the events and the values they
stand for (:class:`~tb_plugin.event_table.EventTable`, which keeps each decoded chunk), the
lanes (:class:`~tb_plugin.lanes.Lanes`), the restart analysis
(:class:`~tb_plugin.job_analysis.JobAnalysis`), the details panel's read-back
(:class:`~tb_plugin.read_back.EventReadBack`) and its size
(:class:`~tb_plugin.store_size.StoreSize`); itself, it reads and sorts.

With a local logdir the records come from the event files themselves, and a walk of the
logdir says which grew (:mod:`tb_plugin.event_files`: the data server keeps only each series'
newest record), else from the data provider. A record under a timeline tag whose payload cannot
be decoded is skipped, never fatal: it is logged and counted in :meth:`TimelineStore.skipped`
(the ``status`` route says how many). Damage in the files themselves is skipped by whoever reads
them (``tfrecord``, or the data provider): every whole record is kept.

Lanes, intervals and the order of states are :mod:`tb_monitor.timeline`'s (``lane_of``,
``spans``, ``STATES``), so the tab, the Perfetto export and the notebook figure always agree.
"""

from __future__ import annotations

import array
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor import contract, timeline
from tb_monitor.analysis.attempts import Attempt
from tb_monitor.analysis.jobs import JobSpan
from tb_plugin.columns import Columns, Snapshot, SortedEvents
from tb_plugin.decoding import DecodedChunk, decode_chunk, decode_files
from tb_plugin.event_files import EventFiles, file_chunks
from tb_plugin.event_table import EventTable, SkippedRecords
from tb_plugin.interned import Interner, column
from tb_plugin.job_analysis import (
    JobAnalysis,
    attempt_payload,
    draw_collateral_stopped,
    lane_of_rows,
)
from tb_plugin.job_lanes import job_lanes
from tb_plugin.lane_labels import label_parts
from tb_plugin.lane_order import exact_time_order, lane_time_order
from tb_plugin.lanes import Lanes
from tb_plugin.provider_store import (
    ChunkRequest,
    Listing,
    ProviderStore,
    Want,
    chunk_requests,
    cyclic_gc_paused,
    listed_points,
    release_freed_memory,
    small_pages,
)
from tb_plugin.read_back import EventReadBack, UnknownEventError
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.records import read_series
from tb_plugin.runlength import EventIds, EventRecords
from tb_plugin.store_size import StoreSize

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_RECORDS",
    "RUN_BYTES",
    "RUN_RECORDS",
    "RESORT_BEFORE",
    "RESORT_GROWTH",
    "TimelineStore",
    "UnknownEventError",
]

#: While a first read goes on, the sorted columns are renewed when the events grew this much,
#: and only while less than this share of the read is done.
RESORT_GROWTH = 2.0
RESORT_BEFORE = 0.25
#: About this many records are read from the provider at a time, so a first decode shows
#: progress, and a read in several chunks gives its freed memory back (one reply for a whole
#: big read kept much more of TensorBoard's memory).
CHUNK_RECORDS = 10_000
#: What a run costs to read, in records: its files and series, and its distinct events (a
#: worker's are: each is decoded and described on its own). Without it, a big job's last chunk
#: would gather its many worker runs, each cheap in records but dear to read, for one helper to
#: read alone at the end.
RUN_RECORDS = 16
#: Read from event files, the same in bytes (``event_files.file_chunks``): chunks of about this
#: many, each run counted as this many more.
CHUNK_BYTES = 8 * 2**20
RUN_BYTES = 16_000
#: A sort at rest that takes in this many new events gives the heap's free pages back after.
_TRIM_AFTER_EVENTS = 1_000_000
_log = logging.getLogger(__name__)

#: A sort's order of events by lane and time (``TimelineStore._lane_order``): the order,
#: their times in it, each lane's rank, where each rank's events start, and each record's count.
_LaneOrder = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class TimelineStore(ProviderStore):
    """Every timeline record of one experiment, decoded once and extended as files grow.

    :meth:`refresh` may run on a background thread (:class:`tb_plugin.refresher.Refresher`) while
    requests query: it reads the provider in chunks outside the data lock, so a query during a
    long first decode answers at once with what is decoded so far (:meth:`loading` says how far).
    """

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        helpers: ReadWorkers | None = None,
        files: EventFiles | None = None,
    ) -> None:
        super().__init__(data_provider, experiment_id, clock)
        self._helpers = helpers  # processes that decode a big read's chunks (None: all here)
        self._files = files  # the event files records are read from (None: the provider)
        if files is not None:
            self._progress_unit = "byte"
        self._lock = threading.RLock()  # the parts below and the sorted columns
        self._lanes = Lanes()
        self._skipped = SkippedRecords()
        self._table = EventTable(self._lanes, self._skipped)
        self._analysis = JobAnalysis()
        self._read_back = EventReadBack(data_provider, experiment_id, files)
        self._size = StoreSize(self._table, files)
        self._columns: Columns | None = None  # sorted, of this generation (None: not yet)
        self._sorting: threading.Thread | None = None  # a big read's sort ahead (_sort_ahead)
        self._shown: tuple[Columns, int] | None = None  # the columns last handed out

    # -- reading ---------------------------------------------------------------------------

    def _list(self, ctx: Any) -> Listing:
        """The provider's timeline series; from the files, what grew of each run's files
        (``EventFiles.grown``): read on from where it was, no need to wait for a series to
        settle, nor for the data server to load a run (while it loads, its listing names only
        the runs loaded so far)."""
        sorting = self._sorting
        if sorting is not None:  # see _sort_ahead
            sorting.join()
        if self._files is not None:
            return self._files.grown()
        return self._provider.list_tensors(
            ctx, experiment_id=self._eid, plugin_name=contract.PLUGIN_NAME
        )

    def _stale(self, listing: Listing, settled_only: bool) -> tuple[dict[str, list[str]], bool]:
        """From the files, every run listed (what grew of its files) is read whole."""
        if self._files is not None:  # every run listed grew; its tags are what its files hold
            return {run: [] for run in listing}, False
        return super()._stale(listing, settled_only)

    def _wants(self, run: str, tag: str) -> Want | None:
        return None if contract.kind_of_tag(tag) is None else Want.WHOLE

    def _read(self, ctx: Any, stale: dict[str, list[str]], listing: Listing) -> None:
        if self._files is not None:
            chunks = file_chunks(listing, CHUNK_BYTES, RUN_BYTES)
        else:
            points = listed_points(stale, listing)
            costs = {run: count + RUN_RECORDS for run, count in points.items()}
            chunks = chunk_requests(stale, points, CHUNK_RECORDS, costs)
        fetch = functools.partial(self._fetch, ctx)
        if self._helpers is None:
            fetched: Iterable[DecodedChunk] = map(fetch, chunks)
        else:
            fetched = self._helpers.map(self._eid, chunks, self._last_step, fetch)
        generation = self.generation
        self._read_in_chunks(chunks, fetched, self._keep_chunk)
        if len(chunks) > 1 and self.generation != generation:  # sorted before a request asks
            self._sorting = threading.Thread(
                target=self._sort_ahead, name="tb-monitor-sort", daemon=True
            )
            self._sorting.start()

    def _sort_ahead(self) -> None:
        """Sort the columns before a request asks. A request made during a big read waits
        for the next refresh (a refresh listed before it may miss what it expects), whose
        listing takes a while: only then would it start the sort. The next refresh lists once
        this sort is done: beside it, its walk of the files (Python) took the GIL from the
        analysis (what it found would wait for the lock anyway)."""
        try:
            with self._lock:
                self._current_columns()
        except Exception:  # the next request sorts again, and says why if it fails too
            _log.warning("sorting a read's events ahead of requests failed", exc_info=True)

    def _fetch(self, ctx: Any, chunk: ChunkRequest) -> DecodedChunk:
        """A chunk read and decoded here, in TensorBoard's process."""
        if self._files is not None:
            return decode_files(chunk, self._last_step)
        runs, tags = chunk.runs, chunk.tags
        data = read_series(self._provider, ctx, self._eid, contract.PLUGIN_NAME, runs, tags)
        return decode_chunk(data, runs, tags, self._last_step)

    def _keep_chunk(self, chunk: DecodedChunk) -> None:
        with self._lock:
            if self._files is not None:
                self._files.advance(chunk.ends, chunk.places)
            self._last_step.update(chunk.newest)
            if self._table.keep(chunk):
                self.generation += 1
                self._columns = None
            self._size.measure()

    def skipped(self) -> dict[str, Any]:
        """Records skipped as undecodable: ``count``, and the first ones' run, tag, step, error."""
        with self._lock:
            return self._skipped.summary()

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every event decoded so far, as sorted numpy columns and the values they stand for."""
        with self._lock:
            columns, generation = self._current_columns()  # first: it interns the labels
            table, lanes = self._table, self._lanes
            return Snapshot(
                columns=columns,
                generation=generation,
                loading=self.loading(),
                lanes=list(lanes.values),
                lane_runs=list(lanes.runs),
                states=list(table.states.values),
                runs=list(table.runs.values),
                # Append-only, and far longer: the ids in the columns stay valid without a copy.
                names=table.names.values,
                msgs=table.msgs.values,
                texts=table.texts,
                labels=list(table.labels.values),
                attempts=self._analysis.attempts,
                lane_fields=lanes.fields(table.runs.values),
            )

    def job_spans(self) -> list[JobSpan]:
        """The jobs of the logdir (``tb_monitor.analysis.jobs``), as of the last snapshot."""
        return self._analysis.spans

    def analysis(self) -> JobAnalysis:
        """As of the last snapshot: each rank's agent's view, roll-calls, captures."""
        return self._analysis

    def _current_columns(self) -> tuple[Columns, int]:
        """The sorted columns and their generation. While a long first read goes on, they are
        sorted again only once the events have doubled since the columns last handed out, and
        only in the read's first quarter (past it, the full picture is the next): every sort
        of a big job's events slows the read itself (the lists the columns index only grow, so
        older columns stay valid)."""
        shown, progress = self._shown, self._progress
        if progress is not None and self._columns is None and shown is not None:
            doubled = len(self._table) >= RESORT_GROWTH * len(shown[0].t)
            if not doubled or progress[0] >= RESORT_BEFORE * progress[1]:
                return shown
        with cyclic_gc_paused(), small_pages():
            self._shown = (self._sorted_columns(), self.generation)
        return self._shown

    def _sorted_columns(self) -> Columns:
        """The columns of every event, sorted. Made at rest (no read going on), they become
        the store's one sorted copy of its events (``EventTable.fold``); while a read goes on,
        its events stay appended as well, as the read goes on appending."""
        at_rest, table = self._progress is None, self._table
        if self._columns is not None and not (at_rest and len(table.t)):
            return self._columns
        folded = table.folded
        t, rec, ids = table.with_appended()
        try:
            # The analysis (Python) runs beside the sort (numpy, which lets go of the GIL). The
            # sort takes the lanes known now; where the analysis moved events onto lanes of
            # their own job (a shared run id: job_lanes moves every one of its events) or added
            # lanes, it runs again.
            lanes = len(self._lanes)
            with futures.ThreadPoolExecutor(1, thread_name_prefix="tb-monitor-analysis") as beside:
                last_time = float(t.max()) if len(t) else 0.0
                analysed = beside.submit(
                    self._analysis.run, table, self._lanes, last_time, not at_rest
                )
                ordered = self._lane_order(t, rec, table.record_events)
                in_order = ordered[1], ids[ordered[0]], rec[ordered[0]]
                found, intervals = analysed.result()
            drawn = rec  # each event's record as drawn: a shared run id's on its job's lanes
            if self._analysis.shared:
                lane_values, job_copy = self._lanes.values, self._lanes.job_copy
                drawn = job_lanes(
                    t, rec, self._analysis.shared, table.records, lane_values, job_copy
                )
            if drawn is not rec or len(self._lanes) != lanes:
                ordered = self._lane_order(t, drawn)
                in_order = ordered[1], ids[ordered[0]], rec[ordered[0]]
            moved = drawn is not rec
            t, ids, rec = in_order
            drawn = drawn[ordered[0]] if moved else rec
        except BaseException:
            # On a first sort ``t`` and ``rec`` are views of the appended columns: kept alive by
            # the traceback, they would make the next append fail (an exported buffer).
            t = rec = drawn = None  # noqa: F841
            raise
        columns, where, own = self._drawn_columns(t, ids, drawn, found, intervals, ordered)
        self._columns = columns
        if at_rest and moved:  # events drawn on a record not their own: found by comparing
            self._fold(SortedEvents.of(t, drawn, columns.ids, rec, columns.rec))
        elif at_rest:  # only the stopped ones
            self._fold(SortedEvents(t, columns.rec, columns.ids, where, own))
        if at_rest and len(t) - folded >= _TRIM_AFTER_EVENTS:
            release_freed_memory()  # the sort's and the analysis's passing objects
        return columns

    def _drawn_columns(
        self,
        t: np.ndarray,
        ids: np.ndarray,
        drawn: np.ndarray,
        found: list[Attempt],
        intervals: dict[str, np.ndarray],
        ordered: _LaneOrder,
    ) -> tuple[Columns, np.ndarray, np.ndarray]:
        """The sorted events' columns, collateral ranks' ends drawn stopped (in ``drawn``
        itself); and those events' positions and own records."""
        _, _, lane_rank, rank_start, counts = ordered
        records = self._table.records
        where, own = draw_collateral_stopped(found, ids, drawn, self._table)
        # Each record's events: counted before the sort, less those drawn on a twin now (a
        # count of the few moved, not of every event again).
        rec_count = np.zeros(len(records), dtype=np.int64)
        rec_count[: len(counts)] = counts
        np.subtract.at(rec_count, own, 1)
        np.add.at(rec_count, drawn[where], 1)
        columns = Columns(
            t=t,
            rec=EventRecords.of(drawn),  # kept as runs: far fewer than events
            ids=EventIds.of(ids),
            lane_rank=lane_rank,
            rank_start=rank_start,
            intervals=intervals,
            **{f"rec_{name}": column(values, np.int64) for name, values in records.columns.items()},
            rec_count=rec_count,
        )
        return columns, where, own

    def _lane_order(
        self, t: np.ndarray, drawn: np.ndarray, counted: np.ndarray | None = None
    ) -> _LaneOrder:
        """The order of events drawn on records ``drawn`` by lane and time, their times in
        that order, each lane's rank among the lanes, where each rank's events start in that
        order, and how many events each record draws (``counted`` already, when each event
        is drawn on its own record)."""
        lanes = list(self._lanes.values)
        lane_rank = np.empty(len(lanes), dtype=np.int64)
        lane_rank[sorted(range(len(lanes)), key=lambda i: lanes[i].sort_key())] = np.arange(
            len(lanes)
        )
        record_rank = lane_rank[column(self._table.records.columns["lane"], np.int64)]
        # Counted per record, then per rank: no rank gathered per event.
        per_record = np.zeros(len(record_rank), dtype=np.int64)
        if counted is None:
            counted = np.bincount(drawn, minlength=len(record_rank))
        per_record[: len(counted)] = counted
        per_rank = np.bincount(record_rank, weights=per_record, minlength=len(lanes))
        rank_start = np.zeros(len(lanes) + 1, dtype=np.int64)
        np.cumsum(per_rank.astype(np.int64), out=rank_start[1:])
        order, in_time = lane_time_order(t, drawn, record_rank)
        exact_time_order(in_time, order, rank_start)
        return order, in_time, lane_rank, rank_start, per_record

    def _fold(self, events: SortedEvents) -> None:
        """Keep ``events`` (every event) as the one sorted copy: the appended ones are in it."""
        self._table.fold(events)
        self._size.measure()

    # -- lookups ---------------------------------------------------------------------------

    def nbytes(self) -> int:
        """About the memory the store holds, as of its last change: asked at every request
        (``Refreshers``), it must not wait on the lock, which a big read's sort holds for
        seconds."""
        return self._size.nbytes()

    def runs(self) -> list[str]:
        """Runs that hold timeline records."""
        with self._lock:
            return sorted(self._table.runs.values)

    def event(self, ctx: Any, event_id: int) -> dict[str, Any]:
        """Every field of one event, for the details panel, and its lane's label whole and in
        parts (``lane_labels.label_parts``). The store keeps no event's JSON: it is read back
        (:class:`~tb_plugin.read_back.EventReadBack`) from its record, outside the lock."""
        with self._lock:
            wall_time, rec, step, first = self._table.locate(event_id)
            records = self._table.records
            kind = contract.KINDS[records.get("kind", rec)]
            run = self._table.runs.values[records.get("run", rec)]
            lane = self._lanes.values[records.get("lane", rec)]
        raw = self._read_back.raw(ctx, run, kind, step, event_id - first)
        return {
            "id": event_id,
            "run": run,
            "kind": kind,
            "step": step,
            "wall_time": wall_time,
            "lane": lane.label,
            "lane_parts": label_parts(lane),
            "fields": contract.decode_record(kind, raw),
            "raw": raw,
        }

    # -- the parts' state, under the names the tests read ------------------------------------

    @property
    def _folded(self) -> int:
        return self._table.folded

    @property
    def _t(self) -> array.array:
        return self._table.t

    @property
    def _states(self) -> Interner:
        return self._table.states

    @property
    def _span_rows(self) -> list[dict[str, Any]]:
        return self._table.span_rows

    def _lane_of_rows(self) -> Callable[[Mapping[str, Any]], timeline.Lane]:
        return lane_of_rows(self._table, self._lanes)

    def _attempt_payload(self, attempt: Attempt) -> dict[str, Any]:
        return attempt_payload(attempt, self._lanes)
