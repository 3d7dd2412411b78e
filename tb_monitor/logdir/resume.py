"""Where a restarted writer continues: each tag's next step, read back in one small request.

Steps continue per (run, tag) across restarts (``docs/DESIGN.md``, "Steps"), so a new writer must
know the largest step its run already holds. Reading every event file back costs seconds on a
big run and downloads all of it from an object store; instead each writer keeps a *steps file*
beside its event file and rewrites it as it writes (``StepsFile``: locally by a rename, on an
object store from a thread of its own; the writer's side is ``tb_monitor.sinks.steps``):

    events.out.tfevents.<...>.tbm    the event file (its objects, on a store)
    events.out.tbmsteps.<...>.tbm    {"version": 1, "steps": {tag: next step},
                                      "covers": {event file: end of the records its steps include}}

A steps file's name has no ``tfevents``, so TensorBoard, our readers and the plugin never list
it. Its ``steps`` include what the writer resolved when it started, so its ``covers`` name every
event file it accounts for, each up to a byte offset (header included; on a store, offsets count
the stream's bytes as if its objects were one file).

``resolve`` lists the run once, reads the newest steps files until every event file is covered
(one small request when one process writes the run), and reads only what no steps file covers:
the records after a covered offset (a writer killed between a write and its steps file's update)
or, with no steps file at all (an old logdir, a crash before the first update), the whole file.
So a steps file that lags never makes steps repeat, and one that runs ahead (its file's last
upload lost) only leaves a gap. Damage in a tail falls back to reading that file whole with
the readers' tolerant reader. Whatever else a restart must continue belongs in the same document
(a new key, and a new ``version``).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tb_monitor.logdir import fs, objects, tfrecord

__all__ = [
    "STEPS_MARK",
    "Resumed",
    "StepsFile",
    "basename",
    "resolve",
    "steps_name",
]

#: Stands for ``tfevents`` in a steps file's name, so that no event-file reader lists it.
STEPS_MARK = "tbmsteps"
_VERSION = 1

_log = logging.getLogger(__name__)
_SEGMENTED = re.compile(r"^(?P<base>.+)\.s\d{6}(?:\.d\d{4})?$")
_LENGTH = struct.Struct("<QI")
_CRC = struct.Struct("<I")


def basename(path: str) -> str:
    """The name of the file at ``path`` (a local path or a URL)."""
    return (posixpath if fs.is_remote(path) else os.path).basename(path)


def steps_name(event_file: str) -> str:
    """The steps file of ``event_file`` (a name, path or URL): ``tfevents`` becomes ``tbmsteps``
    in its name."""
    split = posixpath.split if fs.is_remote(event_file) else os.path.split
    head, name = split(event_file)
    name = name.replace(fs.EVENT_FILE_MARK, STEPS_MARK, 1)
    return fs.join(head, name) if head else name


@dataclass
class Resumed:
    """What a new writer continues from: each tag's next step, and what that accounts for."""

    steps: dict[str, int] = field(default_factory=dict)
    #: Event file name -> the offset up to which its records are included in ``steps``.
    covers: dict[str, int] = field(default_factory=dict)
    #: The run's last event file in name order besides the caller's own ("" when none).
    last: str = ""


@dataclass
class _Part:
    """One stored piece of an event file: its own file, or one object of a stream."""

    name: str
    start: int  # where its records begin in the event file's offsets
    skip: int  # bytes of the piece before them (an object's repeated header)
    size: int


def resolve(run_dir: str, header_bytes: int, own: str | None = None) -> Resumed:
    """Each tag's next step in ``run_dir``, reading steps files first and the rest only where
    they fall short (see the module docstring). ``header_bytes``: the length of the header that
    starts each object of a stream; ``own``: the caller's own new event file, left out."""
    sizes = fs.listing(run_dir)
    files = _event_files(sizes, header_bytes)
    files.pop(own, None)
    resumed = Resumed(last=max(files, default=""))
    for name in sorted(files, reverse=True):  # the newest first: they cover the older ones
        if resumed.covers.get(name, 0) >= _length(files[name]):
            continue
        sidecar = steps_name(name)
        if sidecar in sizes:
            _merge(resumed, _read_state(fs.join(run_dir, sidecar)))
    for name, parts in files.items():
        start = resumed.covers.get(name, 0)
        if start < _length(parts):
            resumed.covers[name] = _read_tail(run_dir, parts, start, resumed.steps)
    resumed.covers = {name: end for name, end in resumed.covers.items() if name in files}
    return resumed


def _length(parts: list[_Part]) -> int:
    last = parts[-1]
    return last.start + last.size - last.skip


def _event_files(sizes: dict[str, int], header_bytes: int) -> dict[str, list[_Part]]:
    """The run's event files, each as its pieces in order (a stream's segments and deltas)."""
    live = objects.live_objects(n for n in sizes if fs.is_event_file(n) or objects.is_delta(n))
    files: dict[str, list[_Part]] = {}
    for name in live:
        match = _SEGMENTED.match(name.replace(objects.DELTA_MARK, fs.EVENT_FILE_MARK, 1))
        if match is None:
            files[name] = [_Part(name, 0, 0, sizes[name])]
            continue
        parts = files.setdefault(match["base"], [])
        start = _length(parts) if parts else header_bytes
        parts.append(_Part(name, start, header_bytes, sizes[name]))
    return files


def _merge(resumed: Resumed, state: Resumed | None) -> None:
    if state is None:
        return
    steps, covers = resumed.steps, resumed.covers
    for tag, step in state.steps.items():
        if steps.get(tag, 0) < step:
            steps[tag] = step
    for name, end in state.covers.items():
        if covers.get(name, 0) < end:
            covers[name] = end


