"""Reading a logdir back: scalars and timeline events, as iterators or pandas DataFrames.

The iterators need nothing beyond TensorBoard's protos, so exports and the plugin can reuse
them; ``read_scalars`` and ``read_events`` build DataFrames and need the ``pandas`` extra.
Records are checked with a C crc32c (TensorBoard's Python loader spends most of its time
checksumming in Python). A torn record at the end of a file
(a killed or still-running writer) is skipped; see ``tb_monitor.logdir.tfrecord``.

A run is the directory holding the event files, relative to the logdir with ``/`` separators;
event files directly in the logdir belong to the run ``"."``, as TensorBoard names it.

Damage is skipped, never fatal, and every whole record before and after it is kept: a record
whose checksums fail (see ``tfrecord``), a whole record that is not an ``Event`` (or is empty),
and a timeline record whose payload is not a JSON object. Each skip logs a warning naming the
file and byte offset. To count them, pass a :class:`DamageReport` to any reader and inspect it
afterwards, or let :func:`damage` read a whole logdir for you::

    report = readers.DamageReport()
    frame = readers.read_scalars(logdir, report=report)
    report.counts()  # {"data_crc": 1, "not_an_event": 2}: pieces skipped per reason
    for piece in report:  # Damage(path, offset, size, reason, detail)
        print(piece)

    print(readers.damage(logdir))  # every reason, every file of the logdir
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tb_monitor import _env, contract
from tb_monitor.logdir import fs, tfrecord
from tb_monitor.logdir.tfrecord import Damage, DamageReport

if TYPE_CHECKING:
    import pandas

__all__ = [
    "EVENT_COLUMNS",
    "Damage",
    "DamageReport",
    "SCALAR_COLUMNS",
    "Scalar",
    "TimelineRecord",
    "c_string_tensors",
    "damage",
    "decode_timeline",
    "events_frame",
    "iter_events",
    "iter_run_events",
    "iter_runs",
    "iter_scalars",
    "iter_timeline",
    "iter_timeline_rows",
    "need_pandas",
    "next_steps",
    "parse_event",
    "read_events",
    "read_scalars",
]

_log = logging.getLogger(__name__)

#: An Event's string tensors read in C (_string_tensors.c), used by the plugin's file reads;
#: where None, protobuf reads them all.
c_string_tensors = _env.c_twin("tb_monitor.logdir._string_tensors", "string_tensors")

_TIMELINE_BYTES = contract.TIMELINE_PREFIX.encode()

SCALAR_COLUMNS = ("run", "tag", "step", "wall_time", "value")
EVENT_COLUMNS = ("run", "wall_time", "kind", *contract.FIELDS)


class Scalar(NamedTuple):
    """One scalar point of one run."""

    run: str
    tag: str
    step: int
    wall_time: float
    value: float


class TimelineRecord(NamedTuple):
    """One timeline event of one run: ``payload`` is the event's JSON as torch serialized it.

    ``step`` is the step of the record holding it and ``index`` its place in that record (0 in
    a content-version-1 record, which holds one event).
    """

    run: str
    wall_time: float
    step: int
    kind: str
    payload: str
    index: int = 0


def iter_runs(logdir: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """``(run, directory)`` for every directory under ``logdir`` holding event files, sorted."""
    return fs.run_dirs(os.fspath(logdir))


def iter_run_events(
    run_dir: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[event_pb2.Event]:
    """Every intact ``Event`` of one run directory, file by file in TensorBoard's order."""
    for _, _, event in _iter_located_events(run_dir, report):
        yield event


def next_steps(run_dir: str | os.PathLike[str]) -> dict[str, int]:
    """For each tag the run directory already holds, one above its largest step (where a
    restarted writer continues its curves: ``docs/DESIGN.md``, "Steps"). It reads every record;
    the writer reads the run's steps files instead (``tb_monitor.logdir.resume``)."""
    steps: dict[str, int] = {}
    for event in iter_run_events(run_dir):
        step = event.step + 1
        for value in event.summary.value:
            if steps.get(value.tag, 0) < step:
                steps[value.tag] = step
    return steps


def _iter_located_events(
    run_dir: str | os.PathLike[str], report: DamageReport | None, needle: bytes = b""
) -> Iterator[tuple[str, int, event_pb2.Event]]:
    """``(file, byte offset, Event)`` of every intact event of one run directory; with a
    ``needle``, only of the records whose bytes contain it (the rest are not parsed)."""
    for path in fs.event_files(os.fspath(run_dir)):
        for offset, data in tfrecord.iter_records_at(path, report, needle):
            event = parse_event(path, offset, data, report)
            if event is not None:
                yield path, offset, event


def parse_event(
    path: str, offset: int, data: bytes, report: DamageReport | None = None
) -> event_pb2.Event | None:
    """The ``Event`` a whole record at ``offset`` of ``path`` holds; None (logged, and counted
    in ``report``) when it holds none (an empty record, or not an ``Event``)."""
    try:
        if not data:
            raise DecodeError("an empty record")
        return event_pb2.Event.FromString(data)
    except DecodeError as exc:
        _log.warning(
            "%s: the record at byte %d is not an Event (%s); skipping it", path, offset, exc
        )
        if report is not None:
            report.add(path, offset, len(data) + 16, tfrecord.NOT_AN_EVENT, str(exc))
        return None


