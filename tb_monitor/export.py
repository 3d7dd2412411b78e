"""Exports of a logdir: a Chrome/Perfetto trace, JSON lines of events, or the scalars as CSV.

    tb-monitor export LOGDIR --format {chrome-trace,jsonl,csv} -o FILE

- ``chrome-trace``: the Trace Event Format that Perfetto and ``chrome://tracing`` open. One process
  per node (job and host), one thread per lane (``tb_monitor.timeline.lane_of``): intervals (``timeline.spans``) as
  complete events (``"X"``), everything else as thread-scoped instant events (``"i"``), times in
  microseconds since the epoch, every field of the event in ``args``.
- ``jsonl``: one timeline event per line, ``{"run", "kind", "wall_time", "event"}`` where ``event``
  is the object torch serialized (``Event.serialize()`` / ``RdzvEvent.serialize()``), untouched:
  ``Event.deserialize(json.dumps(line["event"]))`` gives torch's event back.
- ``csv``: the scalars, columns ``run, tag, step, wall_time, value``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

from tb_monitor import readers
from tb_monitor.timeline import Lane, Span, spans

__all__ = [
    "FORMATS",
    "decode",
    "main",
    "to_chrome_trace",
    "write_chrome_trace",
    "write_csv",
    "write_jsonl",
]

#: Output formats of ``tb-monitor export``.
FORMATS = ("chrome-trace", "jsonl", "csv")

#: From this many records on, a progress bar is shown even when stderr is not a terminal.
LARGE = 50_000

_PROG = "tb-monitor export"
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
    marks = spans(decode(_collect(logdir, readers.iter_timeline, "timeline events", progress)))
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


def decode(records: Iterable[readers.TimelineRecord]) -> list[dict[str, Any]]:
    """Timeline records as flat rows (``readers.decode_timeline``), unreadable ones left out."""
    return list(readers.decode_timeline(records))


def _collect(
    logdir: str | os.PathLike[str],
    read: Callable[[str], Iterable[T]],
    what: str,
    progress: bool | None,
) -> list[T]:
    """Every row ``read(logdir)`` yields; ValueError naming the logdir when there are none."""
    path = os.fspath(logdir)
    if not os.path.isdir(path):
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


class _Bar:
    """A progress line on stderr, redrawn at most ten times a second."""

    def __init__(self, label: str, total: int | None, stream: IO[str]) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.done = 0
        self.tty = stream.isatty()
        self.next_draw = 0.0

    def advance(self) -> None:
        self.done += 1
        if self.done & 0x3FF == 0 and time.monotonic() >= self.next_draw:
            self.next_draw = time.monotonic() + (0.1 if self.tty else 2.0)
            self.draw()

    def draw(self, final: bool = False) -> None:
        if self.total:
            filled = 30 * self.done // self.total
            text = f"{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            text = f"{self.label}: {self.done}"
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + end)
        self.stream.flush()


@contextmanager
def _progress(label: str, total: int | None, enabled: bool | None) -> Iterator[Any]:
    """Yield an ``advance()`` callable; draws a bar when enabled (None: TTY or large)."""
    stream = sys.stderr
    if enabled is None:
        enabled = stream.isatty() or (total or 0) >= LARGE
    if not enabled:
        yield _noop
        return
    bar = _Bar(label, total, stream)
    yield bar.advance
    if bar.done:
        bar.draw(final=True)


def _noop() -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one clear line instead of usage + error
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_PROG, description=__doc__.splitlines()[0])
    parser.add_argument("logdir", help="TensorBoard logdir written by tb-monitor")
    parser.add_argument("--format", required=True, choices=FORMATS, help="output format")
    parser.add_argument("-o", "--output", required=True, help="output file ('-' for stdout)")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always show progress",
    )
    progress.add_argument(
        "--no-progress", dest="progress", action="store_false", help="never show progress"
    )
    return parser


_WRITERS = {"chrome-trace": write_chrome_trace, "jsonl": write_jsonl, "csv": write_csv}


def main(argv: Iterable[str] | None = None) -> int:
    """``tb-monitor export``: 0 on success, 2 with one line on stderr for bad input."""
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
        count = _WRITERS[args.format](args.logdir, args.output, progress=args.progress)
    except (_UsageError, ValueError, OSError) as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 2
    if args.output != "-":
        print(f"wrote {count} {args.format} records to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