def _read_state(path: str) -> Resumed | None:
    """A steps file's contents, or None (with a debug line) when it is missing or unreadable."""
    try:
        state = json.loads(fs.read_bytes(path, 0))
        steps, covers = state["steps"], state["covers"]
        if state["version"] != _VERSION or not _ints(steps) or not _ints(covers):
            raise ValueError("not a steps file of this version")
    except (OSError, ValueError, TypeError, KeyError) as exc:
        _log.debug("tb_monitor: ignoring the steps file %s (%s)", path, exc)
        return None
    return Resumed(steps, covers)


def _ints(mapping: Any) -> bool:
    return isinstance(mapping, dict) and all(
        isinstance(k, str) and type(v) is int for k, v in mapping.items()
    )


def _read_tail(run_dir: str, parts: list[_Part], start: int, steps: dict[str, int]) -> int:
    """Fold the steps of the records from offset ``start`` on into ``steps``; the offset after
    the last whole record read. Damage (or a ``start`` that is no record's) reads it all again."""
    end = start
    try:
        for part in parts:
            stop = part.start + part.size - part.skip
            if stop <= start:
                continue
            offset = part.skip + max(0, start - part.start)
            data = fs.read_bytes(fs.join(run_dir, part.name), offset)
            end = part.start + offset - part.skip + _fold(data, steps)
    except _Damaged:
        return _read_whole(run_dir, parts, steps)
    return end


def _read_whole(run_dir: str, parts: list[_Part], steps: dict[str, int]) -> int:
    """Fold every record the readers' tolerant reader finds (``tfrecord``: damage skipped and
    logged, lengths resynchronised); the offset after the last one."""
    end = 0
    for part in parts:
        for offset, data in tfrecord.iter_records_at(fs.join(run_dir, part.name)):
            _fold_event(data, steps)
            end = part.start + offset + len(data) + _LENGTH.size + _CRC.size - part.skip
    return end


class _Damaged(Exception):
    """A record whose checksum fails where a whole record was expected."""


def _fold(buffer: bytes, steps: dict[str, int]) -> int:
    """Fold each whole record's tags into ``steps``; bytes up to the end of the last one."""
    end = 0
    for end, data in _records(buffer):  # noqa: B007  # the last end is the result
        _fold_event(data, steps)
    return end


def _fold_event(data: bytes, steps: dict[str, int]) -> None:
    """One above the event's step, for each of its tags, unless ``steps`` has more."""
    try:
        event = event_pb2.Event.FromString(data)
    except DecodeError:
        return  # not an Event: no steps in it (the readers count it as damage)
    step = event.step + 1
    for value in event.summary.value:
        if steps.get(value.tag, 0) < step:
            steps[value.tag] = step


def _records(buffer: bytes) -> Iterator[tuple[int, bytes]]:
    """``(end, data)`` of each whole record; a torn last record ends it, damage raises."""
    offset, size, crc = 0, len(buffer), tfrecord.masked_crc32c
    while size - offset >= _LENGTH.size:
        length, length_crc = _LENGTH.unpack_from(buffer, offset)
        if crc(buffer[offset : offset + 8]) != length_crc:
            raise _Damaged(offset)
        start = offset + _LENGTH.size
        end = start + length + _CRC.size
        if end > size:
            return
        data = buffer[start : start + length]
        if crc(data) != _CRC.unpack_from(buffer, start + length)[0]:
            raise _Damaged(offset)
        offset = end
        yield offset, data


class StepsFile:
    """The steps file of one event file, rewritten as its writer goes (``update``).

    Locally each update replaces the file at once (a write and a rename, tens of µs). On an
    object store a thread of its own puts the latest contents at most every ``interval`` seconds,
    so the writer's thread never waits on the network; a failed put is retried with the next.
    A steps file that cannot be written only makes the next writer read more (quietly: the
    event file's own writes report storage faults).
    """

    def __init__(self, event_file: str, interval: float) -> None:
        self.path = steps_name(event_file)
        self._remote = fs.is_remote(event_file)
        self._interval = interval
        self._cond = threading.Condition(threading.Lock())
        self._latest: bytes | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def update(self, steps: dict[str, int], covers: dict[str, int]) -> None:
        """Record that the records up to ``covers`` (event file name -> offset) give ``steps``."""
        state = {"version": _VERSION, "steps": steps, "covers": covers}
        data = json.dumps(state, separators=(",", ":")).encode()
        if not self._remote:
            try:
                fs.replace_file(self.path, data)
            except OSError as exc:
                _log.debug("tb_monitor: cannot write %s (%s)", self.path, exc)
            return
        with self._cond:
            self._latest = data
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._upload, name="tb_monitor-steps", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def close(self, timeout: float) -> None:
        """Put the latest contents (waiting ``timeout`` seconds at most) and stop."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def abandon(self) -> None:
        """In a forked child: the uploader did not survive the fork; put nothing more."""
        self._thread, self._latest, self._closing = None, None, True

    def _upload(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._latest is not None or self._closing)
                data, self._latest = self._latest, None
            failed = False
            if data is not None:
                try:
                    fs.replace_file(self.path, data)
                except Exception as exc:
                    _log.debug("tb_monitor: cannot put %s (%s)", self.path, exc)
                    failed = True
            with self._cond:
                if failed and self._latest is None:
                    self._latest = data  # retried with the next update, or at close
                if self._closing and (failed or self._latest is None):
                    return
                self._cond.wait_for(lambda: self._closing, timeout=self._interval)
