"""Exports of a logdir: a Chrome/Perfetto trace, JSON lines of events, or the scalars as CSV.

    tb-monitor export LOGDIR --format {chrome-trace,jsonl,csv} -o FILE

- ``chrome-trace``: the Trace Event Format that Perfetto and ``chrome://tracing`` open. One process
  per node (job and host), one thread per lane (:func:`lane_of`): intervals (:func:`spans`) as
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
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from tb_monitor import contract, readers

__all__ = [
    "END_STATES",
    "FORMATS",
    "Lane",
    "Span",
    "attempt_of",
    "decode",
    "lane_of",
    "main",
    "spans",
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
# The timeline model: lanes and spans, as the Timeline tab draws them
# ---------------------------------------------------------------------------------------------

#: States that end a worker's attempt (torchelastic's WorkerState values, and TERMINATED).
END_STATES = frozenset({"SUCCEEDED", "FAILED", "TERMINATED", "UNHEALTHY", "STOPPED"})
_ROUND = re.compile(r"\bround (\d+)\b")
_OPEN, _CLOSE, _NUMBER = "open", "close", "number"


@dataclass(frozen=True)
class Lane:
    """One swimlane: a node's rendezvous, an agent, a worker rank, or a run's other events."""

    group: str  # the job: its run id, else the run's top directory
    kind: str
    label: str
    key: tuple[Any, ...]  # what makes the lane one lane

    def sort_key(self) -> tuple[Any, ...]:
        """Jobs; then rendezvous, agents, workers, other events; then labels, numbers by value."""
        natural = tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", self.label))
        return (self.group, contract.KINDS.index(self.kind), natural)


@dataclass(frozen=True)
class Span:
    """A mark on a lane: an interval (``end`` set) or a point, with the records it stands for."""

    lane: Lane
    begin: float  # wall time, seconds since the epoch
    end: float | None
    label: str
    state: str | None  # what colours it: an interval's outcome, a point's own state
    number: int | None  # worker and agent marks: the attempt; a rendezvous round: its number
    rows: tuple[Mapping[str, Any], ...]
    open: bool = False  # an interval whose end has not been recorded (yet)


def lane_of(row: Mapping[str, Any]) -> Lane:
    """The lane of a decoded timeline record (``run``, ``kind`` and ``contract.FIELDS``).

    Rendezvous events: one lane per node (host, agent pid, local id); worker events: one lane per
    rank, the agent's records and the worker's own together; agent and other events: one lane
    per run.
    """
    run, kind = row["run"], row["kind"]
    group = str(row.get("run_id") or (run.split("/", 1)[0] if "/" in run else run or "."))
    base = run.rsplit("/", 1)[-1] if run else "."
    if kind == contract.RENDEZVOUS:
        host, pid, local = row.get("hostname"), row.get("pid"), row.get("local_id")
        extra = f", id {local}" if local not in (None, 0) else ""
        # A record made before the node had its local id (the store's INIT) says None: same node.
        return Lane(group, kind, f"{host} (pid {pid}{extra})", (host, pid, local or 0))
    if kind == contract.WORKER and row.get("rank") is not None:
        return Lane(group, kind, f"rank {row['rank']}", (row["rank"],))
    if kind == contract.AGENT and row.get("hostname") and "/" not in run:
        return Lane(group, kind, f"agent {row['hostname']}", (run,))
    return Lane(group, kind, base, (run,))


def attempt_of(row: Mapping[str, Any]) -> int | None:
    """The restart count a record was written in: the agent's or the worker's own."""
    metadata = row.get("metadata") or {}
    for key in ("agent_restarts", "restart_count"):
        value = metadata.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _role(row: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """Part a record plays in an interval, and its attempt or round number."""
    kind, state = row["kind"], row.get("state")
    if kind == contract.WORKER:
        role = _OPEN if state == "START" else _CLOSE if state in END_STATES else None
        return role, None  # a worker attempt's number comes from its agent's rendezvous round
    if kind == contract.RENDEZVOUS:
        message = row.get("message") or ""
        if state == "FAILED":
            role = _CLOSE
        elif "attempts to join the next round" in message:
            role = _OPEN
        elif "has joined round" in message:
            role = _CLOSE
        elif "as complete" in message:
            role = _NUMBER
        else:  # heartbeats and the like: most records, so no regex for them
            return None, None
        found = _ROUND.search(message)
        return role, int(found.group(1)) if found else None
    return None, None


def spans(rows: Iterable[Mapping[str, Any]]) -> list[Span]:
    """Every record as part of exactly one span, sorted by time.

    Intervals: a worker's attempt (START to its first end state), a node's rendezvous round (its
    join attempt to joining, or FAILED). A START before the previous attempt ended cuts that one
    short (state RUNNING); an interval still open at the end runs to the last record, ``open``.

    A worker attempt is numbered by the rendezvous round its agent joined before starting it:
    the round is the same on every node, while ``agent_restarts`` (and the workers'
    ``TORCHELASTIC_RESTART_COUNT``) counts only the agent's own failures, so an agent restarted
    by another node's failure reports its second attempt as 0. Without rendezvous records, the
    restart count is used.
    """
    ordered = sorted(rows, key=lambda row: row["wall_time"])
    rounds = _rounds_joined(ordered)
    by_lane: dict[Lane, list[Mapping[str, Any]]] = {}
    for row in ordered:
        by_lane.setdefault(lane_of(row), []).append(row)
    last = ordered[-1]["wall_time"] if ordered else 0.0
    out: list[Span] = []
    for lane, lane_rows in by_lane.items():
        opened: Mapping[str, Any] | None = None
        number: int | None = None
        for row in lane_rows:
            role, row_number = _role(row)
            if role == _OPEN:
                if opened is not None:
                    out.append(_interval(lane, opened, row["wall_time"], "RUNNING", number, ()))
                opened = row
                number = row_number if lane.kind == contract.RENDEZVOUS else _attempt(row, rounds)
            elif role == _CLOSE and opened is not None:
                number = row_number if row_number is not None else number
                out.append(
                    _interval(lane, opened, row["wall_time"], row.get("state"), number, (row,))
                )
                opened = None
            else:
                if role == _NUMBER and opened is not None and row_number is not None:
                    number = row_number
                out.append(_point(lane, row, _point_number(lane, row, number, rounds)))
        if opened is not None:
            out.append(_interval(lane, opened, last, "RUNNING", number, (), still_open=True))
    out.sort(key=lambda span: span.begin)
    return out


def _rounds_joined(rows: list[Mapping[str, Any]]) -> dict[str, list[tuple[float, int]]]:
    """Per run (agent), ``(time, round)`` of every rendezvous round it joined, in time order."""
    joined: dict[str, list[tuple[float, int]]] = {}
    for row in rows:
        if row["kind"] == contract.RENDEZVOUS:
            role, number = _role(row)
            if role == _CLOSE and number is not None and row.get("state") != "FAILED":
                joined.setdefault(row["run"], []).append((row["wall_time"], number))
    return joined


def _attempt(row: Mapping[str, Any], rounds: dict[str, list[tuple[float, int]]]) -> int | None:
    """A worker record's attempt: its agent's last round joined before it, else its restart count."""
    before = [number for t, number in rounds.get(row["run"], ()) if t <= row["wall_time"]]
    return before[-1] if before else attempt_of(row)


def _point_number(
    lane: Lane,
    row: Mapping[str, Any],
    lane_number: int | None,
    rounds: dict[str, list[tuple[float, int]]],
) -> int | None:
    """A point's attempt: on a worker lane the lane's latest, on an agent lane its round."""
    if lane.kind == contract.WORKER:
        return lane_number if lane_number is not None else attempt_of(row)
    if lane.kind == contract.AGENT:
        return _attempt(row, rounds)
    return None


def _point(lane: Lane, row: Mapping[str, Any], number: int | None) -> Span:
    name, state = str(row.get("name") or ""), row.get("state")
    if lane.kind == contract.RENDEZVOUS:
        label = name.rsplit(":", 1)[-1]  # "dynamic_rendezvous.py:Class.method" -> "Class.method"
    elif lane.kind in (contract.AGENT, contract.WORKER) and state:
        label = str(state)
    else:
        label = name
    return Span(lane, row["wall_time"], None, label, state, number, (row,))


def _interval(
    lane: Lane,
    opened: Mapping[str, Any],
    end: float,
    state: str | None,
    number: int | None,
    closing: tuple[Mapping[str, Any], ...],
    still_open: bool = False,
) -> Span:
    noun = "round" if lane.kind == contract.RENDEZVOUS else "attempt"
    label = noun if number is None else f"{noun} {number}"
    if lane.kind != contract.RENDEZVOUS and state:
        label += f": {state}"
    return Span(
        lane, opened["wall_time"], end, label, state, number, (opened, *closing), still_open
    )


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
    with _opened(out) as stream, _progress("jsonl", len(records), progress) as advance:
        for record in records:
            line = {
                "run": record.run,
                "kind": record.kind,
                "wall_time": record.wall_time,
                "event": json.loads(record.payload),
            }
            stream.write(json.dumps(line, separators=(",", ":")) + "\n")
            advance()
    return len(records)


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
