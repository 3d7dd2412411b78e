"""Timeline records read from the event files themselves, not from TensorBoard's data server.

The data server keeps a copy of every record a plugin asks it to keep, hundreds of bytes each
beside the payload (a big job's timeline costs much of its memory), and then hands them over by
gRPC. So when TensorBoard reads a local ``--logdir``, the plugin reads its records
from the event files itself: each file from where its last read ended, whole records only (a
torn tail waits for the next read: the writer may still be writing it), the records of other
plugins passed over unparsed. The data server then keeps only each timeline series' newest
record (``samples_per_plugin`` 1, :func:`sampling`). Which runs grew is found by walking the
logdir (:meth:`EventFiles.grown`), not from the data server's listing: while it loads, that
names only the runs it has loaded so far.

Reading is pure (:func:`read_ranges`: ranges in, records out, with where each file's next read
starts), so the helper processes of a big read run it too (:mod:`tb_plugin.read_workers`); the
offsets are the store's and move on only as a chunk is kept (:meth:`EventFiles.advance`).

``TB_MONITOR_READ_FILES=0`` reads through the data provider instead (every record kept by the
data server, as before); so do a remote logdir and ``--logdir_spec``, whose run names are the
data server's to map.
"""

from __future__ import annotations

import array
import bisect
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tb_monitor import contract
from tb_monitor.logdir import fs, readers, tfrecord
from tb_plugin.interned import Interner
from tb_plugin.provider_store import ChunkRequest, chunk_requests
from tb_plugin.records import Series, tensor_strings

__all__ = [
    "ENV",
    "EventFiles",
    "FileRange",
    "FilesRead",
    "Places",
    "file_chunks",
    "read_ranges",
    "sampling",
]

#: ``TB_MONITOR_READ_FILES=0``: read timeline records through TensorBoard's data provider.
ENV = "TB_MONITOR_READ_FILES"
_NEEDLE = contract.TIMELINE_PREFIX.encode()  # bytes every timeline record holds
#: A record's step, and its timeline tags' tensors (``tag, (strings, wall_time, batched)``).
_Tensors = tuple[int, list[tuple[str, tuple[Sequence[str | bytes], float, bool]]]]
_log = logging.getLogger(__name__)

#: The C twin of :func:`_parsed_tensors` for the common case, None where it is not built.
_string_tensors = readers.c_string_tensors


class FileRange(NamedTuple):
    """What to read of one event file of a run: its bytes from ``start`` (a record's first) on;
    ``size``, the file's size when it was listed (0: not listed)."""

    run: str
    path: str
    start: int
    size: int = 0


class Places(NamedTuple):
    """Where each record of a read's series was: per series (``series``, in order) its
    records' steps, files (positions in ``paths``) and byte offsets there, one series after
    another (series ``i``'s are ``bounds[i]:bounds[i + 1]``). Columns, not a tuple per record:
    a helper hands them over pickled, and a big job holds many records."""

    series: list[tuple[str, str]]
    bounds: list[int]
    steps: np.ndarray  # int64
    files: np.ndarray  # int32
    offsets: np.ndarray  # int64
    paths: list[str]

    @classmethod
    def of(
        cls, found: Mapping[tuple[str, str], list[tuple[int, int, int]]], paths: list[str]
    ) -> Places:
        """``found``: per series, each record's step, file (in ``paths``) and offset."""
        series = [key for key, rows in found.items() if rows]
        rows = [row for key in series for row in found[key]]
        steps, files, offsets = zip(*rows, strict=True) if rows else ((), (), ())
        bounds = np.cumsum([0, *(len(found[key]) for key in series)]).tolist()
        return cls(
            series,
            bounds,
            np.asarray(steps, dtype=np.int64),
            np.asarray(files, dtype=np.int32),
            np.asarray(offsets, dtype=np.int64),
            paths,
        )


class FilesRead(NamedTuple):
    """Timeline records read from files (``{run: {tag: Series}}``, each series in step order),
    per file where its next read starts, and per series where each record was."""

    series: dict[str, dict[str, Series]]
    ends: dict[str, int]
    places: Places


