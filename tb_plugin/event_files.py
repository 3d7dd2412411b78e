"""Timeline records read from the event files themselves, not from TensorBoard's data server.

The data server keeps a copy of every record a plugin asks it to keep, ~900 bytes each beside
the payload (a 1,024-node day's 300k timeline records: ~0.55 GiB of its memory), and then hands
them over by gRPC. So when TensorBoard reads a local ``--logdir``, the plugin reads its records
from the event files itself: each file from where its last read ended, whole records only (a
torn tail waits for the next read: the writer may still be writing it), the records of other
plugins passed over unparsed. The data server then keeps only each timeline series' newest
record (``samples_per_plugin`` 1, :func:`sampling`), which is all its listing needs: the
listing still says which series grew, and so which runs to read.

Reading is pure (:func:`read_ranges`: ranges in, records out, with where each file's next read
starts), so the helper processes of a big read run it too (:mod:`tb_plugin.read_workers`); the
offsets are the store's and move on only as a chunk is kept (:meth:`EventFiles.advance`).

``TB_MONITOR_READ_FILES=0`` reads through the data provider instead (every record kept by the
data server, as before); so do a remote logdir and ``--logdir_spec``, whose run names are the
data server's to map.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from tb_monitor import contract
from tb_monitor.logdir import fs, readers, tfrecord
from tb_plugin.ingest import DecodedChunk, decode_chunk
from tb_plugin.provider_store import ChunkRequest
from tb_plugin.records import Series, tensor_strings

__all__ = [
    "ENV",
    "EventFiles",
    "FileRange",
    "FilesRead",
    "decode_files",
    "read_ranges",
    "sampling",
]

#: ``TB_MONITOR_READ_FILES=0``: read timeline records through TensorBoard's data provider.
ENV = "TB_MONITOR_READ_FILES"
_NEEDLE = contract.TIMELINE_PREFIX.encode()  # bytes every timeline record holds
_log = logging.getLogger(__name__)


class FileRange(NamedTuple):
    """What to read of one event file of a run: its bytes from ``start`` (a record's first) on."""

    run: str
    path: str
    start: int


class FilesRead(NamedTuple):
    """Timeline records read from files (``{run: {tag: Series}}``, each series in step order)
    and, per file, where its next read starts."""

    series: dict[str, dict[str, Series]]
    ends: dict[str, int]


class EventFiles:
    """The event files of a local logdir's runs, and where the next read of each starts."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self._ends: dict[str, int] = {}  # path -> the offset its next read starts from

    @classmethod
    def of_flags(cls, flags: Any) -> EventFiles | None:
        """The files of TensorBoard's ``--logdir`` when the plugin reads them itself (a local
        logdir, no ``--logdir_spec``, ``TB_MONITOR_READ_FILES`` not 0), else None."""
        logdir = _local_logdir(flags)
        return None if logdir is None else cls(logdir)

    def directory(self, run: str) -> str:
        """The directory of a run as TensorBoard names it (relative, ``/``-separated; ``.``)."""
        return self.logdir if run == "." else os.path.join(self.logdir, *run.split("/"))

    def ranges(self, runs: Iterable[str]) -> list[FileRange]:
        """What grew of ``runs``' event files since they were last read (advanced), each run's
        files in TensorBoard's order. A file now shorter than what was read of it was replaced:
        it is read again from its start (records already kept are known by their steps)."""
        out = []
        for run in runs:
            directory = self.directory(run)
            sizes = fs.listing(directory)
            for name in sorted(n for n in sizes if fs.is_event_file(n)):
                path = os.path.join(directory, name)
                start = self._ends.get(path, 0)
                if sizes[name] < start:
                    start = 0
                if sizes[name] > start:
                    out.append(FileRange(run, path, start))
        return out

    def advance(self, ends: dict[str, int]) -> None:
        """Files read up to ``ends`` (path -> offset): their next reads start there."""
        self._ends.update(ends)

    def read_series(self, run: str, tag: str) -> Series | None:
        """Every record of one series, from its run's files whole (the details panel's
        read-back); None when the run holds none."""
        sizes = fs.listing(self.directory(run))
        names = sorted(n for n in sizes if fs.is_event_file(n))
        found = read_ranges(FileRange(run, os.path.join(self.directory(run), n), 0) for n in names)
        return found.series.get(run, {}).get(tag)


def read_ranges(ranges: Iterable[FileRange]) -> FilesRead:
    """The timeline records in ``ranges`` (whole records only; damage is skipped, logged by
    ``tfrecord``) and where each file's next read starts. A file gone since it was listed is
    passed over (a warning): nothing of it is read."""
    series: dict[str, dict[str, Series]] = {}
    ends: dict[str, int] = {}
    for found in ranges:
        try:
            read = tfrecord.read_records_from(found.path, found.start, needle=_NEEDLE)
            records, ends[found.path] = read
        except OSError as exc:
            _log.warning("%s: not read (%s); read again at the next refresh", found.path, exc)
            continue
        by_tag = series.setdefault(found.run, {})
        for offset, data in records:
            _keep_event(by_tag, found.path, offset, data)
    for by_tag in series.values():
        for tag, kept in by_tag.items():
            by_tag[tag] = _in_step_order(kept)
    return FilesRead(series, ends)


def decode_files(chunk: ChunkRequest, last: Mapping[tuple[str, str], int]) -> DecodedChunk:
    """A chunk's file ranges read and decoded (``last``: each series' step already kept):
    every timeline series found in them, whichever of the run's series the listing said grew."""
    found = read_ranges(chunk.ranges)
    tags = sorted({tag for by_tag in found.series.values() for tag in by_tag})
    decoded = decode_chunk(found.series, chunk.runs, tags, last)
    decoded.ends = found.ends
    return decoded


def _keep_event(by_tag: dict[str, Series], path: str, offset: int, data: bytes) -> None:
    event = readers.parse_event(path, offset, data)
    if event is None:
        return
    for value in event.summary.value:
        if contract.kind_of_tag(value.tag) is not None and value.HasField("tensor"):
            kept = by_tag.get(value.tag)
            if kept is None:
                kept = by_tag[value.tag] = Series([], [])
            kept.steps.append(event.step)
            kept.records.append(tensor_strings(value.tensor, event.wall_time))


def _in_step_order(series: Series) -> Series:
    """A series sorted by step as the data provider hands it over (a file written after
    another may hold earlier steps); stable, so records of one step keep their file order."""
    steps = series.steps
    if all(a <= b for a, b in zip(steps, steps[1:], strict=False)):
        return series
    order = sorted(range(len(steps)), key=steps.__getitem__)
    return Series([steps[i] for i in order], [series.records[i] for i in order])


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
