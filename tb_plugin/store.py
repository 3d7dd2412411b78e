"""Timeline records, decoded once into columns, because the data provider is slow to read.

Reading a record through TensorBoard's data provider costs microseconds
(:mod:`tb_plugin.records`): seconds per request for a big job. :class:`TimelineStore` decodes
each record once, identical payloads (keep-alive heartbeats) only once in all, reads only what
a refresh finds new (the refresh itself is :class:`~tb_plugin.provider_store.ProviderStore`'s),
in chunks so a query during a long first decode answers with what is there (a big read's
chunks decoded in helper processes, :mod:`tb_plugin.read_workers`), and hands
:mod:`tb_plugin.query` a :class:`~tb_plugin.columns.Snapshot` of sorted numpy columns. A record
may hold several events (content versions 2 to 4, ``tb_monitor.contract.decode_records``);
each is an event here. An event costs its time, its record's id and its severity, kept once,
sorted (13 bytes; those read since the last sort are appended until the next), and its id,
kept as runs of consecutive ids (a record's events, sorted in a row: a few bits), so a
1,024-node day fits. A version-4 record's events come as numpy columns
(:mod:`tb_plugin.batch_events`): one decode per group of alike events, a rendezvous message
apart, so a million distinct events cost no Python object each but their messages.

With a local logdir the records come from the event files themselves, and a walk of the
logdir says which grew (:mod:`tb_plugin.event_files`: the data server keeps only each series'
newest record), else from the data provider. A record under a timeline tag whose payload cannot be
decoded (not JSON, not an object, not text) is skipped, never fatal: it is logged with its run,
tag and step and counted in :meth:`TimelineStore.skipped` (the ``status`` route says how
many). Damage in the files themselves is skipped by whoever reads them (``tfrecord``, or the
data provider): every whole record is kept.

Lanes, intervals and the order of states are :mod:`tb_monitor.timeline`'s (``lane_of``,
``spans``, ``STATES``), so the tab, the Perfetto export and the notebook figure always agree.
"""

from __future__ import annotations

import array
import bisect
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import replace
from typing import Any

import numpy as np
from tensorboard.data import provider as tb_provider

from tb_monitor import contract, timeline
from tb_monitor.analysis.agent_views import AgentView, agent_views
from tb_monitor.analysis.attempts import Attempt, attempt_dict, attempts
from tb_monitor.analysis.jobs import JobSpan, job_spans, separate_jobs
from tb_monitor.analysis.restart_marks import mark_restarts
from tb_plugin.columns import Columns, LaneFields, Snapshot, SortedEvents
from tb_plugin.decoding import DecodedChunk, decode_chunk, decode_files, kept_events
from tb_plugin.event_files import EventFiles, file_chunks
from tb_plugin.ingest import Ingest
from tb_plugin.interned import Interner, Records, Texts, column
from tb_plugin.job_lanes import SharedRunIds, intern_job_lanes, job_lanes, shared_run_ids
from tb_plugin.lane_order import exact_time_order, lane_time_order
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
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.records import Series, read_series
from tb_plugin.runlength import EventIds, EventRecords

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
#: progress, and a read in several chunks gives its freed memory back (a day's ~47k records in
#: one reply kept ~0.3 GiB more of TensorBoard's memory).
CHUNK_RECORDS = 10_000
#: What a run costs to read, in records: its files and series, and its distinct events (a
#: worker's are: each is decoded and described on its own). Without it, a 1,024-node day's
#: last chunk held its 4,096 worker ranks, 6,725 records that cost 2.3 s against ~0.35 s for
#: another chunk's 10,000 (its agents' keep-alive runs), read by one helper at the end.
RUN_RECORDS = 16
#: Read from event files, the same in bytes (``event_files.file_chunks``): chunks of about this
#: many, each run counted as this many more (a 1,024-node day: 39 chunks, alike to keep).
CHUNK_BYTES = 8 * 2**20
RUN_BYTES = 16_000
#: What ``nbytes`` counts per sorted event (its time), per record (its
#: fields, search text and row slot), per interned string and per interval row.
_SORTED_BYTES, _RECORD_BYTES, _STRING_BYTES, _ROW_BYTES = 8, 84, 120, 1200
#: A sort at rest that takes in this many new events gives the heap's free pages back after.
_TRIM_AFTER_EVENTS = 1_000_000
#: Skipped records remembered with their details (all of them are counted).
_SKIPPED_DETAILS = 100
_log = logging.getLogger(__name__)