def iter_events(
    logdir: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[tuple[str, event_pb2.Event]]:
    """``(run, Event)`` for every event of every run under ``logdir``."""
    for run, directory in iter_runs(logdir):
        for event in iter_run_events(directory, report):
            yield run, event


def iter_scalars(
    logdir: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[Scalar]:
    """Every scalar point under ``logdir``: ``simple_value`` and scalar-plugin tensors."""
    scalar_tensor_tags: set[tuple[str, str]] = set()
    for run, event in iter_events(logdir, report):
        step, wall_time = event.step, event.wall_time
        for value in event.summary.value:
            which = value.WhichOneof("value")
            if which == "simple_value":
                yield Scalar(run, value.tag, step, wall_time, value.simple_value)
            elif which == "tensor":
                # The scalars plugin's metadata may come only with a tag's first point.
                key = (run, value.tag)
                if value.metadata.plugin_data.plugin_name == "scalars":
                    scalar_tensor_tags.add(key)
                if key in scalar_tensor_tags:
                    yield Scalar(run, value.tag, step, wall_time, _tensor_scalar(value.tensor))


def _tensor_scalar(tensor: Any) -> float:
    from tensorboard.util import tensor_util

    return float(tensor_util.make_ndarray(tensor).item())


def iter_timeline(
    logdir: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[TimelineRecord]:
    """Every timeline event under ``logdir``, in file order (see ``tb_monitor.contract``): a
    record of several events (content versions 2 and 3) yields each of them.

    A batched record whose index does not describe its payloads is counted (``bad_payload``)
    and left out. Given a ``report``, each payload is also checked to be a JSON object here,
    where its file and offset are known: one that is not is counted and left out. Without one,
    payloads are not parsed here; ``decode_timeline`` leaves out the unreadable ones.
    """
    checked: dict[tuple[str, str], str | None] = {}
    for run, event, where, events in _timeline_records(logdir, report, objects=False):
        kind = where[1]
        for index, (wall_time, payload) in enumerate(events):
            if report is not None:
                key = (kind, payload)  # a batch stores a keep-alive's payload once
                if key not in checked:
                    if len(checked) > 100_000:
                        checked.clear()
                    fields = _decoded(kind, payload)  # kept: only why it does not decode
                    checked[key] = fields if type(fields) is str else None
                if checked[key] is not None:
                    _unreadable(report, event, where, checked[key])
                    continue
            yield TimelineRecord(run, wall_time, event.step, kind, payload, index)


def iter_timeline_rows(
    logdir: str | os.PathLike[str], report: DamageReport | None = None
) -> Iterator[dict[str, Any]]:
    """``decode_timeline(iter_timeline(logdir, report), report)``'s rows, read faster: a
    columnar record's events are decoded from the objects its columns rebuild (no JSON text
    made to be parsed again), each distinct one once. A payload that does not decode is left
    out, logged, and counted in ``report`` if given, as ``iter_timeline`` counts it."""
    texts: dict[tuple[str, str], dict[str, Any]] = {}  # keep-alives: one payload, decoded once
    for run, event, where, events in _timeline_records(logdir, report, objects=True):
        kind = where[1]
        objects: dict[int, dict[str, Any] | str] = {}  # this record's, by id: each decoded once
        for wall_time, payload in events:
            text = type(payload) is str
            fields = texts.get((kind, payload)) if text else objects.get(id(payload))
            if fields is None:
                fields = _decoded(kind, payload)
                if not text:
                    objects[id(payload)] = fields
                elif type(fields) is dict:
                    if len(texts) >= 10_000:
                        texts.clear()
                    texts[(kind, payload)] = fields
            if type(fields) is str:  # why it does not decode
                _unreadable(report, event, where, fields)
                continue
            yield {"run": run, "wall_time": wall_time, "kind": kind, **fields}


def _timeline_records(
    logdir: str | os.PathLike[str], report: DamageReport | None, objects: bool
) -> Iterator[tuple[str, Any, tuple[str, str, int, str, int], list[tuple[float, Any]]]]:
    """``(run, Event, where, events)`` of every timeline record under ``logdir``, in file
    order: ``where`` is ``(path, kind, offset, run, step)``, ``events`` each event's wall time
    and payload (``contract.record_events``, with ``objects``). A record whose index does not
    describe its payloads is logged, counted in ``report`` and left out."""
    for run, directory in iter_runs(logdir):
        # A record without the tag prefix's bytes is no timeline record: not parsed at all,
        # unless damage is being counted (a record that is no Event must be found).
        needle = _TIMELINE_BYTES if report is None else b""
        for path, offset, event in _iter_located_events(directory, report, needle):
            for value in event.summary.value:
                kind = contract.kind_of_tag(value.tag)
                if kind is None or not value.tensor.string_val:
                    continue
                where = (path, kind, offset, run, event.step)
                tensor = value.tensor
                try:
                    events = contract.record_events(
                        tensor.string_val,
                        event.wall_time,
                        bool(tensor.tensor_shape.dim),
                        objects=objects,
                    )
                except ValueError as exc:
                    _unreadable(report, event, where, f"ValueError: {exc}"[:300])
                    continue
                yield run, event, where, events


def _unreadable(
    report: DamageReport | None, event: Any, where: tuple[str, str, int, str, int], problem: str
) -> None:
    path, kind, offset, run, step = where
    _log.warning(
        "%s: the %s record at byte %d (run %r, step %d) is unreadable: %s; skipping it",
        path,
        kind,
        offset,
        run,
        step,
        problem,
    )
    if report is not None:
        report.add(path, offset, event.ByteSize() + 16, tfrecord.BAD_PAYLOAD, problem)


def _decoded(kind: str, payload: Any) -> dict[str, Any] | str:
    """A timeline payload's fields (``contract.decode_record``), or why it cannot be decoded."""
    try:
        return contract.decode_record(kind, payload)
    except (ValueError, TypeError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]


def decode_timeline(
    records: Iterable[TimelineRecord], report: DamageReport | None = None
) -> Iterator[dict[str, Any]]:
    """Timeline records as flat rows: run, wall_time, kind, then ``contract.FIELDS``.

    Rows of identical payloads share their ``metadata`` dict. A record that is not a JSON object is logged (by run, kind and step), counted in ``report``
    if given (``bad_payload``, its path being the run and its offset the step), and left out.
    """
    memo: dict[tuple[str, str], dict[str, Any]] = {}  # keep-alives: one payload, decoded once
    for record in records:
        key = (record.kind, record.payload)
        fields = memo.get(key)
        if fields is not None:
            yield {"run": record.run, "wall_time": record.wall_time, "kind": record.kind, **fields}
            continue
        try:
            fields = contract.decode_record(record.kind, record.payload)
        except (ValueError, TypeError, AttributeError) as exc:
            _log.warning(
                "run %r: unreadable %s record at step %d: %s",
                record.run,
                record.kind,
                record.step,
                exc,
            )
            if report is not None:
                size = len(record.payload.encode("utf-8", "replace"))
                report.add(record.run, record.step, size, tfrecord.BAD_PAYLOAD, str(exc)[:300])
            continue
        if len(memo) >= 10_000:
            memo.clear()
        memo[key] = fields
        yield {"run": record.run, "wall_time": record.wall_time, "kind": record.kind, **fields}


def need_pandas() -> Any:
    """The pandas module, or an ImportError saying which extra to install."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "tb_monitor's readers return pandas DataFrames; install the extra with "
            "pip install 'tb-monitor[pandas]'"
        ) from exc
    return pandas


def read_scalars(
    logdir: str | os.PathLike[str], *, report: DamageReport | None = None
) -> pandas.DataFrame:
    """Every scalar under ``logdir``: columns run, tag, step, wall_time, value.

    What is skipped as damaged is counted in ``report``, if given (see the module docstring).
    """
    pd = need_pandas()
    frame = pd.DataFrame.from_records(list(iter_scalars(logdir, report)), columns=SCALAR_COLUMNS)
    return frame.astype({"step": "int64", "wall_time": "float64", "value": "float64"})


def read_events(
    logdir: str | os.PathLike[str], *, report: DamageReport | None = None
) -> pandas.DataFrame:
    """Every timeline event under ``logdir``, sorted by wall time.

    Columns: run, wall_time, kind, then ``tb_monitor.contract.FIELDS`` (name, source, state,
    hostname, pid, rank, local_id, run_id, message, error_trace, metadata), decoded from torch's
    JSON by ``contract.decode_record``. What is skipped as damaged is counted in ``report``, if
    given (see the module docstring).
    """
    need_pandas()  # before any reading
    with _collector_paused():
        return events_frame(iter_timeline_rows(logdir, report))


def events_frame(rows: Iterable[dict[str, Any]]) -> pandas.DataFrame:
    """Timeline rows (``iter_timeline_rows``, ``decode_timeline``) as ``read_events``' DataFrame:
    its columns, sorted by wall time (stable: rows of one time keep their order)."""
    pd = need_pandas()
    frame = pd.DataFrame.from_records(list(rows), columns=EVENT_COLUMNS)
    frame = frame.astype({"wall_time": "float64"})
    return frame.sort_values("wall_time", kind="stable", ignore_index=True)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: a long job's millions of rows are new dicts,
    none in a cycle, which it would otherwise scan again and again (a third of the read)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def damage(logdir: str | os.PathLike[str]) -> DamageReport:
    """Read every record of ``logdir`` (and check every timeline payload); what was skipped.

    An empty report (falsy, ``len(report) == 0``) means every byte of every event file was read.
    """
    report = DamageReport()
    for _ in iter_timeline(logdir, report):
        pass
    return report