class EventFiles:
    """The event files of a local logdir's runs, where the next read of each starts, and where
    each record kept was (for the details panel: one record read back, not a run)."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self._ends: dict[str, int] = {}  # path -> the offset its next read starts from
        self._paths = Interner()  # the files records were kept from
        # (run, tag) -> each record's step, file (in _paths) and offset, in step order: a few
        # bytes a record (see nbytes), against a run's files read whole per lookup.
        self._places: dict[tuple[str, str], tuple[array.array, array.array, array.array]] = {}
        self._nbytes = 0  # see nbytes
        self._listed: dict[str, int] = {}  # path -> its size at the last listing (grown)
        self._sizes_read: dict[str, int] = {}  # path -> its size when last read (advance)

    @classmethod
    def of_flags(cls, flags: Any) -> EventFiles | None:
        """The files of TensorBoard's ``--logdir`` when the plugin reads them itself (a local
        logdir, no ``--logdir_spec``, ``TB_MONITOR_READ_FILES`` not 0), else None."""
        logdir = _local_logdir(flags)
        return None if logdir is None else cls(logdir)

    def directory(self, run: str) -> str:
        """The directory of a run as TensorBoard names it (relative, ``/``-separated; ``.``)."""
        return self.logdir if run == "." else os.path.join(self.logdir, *run.split("/"))

    def grown(self) -> dict[str, list[FileRange]]:
        """Every run whose event files grew since they were last read (advanced), with what
        grew of them in TensorBoard's order: one walk of the logdir, so a run is read as soon
        as its files are there, whether TensorBoard's data server has loaded it yet or not
        (while it loads, its listing names only the runs loaded so far). A file now shorter
        than what was read of it was replaced: it is read again from its start (records
        already kept are known by their steps)."""
        out: dict[str, list[FileRange]] = {}
        for run, (directory, sizes) in fs.local_event_files(self.logdir).items():
            for name in sorted(sizes):
                path, size = os.path.join(directory, name), sizes[name]
                start = self._ends.get(path, 0)
                if size < start:
                    start = 0
                if size > start and size != self._sizes_read.get(path):
                    out.setdefault(run, []).append(FileRange(run, path, start, size))
                    self._listed[path] = size
        return out

    def advance(self, ends: dict[str, int], places: Places | None) -> None:
        """Files read up to ``ends`` (path -> offset): their next reads start there; the
        records at ``places`` are kept (those past each series' last step known). A chunk's
        series at once: made per series, the columns would cost a big read a numpy call each.
        A file read short of its size at the listing (a torn tail: its writer died, or is
        writing) is listed again only once that size changed."""
        self._ends.update(ends)
        self._sizes_read.update((path, self._listed[path]) for path in ends if path in self._listed)
        if places is None or not places.series:
            return
        ids = np.zeros(len(places.paths), dtype=np.int32)
        for file in np.unique(places.files).tolist():  # those records were kept from
            ids[file] = self._paths(places.paths[file])
        steps, files, bounds = places.steps, ids[places.files], places.bounds
        kept = [self._places.get(key) for key in places.series]
        keep = self._past_kept(steps, bounds, kept)
        for at, key in enumerate(places.series):
            a, b = bounds[at], bounds[at + 1]
            mine = slice(a, b) if keep is None else np.flatnonzero(keep[a:b]) + a
            columns = kept[at] or self._places.setdefault(
                key, (array.array("q"), array.array("i"), array.array("q"))
            )
            columns[1].frombytes(files[mine].tobytes())
            columns[2].frombytes(places.offsets[mine].tobytes())
            # last: a read-back finds no step without its place
            columns[0].frombytes(steps[mine].tobytes())
            self._nbytes += 20 * (b - a if keep is None else len(mine)) + (0 if kept[at] else 250)

    @staticmethod
    def _past_kept(
        steps: np.ndarray, bounds: list[int], kept: list[tuple[array.array, ...] | None]
    ) -> np.ndarray | None:
        """Which of the series' new steps (``steps[bounds[i]:bounds[i + 1]]`` for the series
        with places ``kept[i]``) to keep: each past the greatest before it, the last kept's
        included. None: every one (in step order, past what was kept: a read as it goes)."""
        lowest = np.iinfo(np.int64).min
        last = np.asarray([p[0][-1] if p and p[0] else lowest for p in kept], dtype=np.int64)
        rising = steps[1:] > steps[:-1]
        rising[np.asarray(bounds[1:-1], dtype=np.int64) - 1] = True  # a series' first step
        if rising.all() and (steps[bounds[:-1]] > last).all():
            return None
        keep = np.empty(len(steps), dtype=bool)
        for at, before in enumerate(last.tolist()):
            new = steps[bounds[at] : bounds[at + 1]]
            keep[bounds[at] : bounds[at + 1]] = new > np.maximum.accumulate(
                np.concatenate([[before], new[:-1]])
            )
        return keep

    def nbytes(self) -> int:
        """About how many bytes the places of the records kept hold (20 a record, 250 a
        series), counted as they are kept."""
        return self._nbytes

    def read_series(self, run: str, tag: str, step: int) -> Series | None:
        """The record of one series at ``step`` (the details panel's read-back): read alone
        where it was kept from, else (its place unknown or changed) from its run's files
        whole; None when the run holds none."""
        found = self._read_place(run, tag, step)
        if found is not None:
            return found
        paths = fs.event_files(self.directory(run))
        return read_ranges(FileRange(run, p, 0) for p in paths).series.get(run, {}).get(tag)

    def _read_place(self, run: str, tag: str, step: int) -> Series | None:
        place = self._places.get((run, tag))
        if place is None:
            return None
        steps, files, offsets = place
        at = bisect.bisect_left(steps, step)
        if at == len(steps) or steps[at] != step:
            return None
        path, offset = self._paths.values[files[at]], offsets[at]
        try:
            data = tfrecord.read_record_at(path, offset)
        except OSError:
            return None
        event = None if data is None else readers.parse_event(path, offset, data)
        if event is None or event.step != step:
            return None
        for value in event.summary.value:
            if value.tag == tag and value.HasField("tensor"):
                return Series([step], [tensor_strings(value.tensor, event.wall_time)])
        return None


def read_ranges(ranges: Iterable[FileRange]) -> FilesRead:
    """The timeline records in ``ranges`` (whole records only; damage is skipped, logged by
    ``tfrecord``) and where each file's next read starts. A file gone since it was listed is
    passed over (a warning): nothing of it is read."""
    series: dict[str, dict[str, Series]] = {}
    ends: dict[str, int] = {}
    places: dict[tuple[str, str], list[tuple[int, int, int]]] = {}  # step, file, offset
    paths: list[str] = []
    timeline: dict[str, bool] = {}  # per tag read, whether it is a timeline kind's
    for found in ranges:
        try:
            read = tfrecord.read_records_from(
                found.path, found.start, needle=_NEEDLE, tensors=_NEEDLE
            )
            records, ends[found.path] = read
        except OSError as exc:
            _log.warning("%s: not read (%s); read again at the next refresh", found.path, exc)
            continue
        by_tag, file = series.setdefault(found.run, {}), len(paths)
        paths.append(found.path)
        for offset, item in records:
            _keep_event(by_tag, places, found.run, found.path, file, offset, item, timeline)
    for run, by_tag in series.items():
        for tag, kept in by_tag.items():
            if kept.steps != sorted(kept.steps):
                # A file written after another may hold earlier steps: in step order, as the
                # provider hands a series over (stable: one step's records keep file order).
                order = sorted(range(len(kept.steps)), key=kept.steps.__getitem__)
                by_tag[tag] = Series(
                    [kept.steps[i] for i in order], [kept.records[i] for i in order]
                )
                places[(run, tag)] = [places[(run, tag)][i] for i in order]
    return FilesRead(series, ends, Places.of(places, paths))


def file_chunks(
    grown: Mapping[str, list[FileRange]], limit: int, run_bytes: int
) -> list[ChunkRequest]:
    """What grew of the files (``EventFiles.grown``) dealt into reads of about ``limit`` bytes
    (``chunk_requests``), each with its runs' ranges; the tags are what the files hold. Each
    run costs ``run_bytes`` more (its records' cost per run), or its bytes again where fewer:
    a live job's thousands of runs that grew by a few bytes each are one read, not several
    each starting helpers."""
    weights = {run: sum(r.size - r.start for r in ranges) for run, ranges in grown.items()}
    costs = {run: size + min(size, run_bytes) for run, size in weights.items()}
    chunks = chunk_requests(dict.fromkeys(grown, ()), weights, limit, costs=costs)
    return [c._replace(ranges=tuple(r for run in c.runs for r in grown[run])) for c in chunks]


def _keep_event(
    by_tag: dict[str, Series],
    places: dict[tuple[str, str], list[tuple[int, int, int]]],
    run: str,
    path: str,
    file: int,
    offset: int,
    item: Any,
    timeline: dict[str, bool],
) -> None:
    """One record's timeline tensors kept (``item``: its data, or its tensors read in C
    already, a tuple; ``file``: ``path``'s position among the read's; ``timeline``: tags
    known to be a timeline kind's or not)."""
    found = item if type(item) is tuple else _record_tensors(path, offset, item)
    if found is None:
        return
    step, values = found
    for tag, record in values:
        known = timeline.get(tag)
        if known is None:
            known = timeline[tag] = contract.kind_of_tag(tag) is not None
        if known:
            kept = by_tag.get(tag)
            if kept is None:
                kept = by_tag[tag] = Series([], [])
                places[(run, tag)] = []
            kept.steps.append(step)
            kept.records.append(record)
            places[(run, tag)].append((step, file, offset))


def _record_tensors(path: str, offset: int, data: bytes) -> _Tensors | None:
    """A record's step and its tensors under timeline tags, each as ``(tag, (strings,
    wall_time, batched))``; None when it holds no ``Event`` (logged). The C reader takes the
    common case, far faster; protobuf the rest, and everything when C is not built."""
    if _string_tensors is not None:
        found = _string_tensors(data, _NEEDLE)
        if found is not None:
            return found
    return _parsed_tensors(path, offset, data)


def _parsed_tensors(path: str, offset: int, data: bytes) -> _Tensors | None:
    """:func:`_record_tensors` by protobuf."""
    event = readers.parse_event(path, offset, data)
    if event is None:
        return None
    return event.step, [
        (value.tag, tensor_strings(value.tensor, event.wall_time))
        for value in event.summary.value
        if value.tag.startswith(contract.TIMELINE_PREFIX) and value.HasField("tensor")
    ]


def _local_logdir(flags: Any) -> str | None:
    if os.environ.get(ENV, "").strip() == "0":
        return None
    logdir = getattr(flags, "logdir", "") or ""
    if not logdir or getattr(flags, "logdir_spec", "") or fs.is_remote(logdir):
        return None
    return os.path.abspath(os.path.expanduser(logdir))


def sampling(flags: Any) -> int:
    """How many of each timeline series' records TensorBoard keeps unless the user said: the
    newest alone when the plugin reads the files itself, else all of them (0): a timeline with
    holes would mislead."""
    return 0 if _local_logdir(flags) is None else 1
