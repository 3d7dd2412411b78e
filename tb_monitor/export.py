"""Exports of a logdir: a Chrome/Perfetto trace, JSON lines of events, or the scalars as CSV.

    tb-monitor export LOGDIR --format {chrome-trace,jsonl,csv} -o FILE   (``tb_monitor.cli.export``)

- ``chrome-trace``: the Trace Event Format that Perfetto and ``chrome://tracing`` open. One process
  per node (job and host), one thread per lane (``tb_monitor.timeline.lane_of``): intervals (``timeline.spans``) as
  complete events (``"X"``), everything else as thread-scoped instant events (``"i"``), times in
  microseconds since the epoch, every field of the event in ``args``. As on the Timeline tab
  (``tb_monitor.analysis.restart_marks``), a failed attempt's root cause is named by its reason
  (``attempt 0: ValueError: ...``) and the ranks that went down with it read
  ``attempt 0: stopped by restart``.
- ``jsonl``: one timeline event per line, ``{"run", "kind", "wall_time", "event"}`` where ``event``
  is the object torch serialized (``Event.serialize()`` / ``RdzvEvent.serialize()``), untouched:
  ``Event.deserialize(json.dumps(line["event"]))`` gives torch's event back.
- ``csv``: the scalars, columns ``run, tag, step, wall_time, value``.

Memory stays bounded on a big job (a day of a large job, whose rows as one list would not fit).
Every format also holds the event file being read (the readers read a file whole).

- ``csv`` holds nothing: rows go to the output as ``readers.iter_scalars`` yields them.
- ``jsonl`` holds ``chunk_lines`` rendered lines (:data:`CHUNK_LINES`):
  an external merge sort spills each sorted chunk to a temporary file (temporary files as large
  as the output, removed afterwards) and merges them, so its memory does not grow with the job.
- ``chrome-trace`` holds every event: the Trace Event Format is one JSON object, and Perfetto
  cannot open a trace over ~2 GB anyway. It is meant for jobs Perfetto can open (hours of a few
  hundred nodes, or a window of a day); export a day as ``jsonl``.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import json
import logging
import math
import operator
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Any, TypeVar

from tb_monitor.analysis.attempts import attempts
from tb_monitor.analysis.restart_marks import mark_restarts
from tb_monitor.logdir import fs, readers
from tb_monitor.progress import progress as _progress
from tb_monitor.timeline import Lane, Span, spans

__all__ = [
    "CHUNK_LINES",
    "FORMATS",
    "WRITERS",
    "to_chrome_trace",
    "write_chrome_trace",
    "write_csv",
    "write_jsonl",
]

#: Output formats of ``tb-monitor export``.
FORMATS = ("chrome-trace", "jsonl", "csv")

_log = logging.getLogger(__name__)
T = TypeVar("T")
_US = 1_000_000


# ---------------------------------------------------------------------------------------------
# Chrome / Perfetto trace
# ---------------------------------------------------------------------------------------------


def to_chrome_trace(logdir: str | os.PathLike[str], *, progress: bool | None = None) -> dict:
    """The logdir's timeline as a Trace Event Format object (``{"traceEvents": [...], ...}``).

    Raises ValueError naming the logdir when it does not exist or holds no timeline events.
    ``progress`` shows a bar on stderr (default: when stderr is a terminal or the logdir is large).
    """
    records = _collect(logdir, readers.iter_timeline, "timeline events", progress)
    rows = list(readers.decode_timeline(records))
    marks = spans(rows)
    marks = mark_restarts(marks, attempts(rows, marks))
    hosts: dict[Lane, str] = {}
    for span in marks:
        if not hosts.get(span.lane):
            hosts[span.lane] = str(span.rows[0].get("hostname") or "")
    pids: dict[tuple[str, str], int] = {}
    tids: dict[Lane, tuple[int, int]] = {}
    meta: list[dict[str, Any]] = []
    for lane in sorted(hosts, key=Lane.sort_key):
        node = (lane.group, hosts[lane])
        if node not in pids:
            pids[node] = len(pids) + 1
            label = " · ".join(part for part in node if part)
            meta.append(_metadata("process_name", pids[node], None, {"name": label}))
            meta.append(
                _metadata("process_sort_index", pids[node], None, {"sort_index": pids[node]})
            )
        tids[lane] = (pids[node], len(tids) + 1)
        meta.append(_metadata("thread_name", *tids[lane], {"name": f"{lane.kind}: {lane.label}"}))
        meta.append(_metadata("thread_sort_index", *tids[lane], {"sort_index": tids[lane][1]}))
    events = []
    with _progress("trace", len(marks), progress) as advance:
        for span in marks:
            events.append(_trace_event(span, *tids[span.lane]))
            advance()
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {"source": "tb-monitor", "logdir": os.fspath(logdir)},
    }


def write_chrome_trace(
    logdir: str | os.PathLike[str],
    out: str | os.PathLike[str] | IO[str],
    *,
    progress: bool | None = None,
) -> int:
    """Write :func:`to_chrome_trace` as JSON to a path or text stream; returns the event count."""
    trace = to_chrome_trace(logdir, progress=progress)
    text = json.dumps(trace, separators=(",", ":"))  # dumps uses the C encoder, dump does not
    with _opened(out) as stream:
        stream.write(text)
    return len(trace["traceEvents"])


def _metadata(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _trace_event(span: Span, pid: int, tid: int) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": span.label,
        "cat": span.lane.kind,
        "ts": round(span.begin * _US),
        "pid": pid,
        "tid": tid,
    }
    if span.end is None:
        event.update(ph="i", s="t")
    else:
        event.update(ph="X", dur=max(0, round((span.end - span.begin) * _US)))
    first, *rest = span.rows
    if span.end is None:
        event["args"] = first  # the decoded record itself: every field, absent ones null
        return event
    event["args"] = dict(first)
    if rest:  # an interval drawn from two records: the one that ends it comes under "end"
        event["args"]["end"] = rest[-1]
    if span.open:
        event["args"]["open"] = True
    return event


# ---------------------------------------------------------------------------------------------
# JSON lines and CSV
# ---------------------------------------------------------------------------------------------


#: Lines ``write_jsonl`` sorts in memory at once (a few hundred bytes each for torchelastic's
#: events); a logdir with more is sorted in chunks spilled to temporary files, then merged.
CHUNK_LINES = 200_000

#: Sorted chunks merged at once: open files, each with its read buffer. More are merged in rounds.
_FAN_IN = 128

#: A buffered line: (wall time, read sequence, the line without its newline).
_Line = tuple[float, int, str]
_WALL_TIME = operator.itemgetter(0)


def write_jsonl(
    logdir: str | os.PathLike[str],
    out: str | os.PathLike[str] | IO[str],
    *,
    progress: bool | None = None,
    chunk_lines: int = CHUNK_LINES,
) -> int:
    """Write one line per timeline event, in time order: ``{"run", "kind", "wall_time", "event"}``.

    ``event`` is torch's own JSON object for the event. Returns the number of lines. Events of
    equal times keep their read order. At most ``chunk_lines`` lines are held in memory: a
    bigger logdir is sorted in chunks on disk and merged (the same output, in bounded memory),
    in a temporary directory as large as the output, where ``tempfile`` puts it (``TMPDIR``;
    a ``/tmp`` on tmpfs is memory), removed afterwards.
    """
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines must be at least 1, got {chunk_lines!r}")
    path = _existing(logdir)
    with ExitStack() as stack:  # the temporary files and directory, removed even on error
        spilled: list[str] = []
        directory = ""
        buffer: list[_Line] = []
        read = 0
        render = _Lines()
        with _progress("read", None, progress) as advance:
            for record in readers.iter_timeline(path):
                read += 1
                advance()
                line = render(record)
                if line is None:
                    continue
                if len(buffer) == chunk_lines:  # only when one more comes: no spill if all fit
                    if not directory:
                        directory = stack.enter_context(
                            tempfile.TemporaryDirectory(prefix="tb-monitor-export-")
                        )
                    spilled.append(_spill(buffer, directory, len(spilled)))
                    buffer = []
                buffer.append((record.wall_time, read, line))
        if not read:
            raise ValueError(f"logdir {path!r} holds no timeline events")
        buffer.sort(key=_WALL_TIME)  # stable: equal times stay in read order
        total = len(buffer) + chunk_lines * len(spilled)  # every spilled chunk was full
        merged = 0
        while len(spilled) > _FAN_IN:  # the oldest (smallest) first, just enough of them
            group = spilled[: min(_FAN_IN, len(spilled) - _FAN_IN + 1)]
            del spilled[: len(group)]
            spilled.append(_merge_spilled(group, os.path.join(directory, f"merged-{merged:06d}")))
            merged += 1
        runs = [_spilled_lines(stack.enter_context(_open_spilled(name))) for name in spilled]
        with _opened(out) as stream, _progress("jsonl", total, progress) as advance:
            for _, _, line in heapq.merge(*runs, buffer):
                stream.write(line + "\n")
                advance()
    return total


class _Lines:
    """Records as JSON lines, without their newline: the text ``json.dumps`` gives for the whole
    line, with each distinct payload parsed and dumped once (a node's keep-alives, most of a big
    job's events, repeat one payload)."""

    def __init__(self) -> None:
        self.events: dict[str, str] = {}  # payload: its event's JSON
        self.heads: dict[tuple[str, str], str] = {}  # (run, kind): the line up to its time

    def __call__(self, record: readers.TimelineRecord) -> str | None:
        """The record's line; None (and a warning) when its payload is not JSON."""
        event = self.events.get(record.payload)
        if event is None:
            try:
                event = json.dumps(json.loads(record.payload), separators=(",", ":"))
            except ValueError:  # as the other formats, the plugin and the readers do
                _log.warning("run %r: unreadable %s record left out", record.run, record.kind)
                return None
            if len(self.events) >= 10_000:
                self.events.clear()
            self.events[record.payload] = event
        head = self.heads.get((record.run, record.kind))
        if head is None:
            if len(self.heads) >= 100_000:
                self.heads.clear()
            head = f'{{"run":{json.dumps(record.run)},"kind":{json.dumps(record.kind)},"wall_time":'
            self.heads[record.run, record.kind] = head
        wall_time = record.wall_time
        number = repr(wall_time) if math.isfinite(wall_time) else json.dumps(wall_time)
        return f'{head}{number},"event":{event}}}'


def _spill(buffer: list[_Line], directory: str, number: int) -> str:
    """Sort ``buffer`` and write it to a new file in ``directory``; the file's path.

    Each line is stored after its key, the time as ``float.hex`` (exact) and the read sequence,
    so that merging the files gives exactly the order of one sort in memory.
    """
    buffer.sort(key=_WALL_TIME)
    path = os.path.join(directory, f"chunk-{number:06d}")
    with _open_spilled(path, "w") as stream:
        _write_spilled(stream, buffer)
    return path


def _merge_spilled(names: list[str], path: str) -> str:
    """Merge sorted spilled files into a new one at ``path`` (and delete them); ``path``."""
    with ExitStack() as files, _open_spilled(path, "w") as stream:
        runs = [_spilled_lines(files.enter_context(_open_spilled(name))) for name in names]
        _write_spilled(stream, heapq.merge(*runs))
    for name in names:
        os.remove(name)
    return path


def _open_spilled(path: str, mode: str = "r") -> IO[str]:
    # Lines are ASCII (json.dumps escapes the rest) and hold no newline; no translation.
    return open(path, mode, encoding="utf-8", newline="\n")


def _write_spilled(stream: IO[str], lines: Iterable[_Line]) -> None:
    stream.writelines(
        f"{float.hex(float(wall_time))} {sequence} {line}\n" for wall_time, sequence, line in lines
    )


def _spilled_lines(stream: IO[str]) -> Iterator[_Line]:
    """The lines of a spilled file, with their keys, as they were buffered."""
    for text in stream:
        wall_time, sequence, line = text.split(" ", 2)
        yield float.fromhex(wall_time), int(sequence), line[:-1]


_CSV_COLUMNS = ("run", "tag", "step", "wall_time", "value")


def write_csv(
    logdir: str | os.PathLike[str],
    out: str | os.PathLike[str] | IO[str],
    *,
    progress: bool | None = None,
) -> int:
    """Write the logdir's scalars as CSV (``run, tag, step, wall_time, value``); returns rows.

    Rows are written as they are read, so memory does not grow with the logdir. The first one is
    read before the output is opened: a logdir without scalars leaves no file behind.
    """
    path = _existing(logdir)
    rows = readers.iter_scalars(path)
    first = next(rows, None)
    if first is None:
        raise ValueError(f"logdir {path!r} holds no scalars")
    written = 0
    with _opened(out, newline="") as stream, _progress("csv", None, progress) as advance:
        writer = csv.writer(stream)
        writer.writerow(_CSV_COLUMNS)
        for row in itertools.chain((first,), rows):
            writer.writerow(row)
            written += 1
            advance()
    return written


# ---------------------------------------------------------------------------------------------
# Reading, output and progress
# ---------------------------------------------------------------------------------------------


def _collect(
    logdir: str | os.PathLike[str],
    read: Callable[[str], Iterable[T]],
    what: str,
    progress: bool | None,
) -> list[T]:
    """Every row ``read(logdir)`` yields; ValueError naming the logdir when there are none."""
    path = _existing(logdir)
    rows = []
    with _progress("read", None, progress) as advance:
        for row in read(path):
            rows.append(row)
            advance()
    if not rows:
        raise ValueError(f"logdir {path!r} holds no {what}")
    return rows


def _existing(logdir: str | os.PathLike[str]) -> str:
    """The logdir's path; ValueError naming it when it is no directory."""
    path = os.fspath(logdir)
    if not fs.isdir(path):
        raise ValueError(f"logdir {path!r} does not exist or is not a directory")
    return path


@contextmanager
def _opened(out: str | os.PathLike[str] | IO[str], newline: str | None = None) -> Iterator[IO[str]]:
    if hasattr(out, "write"):
        yield out  # type: ignore[misc]
        return
    path = os.fspath(out)  # type: ignore[arg-type]
    if path == "-":
        yield sys.stdout
        return
    with open(path, "w", encoding="utf-8", newline=newline) as stream:
        yield stream


#: The writer of each format, by its name on the command line.
WRITERS = {"chrome-trace": write_chrome_trace, "jsonl": write_jsonl, "csv": write_csv}