class UnknownEventError(LookupError):
    """An event id that the store does not hold."""


class TimelineStore(Ingest, ProviderStore):
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
        self._lock = threading.RLock()  # the columns, interners and snapshot
        # Events are kept once, sorted (``_base``: the columns last made at rest, their drawn
        # records and the original records of those drawn otherwise), and the ones appended
        # since, each event's id its position in the order they came: ``_folded`` of them are
        # in the base, the others in these append-only columns (a day's 18M events twice cost
        # ~0.2 GiB more).
        self._base = SortedEvents.empty()
        self._folded = 0
        self._t = array.array("d")
        self._rec = array.array("i")  # its record in self._records (a C int: np.intc)
        # The TensorBoard records the events came in, as appended: each one's first event id
        # and its step (an event's step is its record's: a record per event would cost a day
        # 70 MB, a record per run of keep-alives costs nothing).
        self._record_first = array.array("q")
        self._record_step = array.array("I")
        self._record_events = np.zeros(0, dtype=np.int64)
        # The series the details panel read last: (run, tag), step -> position, Series.
        self._recent_series: tuple[tuple[str, str], dict[int, int], Series | None] | None = None
        self._records = Records()
        self._lanes = Interner()  # tb_monitor.timeline.Lane values
        self._lane_memo: dict[tuple[Any, ...], int] = {}  # see _row_lane
        self._lane_runs: list[str] = []  # the first run each lane was seen in
        self._runs = Interner()
        self._lane_fields: tuple[tuple[int, int], LaneFields] | None = None
        self._states = Interner()
        self._names = Interner()
        self._msgs = Interner()
        self._texts = Texts(self._msgs.values)
        self._labels = Interner()
        for state in timeline.STATES:  # first, so a known state's id is its severity
            self._states(state.name)
        # Events that may open or close an interval, for timeline.spans, and that the restart
        # analysis reads: every one but the keep-alive heartbeats, which are most of a long
        # job's events and neither; each with its event id, ``_id``.
        self._span_rows: list[dict[str, Any]] = []
        self._span_recs = array.array("i")  # per span row: its record (and so its lane)
        self._columns: Columns | None = None
        self._sorting: threading.Thread | None = None  # a big read's sort ahead (_sort_ahead)
        self._shown: tuple[Columns, int] | None = None  # the columns last handed out
        self._attempts: list[dict[str, Any]] = []
        self._views: dict[tuple[str, int], AgentView] = {}  # what each rank's agent saw of it
        self._analysed: tuple[list[Attempt], dict[str, np.ndarray]] | None = None
        self._spans: list[JobSpan] = []  # the jobs, as the last analysis told them apart
        self._shared: SharedRunIds = {}  # run ids several jobs share (``job_lanes``)
        self._skipped_count = 0
        self._skipped: list[dict[str, Any]] = []  # the first _SKIPPED_DETAILS of them
        self._nbytes = 0  # see nbytes

    # -- ingestion -------------------------------------------------------------------------

    def _list(self, ctx: Any) -> Listing:
        """The provider's timeline series; from the files, what grew of each run's files
        (``EventFiles.grown``): read on from where it was, no need to wait for a series to
        settle, nor for the data server to load a run (its listing at TensorBoard's start
        named 1,768 of a 1,024-node day's 5,120 runs, and the rest were read 3.5 s later)."""
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
        listing takes a 1,024-node day's ~0.3 s: only then would it start the sort. The next
        refresh lists once this sort is done: beside it, its walk of the files (Python) took
        the GIL from the analysis (what it found would wait for the lock anyway)."""
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
            if self._keep(chunk):
                self.generation += 1
                self._columns = None
            self._measure()

    def _skip(self, run: str, tag: str, step: int, why: str) -> None:
        self._skipped_count += 1
        error = why[:300]
        if len(self._skipped) < _SKIPPED_DETAILS:
            self._skipped.append({"run": run, "tag": tag, "step": int(step), "error": error})
        _log.warning(
            "run %r, tag %r, step %d: undecodable record skipped: %s", run, tag, step, error
        )

    def skipped(self) -> dict[str, Any]:
        """Records skipped as undecodable: ``count``, and the first ones' run, tag, step, error."""
        with self._lock:
            return {"count": self._skipped_count, "records": list(self._skipped)}

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Every event decoded so far, as sorted numpy columns and the values they stand for."""
        with self._lock:
            columns, generation = self._current_columns()  # first: it interns the labels
            return Snapshot(
                columns=columns,
                generation=generation,
                loading=self.loading(),
                lanes=list(self._lanes.values),
                lane_runs=list(self._lane_runs),
                states=list(self._states.values),
                runs=list(self._runs.values),
                # Append-only, and far longer: the ids in the columns stay valid without a copy.
                names=self._names.values,
                msgs=self._msgs.values,
                texts=self._texts,
                labels=list(self._labels.values),
                attempts=self._attempts,
                lane_fields=self._current_lane_fields(),
            )

    def _current_lane_fields(self) -> LaneFields:
        """The lanes' payload fields, made again only when lanes or runs were added (both
        only grow, so their counts say whether they changed)."""
        lanes, runs = self._lanes.values, self._runs.values
        key = (len(lanes), len(runs))
        if self._lane_fields is None or self._lane_fields[0] != key:
            self._lane_fields = (key, LaneFields.of(lanes, self._lane_runs, runs))
        return self._lane_fields[1]

    def job_spans(self) -> list[JobSpan]:
        """The jobs of the logdir (``tb_monitor.analysis.jobs``), as of the last snapshot."""
        return self._spans

    def agent_views(self) -> dict[tuple[str, int], AgentView]:
        """What each rank's agent saw of its process, as of the last snapshot."""
        return self._views

    def _current_columns(self) -> tuple[Columns, int]:
        """The sorted columns and their generation. While a long first read goes on, they are
        sorted again only once the events have doubled since the columns last handed out, and
        only in the read's first quarter (past it, the full picture is the next): every sort
        of millions of events slows the read itself, by seconds on a 1,024-node day (the lists
        the columns index only grow, so older columns stay valid)."""
        shown, progress = self._shown, self._progress
        if progress is not None and self._columns is None and shown is not None:
            doubled = self._folded + len(self._t) >= RESORT_GROWTH * len(shown[0].t)
            if not doubled or progress[0] >= RESORT_BEFORE * progress[1]:
                return shown
        with cyclic_gc_paused(), small_pages():
            self._shown = (self._sorted_columns(), self.generation)
        return self._shown

    def _sorted_columns(self) -> Columns:
        """The columns of every event, sorted. Made at rest (no read going on), they become
        the store's one sorted copy of its events (``_fold``); while a read goes on, its
        events stay appended as well, as the read goes on appending."""
        at_rest = self._progress is None
        if self._columns is not None and not (at_rest and len(self._t)):
            return self._columns
        records, folded = self._records, self._folded
        t, rec, ids = self._base.with_appended(
            np.frombuffer(self._t, dtype=np.float64), np.frombuffer(self._rec, dtype=np.int32)
        )
        try:
            # The analysis (Python) runs beside the sort (numpy, which lets go of the GIL): a
            # 1,024-node day's ~1 s each. The sort takes the lanes known now; where the
            # analysis moved events onto lanes of their own job (a shared run id: job_lanes
            # moves every one of its events) or added lanes, it runs again.
            lanes = len(self._lanes.values)
            with futures.ThreadPoolExecutor(1, thread_name_prefix="tb-monitor-analysis") as beside:
                analysed = beside.submit(self._analysis, float(t.max()) if len(t) else 0.0)
                order, in_time, lane_rank, rank_start, counts = self._lane_order(
                    t, rec, self._record_events
                )
                in_order = in_time, ids[order], rec[order]
                found, intervals = analysed.result()
            drawn = rec  # each event's record as drawn: a shared run id's on its job's lanes
            if self._shared:
                drawn = job_lanes(t, rec, self._shared, records, self._lanes, self._lane_from)
            if drawn is not rec or len(self._lanes.values) != lanes:
                order, in_time, lane_rank, rank_start, counts = self._lane_order(t, drawn)
                in_order = in_time, ids[order], rec[order]
            moved = drawn is not rec
            t, ids, rec = in_order
            drawn = drawn[order] if moved else rec
        except BaseException:
            # On a first sort ``t`` and ``rec`` are views of the appended columns: kept alive by
            # the traceback, they would make the next append fail (an exported buffer).
            t = rec = drawn = None  # noqa: F841
            raise
        where, own = self._draw_collateral_stopped(found, ids, drawn)
        # Each record's events: counted before the sort, less those drawn on a twin now (a
        # count of the few moved, not of every event again: ~0.2 s of a day's tail).
        rec_count = np.zeros(len(records), dtype=np.int64)
        rec_count[: len(counts)] = counts
        np.subtract.at(rec_count, own, 1)
        np.add.at(rec_count, drawn[where], 1)
        self._attempts = [self._attempt_payload(a) for a in found]
        ids = EventIds.of(ids)
        runs = EventRecords.of(drawn)  # kept as runs (2.4 MB a day, not 71)
        self._columns = Columns(
            t=t,
            rec=runs,
            ids=ids,
            lane_rank=lane_rank,
            rank_start=rank_start,
            intervals=intervals,
            **{f"rec_{name}": column(values, np.int64) for name, values in records.columns.items()},
            rec_count=rec_count,
        )
        if at_rest and moved:  # events drawn on a record not their own: found by comparing
            self._fold(SortedEvents.of(t, drawn, ids, rec, runs))
        elif at_rest:  # only the stopped ones
            self._fold(SortedEvents(t, runs, ids, where, own))
        if at_rest and len(t) - folded >= _TRIM_AFTER_EVENTS:
            release_freed_memory()  # the sort's and the analysis's passing objects
        return self._columns

    def _lane_order(
        self, t: np.ndarray, drawn: np.ndarray, counted: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The order of events drawn on records ``drawn`` by lane and time, their times in
        that order, each lane's rank among the lanes, where each rank's events start in that
        order, and how many events each record draws (``counted`` already, when each event
        is drawn on its own record)."""
        lanes = list(self._lanes.values)
        lane_rank = np.empty(len(lanes), dtype=np.int64)
        lane_rank[sorted(range(len(lanes)), key=lambda i: lanes[i].sort_key())] = np.arange(
            len(lanes)
        )
        record_rank = lane_rank[column(self._records.columns["lane"], np.int64)]
        # Counted per record, then per rank: no rank gathered per event (18M of them).
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

    def _draw_collateral_stopped(
        self, found: list[Attempt], ids: np.ndarray, drawn: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw collateral ranks' ending events as stopped by the restart (or when the job
        ended), not as failures: each takes its record's twin in that state, in ``drawn``
        itself (a copy would cost 4 bytes an event). Their positions and former records."""
        stopped = {row["_id"]: a.collateral_state for a in found for row in a.collateral_records}
        wanted = np.zeros(len(ids), dtype=bool)  # event ids are 0 .. len(ids) - 1
        wanted[np.fromiter(stopped, dtype=np.int64, count=len(stopped))] = True
        where = np.flatnonzero(wanted[ids])
        before = drawn[where]
        states = [self._states(stopped[event]) for event in ids[where].tolist()]
        drawn[where] = self._records.twins_of(before, "state", np.asarray(states, dtype=np.int64))
        return where, before

    def _fold(self, events: SortedEvents) -> None:
        """Keep ``events`` (every event) as the one sorted copy: the appended ones are in it."""
        self._base, self._folded = events, len(events)
        self._t, self._rec = array.array("d"), array.array("i")
        self._measure()

    def _analysis(self, last_time: float) -> tuple[list[Attempt], dict[str, np.ndarray]]:
        """The attempts, as the job's ``JobReport`` holds them (``tb_monitor.analysis.attempts``:
        the report and the notebook show the same), and the intervals drawn (``timeline.spans``,
        restarts marked). Python over every bounding event, so while a first read goes on, the
        sorts that show its progress reuse the last ones: it runs again once the read is done.
        It runs on a thread beside the sort, which holds the store's lock meanwhile: it must
        not take that lock, nor change the records or the lanes it has (adding lanes is fine)."""
        if self._progress is None or self._analysed is None:
            rows = separate_jobs(self._span_rows)  # jobs sharing a run id, told apart
            self._spans = job_spans(rows)
            self._shared = shared_run_ids(self._spans, self._span_rows, rows)
            intern_job_lanes(self._shared, self._lanes, self._lane_from)
            marks = timeline.spans(rows, self._lane_of_rows())
            found = attempts(rows, marks)  # as the report's (``report_of``), without the rest
            self._views = agent_views(self._span_rows)
            self._analysed = (found, self._intervals(mark_restarts(marks, found), last_time))
        return self._analysed

    def _lane_of_rows(self) -> Callable[[Mapping[str, Any]], timeline.Lane]:
        """``timeline.lane_of`` for the span rows, as their records' lanes interned already;
        a row made since (a job told apart: its own ``run_id``) has its lane made."""
        lanes, record_lane = self._lanes.values, self._records.columns["lane"]
        known = {
            id(row): lanes[record_lane[rec]]
            for row, rec in zip(self._span_rows, self._span_recs, strict=True)
        }
        return lambda row: known.get(id(row)) or timeline.lane_of(row)

    def _lane(self, lane: timeline.Lane, run: str) -> int:
        """The lane's id, interned with the first run it was seen in."""
        lane_id = self._lanes(lane)
        if lane_id == len(self._lane_runs):
            self._lane_runs.append(run)
            lane.sort_key()  # made (and kept) while reading, not in the sort after it
        return lane_id

    def _row_lane(self, row: Mapping[str, Any]) -> int:
        """The id of a decoded record's lane (``timeline.lane_of``), looked up by the fields
        that make it: a day's 100,000 records fall on 10,000 lanes, and making and hashing
        each one's ``Lane`` cost 10 µs a record. The fields' types are in the key too: 1, 1.0
        and True are equal keys, but a lane's label tells them apart."""
        values = (row["run_id"], row["hostname"], row["pid"], row["local_id"], row["rank"])
        key = (row["run"], row["kind"], *values, *map(type, values))
        try:
            found = self._lane_memo.get(key)
        except TypeError:  # an unhashable field (a foreign record): made every time
            return self._lane(timeline.lane_of(row), row["run"])
        if found is None:
            found = self._lane_memo[key] = self._lane(timeline.lane_of(row), row["run"])
        return found

    def _lane_from(self, lane: timeline.Lane, from_id: int) -> int:
        """A job's copy of lane ``from_id``, seen in the same run."""
        return self._lane(lane, self._lane_runs[from_id])

    def _attempt_payload(self, attempt: Attempt) -> dict[str, Any]:
        out = attempt_dict(attempt, traceback=False)
        cause = attempt.root_cause
        if cause is not None and cause.record is not None:
            out["root_cause"]["event"] = int(cause.record["_id"])
            out["root_cause"]["lane"] = self._lane_id(timeline.lane_of(cause.record))
        return out

    def _lane_id(self, lane: timeline.Lane) -> int:
        """The lane's id; a lane of a job told apart from another of its run id
        (``<run id>@HH:MM:SS``, ``analysis.jobs``) is drawn on its run id's lane."""
        found = self._lanes.ids.get(lane)
        if found is None:
            found = self._lanes.ids[replace(lane, group=lane.group.split("@", 1)[0])]
        return found

    def _intervals(self, marks: list[timeline.Span], last_time: float) -> dict[str, np.ndarray]:
        """Worker attempts and rendezvous rounds, as tb_monitor.timeline.spans finds them, and
        collateral ranks' attempts stopped by the restart (``mark_restarts``)."""
        found = [span for span in marks if span.end is not None]
        return {
            "lane": np.asarray([self._lane_id(s.lane) for s in found], dtype=np.int64),
            "t0": np.asarray([s.begin for s in found], dtype=np.float64),
            # An open interval runs to the newest record of the job, not only of its own kind.
            "t1": np.asarray([last_time if s.open else s.end for s in found], dtype=np.float64),
            "state": np.asarray([self._states(s.state or "") for s in found], dtype=np.int64),
            "label": np.asarray([self._labels(s.label) for s in found], dtype=np.int64),
            "open": np.asarray([s.open for s in found], dtype=bool),
        }

    # -- lookups ---------------------------------------------------------------------------

    def nbytes(self) -> int:
        """About the memory the store holds, as of its last change: asked at every request
        (``Refreshers``), it must not wait on the lock, which a big read's sort holds for
        seconds."""
        return self._nbytes

    def _measure(self) -> None:
        """Count ``nbytes`` (under the lock): the sorted and appended columns, and per record,
        interned string and interval row what such objects cost in CPython."""
        appended = (self._t, self._rec, self._record_first, self._record_step)
        arrays = sum(a.itemsize * len(a) for a in appended)
        strings = len(self._msgs.values) + len(self._names.values)
        self._nbytes = (
            arrays
            + self._base.ids.nbytes
            + self._base.rec.nbytes
            + _SORTED_BYTES * (self._folded + len(self._t))
            + _RECORD_BYTES * len(self._records)
            + _STRING_BYTES * strings
            + _ROW_BYTES * len(self._span_rows)
            + (0 if self._files is None else self._files.nbytes())
        )

    def runs(self) -> list[str]:
        """Runs that hold timeline records."""
        with self._lock:
            return sorted(self._runs.values)

    def event(self, ctx: Any, event_id: int) -> dict[str, Any]:
        """Every field of one event, for the details panel. The store keeps no event's JSON (a
        day's distinct worker events' would cost ~80 MB), so it is read back from the data
        provider: the TensorBoard record the event came in, its ``event_id - first`` kept
        event (``decoding.kept_events``), as the store kept them."""
        with self._lock:
            if not 0 <= event_id < self._folded + len(self._t):
                raise UnknownEventError(f"unknown event id {event_id!r}")
            if event_id < self._folded:
                wall_time, rec = self._base.find(event_id)
            else:
                wall_time, rec = (
                    self._t[event_id - self._folded],
                    self._rec[event_id - self._folded],
                )
            records = self._records
            kind = contract.KINDS[records.get("kind", rec)]
            run = self._runs.values[records.get("run", rec)]
            record = bisect.bisect_right(self._record_first, event_id) - 1
            step, first = self._record_step[record], self._record_first[record]
            lane = self._lanes.values[records.get("lane", rec)].label
        raw = self._read_back(ctx, run, kind, step, event_id - first)
        return {
            "id": event_id,
            "run": run,
            "kind": kind,
            "step": step,
            "wall_time": wall_time,
            "lane": lane,
            "fields": contract.decode_record(kind, raw),
            "raw": raw,
        }

    def _read_back(self, ctx: Any, run: str, kind: str, step: int, index: int) -> str:
        """The JSON of the ``index``-th kept event of ``run``'s record of ``kind`` at ``step``,
        from the event files or the data provider (outside the lock: a read). The series last
        read is kept, so the details of a record's neighbouring events cost no read."""
        tag = contract.timeline_tag(kind)
        recent = self._recent_series
        if recent is None or recent[0] != (run, tag) or step not in recent[1]:
            if self._files is not None:
                series = self._files.read_series(run, tag, step)
            else:
                found = read_series(
                    self._provider, ctx, self._eid, contract.PLUGIN_NAME, [run], [tag]
                )
                series = found.get(run, {}).get(tag)
            steps = series.steps if series is not None else []
            positions = {found: position for position, found in enumerate(steps)}
            recent = self._recent_series = ((run, tag), positions, series)
        _, positions, series = recent
        position = positions.get(step)
        events = (
            []
            if series is None or position is None
            else kept_events(kind, series.records[position])
        )
        if not 0 <= index < len(events):
            raise UnknownEventError(
                f"run {run!r}, tag {tag!r}: the record at step {step} is no longer held by "
                + (
                    "its event files"
                    if self._files
                    else "TensorBoard's data provider (sampled out?)"
                )
            )
        return events[index]
