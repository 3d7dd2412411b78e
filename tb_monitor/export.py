"""Exports of a logdir: a Chrome/Perfetto trace, JSON lines of events, or the scalars as CSV.

    tb-monitor export LOGDIR --format {chrome-trace,jsonl,csv} -o FILE   (``tb_monitor.cli.export``)

- ``chrome-trace``: the Trace Event Format that Perfetto and ``chrome://tracing`` open. One process
  per node (job and host), one thread per lane (``tb_monitor.timeline.lane_of``): intervals (``timeline.spans``) as
  complete events (``"X"``), everything else as thread-scoped instant events (``"i"``), times in
  microseconds since the epoch, every field of the event in ``args``. As on the Timeline tab
  (``tb_monitor.analysis.restarts``), a failed attempt's root cause is named by its reason
  (``attempt 0: ValueError: ...``) and the ranks that went down with it read
  ``attempt 0: stopped by restart``.
- ``jsonl``: one timeline event per line, ``{"run", "kind", "wall_time", "event"}`` where ``event``
  is the object torch serialized (``Event.serialize()`` / ``RdzvEvent.serialize()``), untouched:
  ``Event.deserialize(json.dumps(line["event"]))`` gives torch's event back.
- ``csv``: the scalars, columns ``run, tag, step, wall_time, value``.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

from tb_monitor.analysis.restarts import attempts, mark_restarts
from tb_monitor.logdir import fs, readers
from tb_monitor.progress import progress as _progress
from tb_monitor.timeline import Lane, Span, spans

__all__ = [
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


def write_jsonl(
    logdir: str | os.PathLike[str],
    out: str | os.PathLike[str] | IO[str],
    *,
    progress: bool | None = None,
) -> int:
    """Write one line per timeline event, in time order: ``{"run", "kind", "wall_time", "event"}``.

    ``event`` is torch's own JSON object for the event. Returns the number of lines.
    """
    records = _collect(logdir, readers.iter_timeline, "timeline events", progress)
    records.sort(key=lambda record: record.wall_time)
    written = 0
    with _opened(out) as stream, _progress("jsonl", len(records), progress) as advance:
        for record in records:
            try:
                event = json.loads(record.payload)
            except ValueError:  # as the other formats, the plugin and the readers do
                _log.warning("run %r: unreadable %s record left out", record.run, record.kind)
                advance()
                continue
            line = {"run": record.run, "kind": record.kind, "wall_time": record.wall_time}
            line["event"] = event
            stream.write(json.dumps(line, separators=(",", ":")) + "\n")
            written += 1
            advance()
    return written


_CSV_COLUMNS = ("run", "tag", "step", "wall_time", "value")


def write_csv(
    logdir: str | os.PathLike[str],
    out: str | os.PathLike[str] | IO[str],
    *,
    progress: bool | None = None,
) -> int:
    """Write the logdir's scalars as CSV (``run, tag, step, wall_time, value``); returns rows."""
    rows = _collect(logdir, readers.iter_scalars, "scalars", progress)
    with _opened(out, newline="") as stream, _progress("csv", len(rows), progress) as advance:
        writer = csv.writer(stream)
        writer.writerow(_CSV_COLUMNS)
        for row in rows:
            writer.writerow(row)
            advance()
    return len(rows)


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
    path = os.fspath(logdir)
    if not fs.isdir(path):
        raise ValueError(f"logdir {path!r} does not exist or is not a directory")
    rows = []
    with _progress("read", None, progress) as advance:
        for row in read(path):
            rows.append(row)
            advance()
    if not rows:
        raise ValueError(f"logdir {path!r} holds no {what}")
    return rows


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
