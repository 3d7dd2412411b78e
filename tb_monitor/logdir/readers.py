"""Reading a logdir back: scalars and timeline events, as iterators or pandas DataFrames.

The iterators need nothing beyond TensorBoard's protos, so exports and the plugin can reuse
them; ``read_scalars`` and ``read_events`` build DataFrames and need the ``pandas`` extra.
Records are checked with a C crc32c, so 100k records read in a fraction of a second (TensorBoard's
Python loader spends most of its time checksumming in Python). A torn record at the end of a file
(a killed or still-running writer) is skipped; see ``tb_monitor.logdir.tfrecord``.

A run is the directory holding the event files, relative to the logdir with ``/`` separators;
event files directly in the logdir belong to the run ``"."``, as TensorBoard names it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tb_monitor import contract
from tb_monitor.logdir import fs, tfrecord

if TYPE_CHECKING:
    import pandas

__all__ = [
    "EVENT_COLUMNS",
    "SCALAR_COLUMNS",
    "Scalar",
    "TimelineRecord",
    "decode_timeline",
    "iter_events",
    "iter_run_events",
    "iter_runs",
    "iter_scalars",
    "iter_timeline",
    "need_pandas",
    "read_events",
    "read_scalars",
]

_log = logging.getLogger(__name__)

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
    """One timeline record of one run: ``payload`` is the event's JSON as torch serialized it."""

    run: str
    wall_time: float
    step: int
    kind: str
    payload: str


def iter_runs(logdir: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """``(run, directory)`` for every directory under ``logdir`` holding event files, sorted."""
    return fs.run_dirs(os.fspath(logdir))


def iter_run_events(run_dir: str | os.PathLike[str]) -> Iterator[event_pb2.Event]:
    """Every intact ``Event`` of one run directory, file by file in TensorBoard's order."""
    for path in fs.event_files(os.fspath(run_dir)):
        for offset, data in enumerate(tfrecord.iter_records(path)):
            try:
                yield event_pb2.Event.FromString(data)
            except DecodeError:
                _log.warning("%s: record %d is not an Event; skipping it", path, offset)


def iter_events(logdir: str | os.PathLike[str]) -> Iterator[tuple[str, event_pb2.Event]]:
    """``(run, Event)`` for every event of every run under ``logdir``."""
    for run, directory in iter_runs(logdir):
        for event in iter_run_events(directory):
            yield run, event


def iter_scalars(logdir: str | os.PathLike[str]) -> Iterator[Scalar]:
    """Every scalar point under ``logdir``: ``simple_value`` and scalar-plugin tensors."""
    scalar_tensor_tags: set[tuple[str, str]] = set()
    for run, event in iter_events(logdir):
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


def iter_timeline(logdir: str | os.PathLike[str]) -> Iterator[TimelineRecord]:
    """Every timeline record under ``logdir``, in file order (see ``tb_monitor.contract``)."""
    for run, event in iter_events(logdir):
        for value in event.summary.value:
            kind = contract.kind_of_tag(value.tag)
            if kind is None or not value.tensor.string_val:
                continue
            payload = value.tensor.string_val[0].decode("utf-8", "replace")
            yield TimelineRecord(run, event.wall_time, event.step, kind, payload)


def decode_timeline(records: Iterable[TimelineRecord]) -> Iterator[dict[str, Any]]:
    """Timeline records as flat rows: run, wall_time, kind, then ``contract.FIELDS``.

    A record that is not a JSON object is logged and left out.
    """
    for record in records:
        try:
            fields = contract.decode_record(record.kind, record.payload)
        except ValueError as exc:
            _log.warning("run %r: unreadable %s record: %s", record.run, record.kind, exc)
            continue
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


def read_scalars(logdir: str | os.PathLike[str]) -> pandas.DataFrame:
    """Every scalar under ``logdir``: columns run, tag, step, wall_time, value."""
    pd = need_pandas()
    frame = pd.DataFrame.from_records(list(iter_scalars(logdir)), columns=SCALAR_COLUMNS)
    return frame.astype({"step": "int64", "wall_time": "float64", "value": "float64"})


def read_events(logdir: str | os.PathLike[str]) -> pandas.DataFrame:
    """Every timeline event under ``logdir``, sorted by wall time.

    Columns: run, wall_time, kind, then ``tb_monitor.contract.FIELDS`` (name, source, state,
    hostname, pid, rank, local_id, run_id, message, error_trace, metadata), decoded from torch's
    JSON by ``contract.decode_record``.
    """
    pd = need_pandas()
    rows = list(decode_timeline(iter_timeline(logdir)))
    frame = pd.DataFrame.from_records(rows, columns=EVENT_COLUMNS)
    frame = frame.astype({"wall_time": "float64"})
    return frame.sort_values("wall_time", kind="stable", ignore_index=True)
