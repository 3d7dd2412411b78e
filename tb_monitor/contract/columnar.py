"""Content versions 4 and 5: a timeline record's events as columns, a struct of arrays.

A rank-1 string tensor ``[index, values]``. Each event is a JSON object (as torch serializes
it); each top-level key is a *column*. ``values`` is a JSON object: ``shapes``, the key lists
the events have, in their own order, and ``columns``, per column the list of its distinct
values, first seen first; strings that share a long start and end (messages that differ in a
count) as ``{"affix": [start, end], "middles": [...]}``, each value ``start + middle + end``.
A node's keep-alive runs have the same ``values`` text record after record: a reader parses it
once. ``index`` is a JSON object:

- ``t0``, the first event's wall time, and the events' times in microseconds: version 5 writes
  ``dd_le32``, each event's after the one before it (little-endian uint32, one fewer than the
  events, base64; half the bytes of a run of keep-alives), and ``dt_le64``, each event's after
  ``t0`` as in versions 3 and 4 (little-endian int64, base64), where an event comes before the
  one before it or over 71 minutes after it. Either key reads in either version;
- ``shape_ix``: each event's shape (absent: all the first);
- ``ix``: per column whose value varies, each event's value position, ``len(values[column])``
  where the event lacks the key, as little-endian unsigned integers of 1, 2 or 4 bytes (as few
  as hold the positions), base64. A column left out of ``ix`` has one value, every event's.

An event's JSON is ``json.dumps`` of its object, so a reader gives back the text torch wrote,
byte for byte; the writer uses this version only when that holds for every event of a record
(else version 3). A reader parses two JSON documents a record, whatever its events: a node's
keep-alives share every value, its distinct rendezvous events all but their message.
"""

from __future__ import annotations

import array
import binascii
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tb_monitor import _env
from tb_monitor.contract._binary import (
    base64_le,
    from_b64,
    int64_offsets,
    json_value,
    time_steps,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ColumnarBatch",
    "encode_columnar",
    "event_offsets",
    "is_columnar",
    "parse_columnar",
    "parse_steps_record",
    "ParsedRecord",
    "SteppedRecords",
    "stepped_run",
]

# The commonest index read in C (_columnar_index.c); the JSON path reads every other.
_steps_index = _env.c_twin("tb_monitor.contract._columnar_index", "steps_index")
# A run of such records read in C at once, as columns (``stepped_run``).
_steps_run = _env.c_twin("tb_monitor.contract._columnar_index", "steps_run")

_WIDTHS = ((0x100, "B"), (0x10000, "H"), (0x100000000, "I"))
_MEMO = 4096  # parsed values remembered by ``parse_columnar``
_AFFIX_WORTH = 8  # characters a column's strings must share to be stored around an affix


def encode_columnar(
    times: Sequence[float], payloads: Sequence[str | bytes], payload_ids: Sequence[int]
) -> list[str] | None:
    """A version-4 record's strings for events ``times`` with payloads ``payloads[payload_ids]``,
    or None when a payload is not a JSON object that ``json.dumps`` writes back as it came."""
    if not times or len(times) != len(payload_ids):
        raise ValueError(
            f"a batch needs one payload per time, got {len(times)} and {len(payload_ids)}"
        )
    objects = [_object(payload) for payload in payloads]
    if any(obj is None for obj in objects):
        return None
    shapes: dict[tuple[str, ...], int] = {}
    shape_of = [shapes.setdefault(tuple(obj), len(shapes)) for obj in objects]  # type: ignore[arg-type]
    values: dict[str, list[Any]] = {}
    seen: dict[str, dict[Any, int]] = {}  # per column: each value's position
    at: dict[str, list[int]] = {}  # per column, per payload its value's position (-1: absent)
    for position, obj in enumerate(objects):
        for key, value in obj.items():  # type: ignore[union-attr]
            if key not in values:
                values[key], seen[key], at[key] = [], {}, [-1] * len(objects)
            found = seen[key].setdefault(_identity(value), len(values[key]))
            if found == len(values[key]):
                values[key].append(value)
            at[key][position] = found
    index: dict[str, Any] = time_steps(times)
    if len(shapes) > 1:
        index["shape_ix"] = _positions([shape_of[p] for p in payload_ids], len(shapes))
    index["ix"] = {}
    for key, found in values.items():
        events = [len(found) if p < 0 else p for p in (at[key][i] for i in payload_ids)]
        if len(found) > 1 or any(events):
            index["ix"][key] = _positions(events, len(found) + 1)
    stored = {
        "shapes": [list(shape) for shape in shapes],
        "columns": {key: _affixed(found) for key, found in values.items()},
    }
    return [json.dumps(index, separators=(",", ":")), json.dumps(stored, separators=(",", ":"))]


def _affixed(values: list[Any]) -> list[Any] | dict[str, list[str]]:
    """A column's values as stored: strings that share a long start and end (a node's messages
    that differ in a count) as ``{"affix": [start, end], "middles": [...]}``."""
    if len(values) < 2 or not all(type(v) is str for v in values):
        return values
    start = os.path.commonprefix(values)
    rests = [v[len(start) :] for v in values]
    end = os.path.commonprefix([r[::-1] for r in rests])[::-1]
    if len(start) + len(end) < _AFFIX_WORTH:
        return values
    return {"affix": [start, end], "middles": [r[: len(r) - len(end)] for r in rests]}


def _expanded(stored: Any) -> list[Any]:
    """A column's values from what ``_affixed`` stored; a ValueError when it is neither form."""
    if type(stored) is list and stored:
        return stored
    if type(stored) is dict and stored.keys() == {"affix", "middles"}:
        affix, middles = stored["affix"], stored["middles"]
        parts = [*affix, *middles] if type(affix) is list and type(middles) is list else [0]
        if len(affix) == 2 and middles and all(type(p) is str for p in parts):
            start, end = affix
            return [start + middle + end for middle in middles]
    raise ValueError(f"a column's values are neither a non-empty list nor affixed: {stored!r:.100}")


def _object(payload: str | bytes) -> dict[str, Any] | None:
    """The JSON object ``payload`` holds when ``json.dumps`` gives it back exactly, else None."""
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        obj = json.loads(text)
    except ValueError:  # UnicodeDecodeError and json's errors
        return None
    if type(obj) is not dict or json.dumps(obj) != text:
        return None
    return obj


def _identity(value: Any) -> Any:
    """What tells two JSON values apart: type and value (``1``, ``True`` and ``1.0`` differ),
    and for floats and containers their JSON (``0.0`` and ``-0.0`` differ)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return (kind, value)
    return json.dumps(value)


def _positions(values: list[int], count: int) -> str:
    """Positions below ``count`` in as few bytes each as hold them, base64."""
    code = next(code for limit, code in _WIDTHS if count <= limit)
    return base64_le(array.array(code, values))


def is_columnar(index: dict[str, Any]) -> bool:
    """Whether a batch index (versions 2 to 5) is version 4 or 5 (columns)."""
    return "ix" in index


@dataclass(slots=True)  # not frozen: a big job makes many, and a frozen one's __init__ costs more
class ParsedRecord:
    """One version-4 or -5 record, checked: its columns' values and the varying ones'
    positions."""

    t0: float
    events: int
    dt: bytes  # int64 microseconds after t0, little-endian, per event (empty with ``steps``)
    shapes: list[tuple[str, ...]]
    shape_ix: np.ndarray | None  # per event its shape (None: all the first)
    values: dict[str, list[Any]]
    ix: dict[str, np.ndarray]  # the varying columns' positions (len(values): absent)
    #: uint32 microseconds after the event before, per event but the first (None: ``dt``)
    steps: bytes | None = None

    def __len__(self) -> int:
        return self.events

    def offsets(self) -> bytes:
        """Each event's int64 microseconds after ``t0``, little-endian."""
        if self.steps is None:
            return self.dt
        import numpy as np

        return event_offsets([self], np.array([len(self)], dtype=np.int64)).astype("<i8").tobytes()


def parse_columnar(
    index: dict[str, Any], raw_values: str | bytes, memo: dict[Any, Any] | None = None
) -> ParsedRecord:
    """A version-4 record (``index`` parsed from its first string, ``raw_values`` its second),
    checked: a ValueError says what does not fit. Two JSON parses and a few numpy calls; with
    ``memo`` (values already parsed, by their text) one, for a run of a node's keep-alives,
    whose records' values are the same text."""
    try:
        t0 = index["t0"]
        if type(t0) not in (int, float) or not abs(t0) < 2**62:  # NaN and inf fail too
            raise ValueError("t0 is not a number of seconds")
        dt, steps = _times(index)
        events = len(dt) // 8 if steps is None else len(steps) // 4 + 1
        found = None if memo is None else memo.get(raw_values)
        if found is None:
            found = _Values(raw_values)
            if memo is not None:
                if len(memo) >= _MEMO:
                    memo.clear()
                memo[raw_values] = found
        shapes, values = found.shapes, found.values
        raw_ix = index["ix"]
        if type(raw_ix) is not dict:
            raise ValueError("ix is not an object")
        ix = (
            {key: _index_column(raw, events, len(values[key]) + 1) for key, raw in raw_ix.items()}
            if raw_ix
            else {}
        )
        raw_shape = index.get("shape_ix")
        shape_ix = None if raw_shape is None else _index_column(raw_shape, events, len(shapes))
        record = ParsedRecord(t0, events, dt, shapes, shape_ix, values, ix, steps)
        if ix or shape_ix is not None or not found.checked:  # else: as another record's
            _check_shapes(record)
            found.checked = not ix and shape_ix is None
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise ValueError(f"columnar index does not describe its events ({exc})") from None
    return record


def parse_steps_record(
    raw_index: str | bytes, raw_values: str | bytes, memo: dict[Any, Any]
) -> ParsedRecord | None:
    """:func:`parse_columnar` of the commonest record, a run of alike events (``t0``,
    ``dd_le32``, no varying column), whose values ``memo`` holds checked already, with its
    index read in C; None for any other record, which the JSON path reads (the first of a
    run's records too: it parses and checks the values the others share)."""
    if _steps_index is None or type(raw_index) is not bytes:
        return None
    found = memo.get(raw_values)
    if found is None or not found.checked:
        return None
    index = _steps_index(raw_index)
    if index is None:
        return None
    t0, steps = index
    return ParsedRecord(t0, len(steps) // 4 + 1, b"", found.shapes, None, found.values, {}, steps)


@dataclass(frozen=True, slots=True)
class SteppedRecords:
    """Consecutive records that :func:`parse_steps_record` would read, as columns: no Python
    object per record (most of a long job's records are such). Each is a run of alike events
    (``t0``, ``dd_le32``, no varying column) whose values a memo holds checked already."""

    t0: np.ndarray  # float64, per record
    events: np.ndarray  # int64, per record
    steps: bytes  # per record a 0 (its t0's event), then its uint32 steps, little-endian
    values: list[_Values]  # per record, its parsed values (shared with the records alike)

    def __len__(self) -> int:
        return len(self.values)


def stepped_run(records: list[Any], start: int, memo: dict[Any, Any]) -> SteppedRecords | None:
    """The records of ``records`` (each ``(values, wall_time, batched)``) from ``start`` on that
    :func:`parse_steps_record` would read with ``memo``, as one :class:`SteppedRecords`, read in
    C; None where the first is not one, or C is not built (the per-record path reads them)."""
    if _steps_run is None:
        return None
    found = _steps_run(records, start, memo)
    if found is None:
        return None
    import numpy as np

    _, t0, events, steps, values = found
    return SteppedRecords(
        np.frombuffer(t0, dtype=np.float64), np.frombuffer(events, dtype=np.int64), steps, values
    )


def _times(index: dict[str, Any]) -> tuple[bytes, bytes | None]:
    """A record's int64 offsets (``dt_le64``) or its uint32 steps (``dd_le32``), checked."""
    if "dt_le64" in index:
        return int64_offsets(index["dt_le64"]), None
    steps = from_b64(index["dd_le32"])
    if len(steps) % 4:
        raise ValueError("dd_le32 is not a whole number of uint32 steps")
    return b"", steps


class _Values:
    """A record's values string, parsed: its shapes and its columns' values."""

    def __init__(self, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        doc = json_value(raw)
        if type(doc) is not dict or doc.keys() != {"shapes", "columns"}:
            raise ValueError(f"values is not an object of shapes and columns: {raw!r:.100}")
        if type(doc["columns"]) is not dict or type(doc["shapes"]) is not list:
            raise ValueError(f"shapes is not a list or columns not an object: {raw!r:.100}")
        self.shapes = [tuple(shape) for shape in doc["shapes"]]
        self.values = {key: _expanded(stored) for key, stored in doc["columns"].items()}
        self.checked = False  # a record of one shape and no varying column fits them


def _index_column(raw: str, events: int, count: int) -> np.ndarray:
    """Per event a position below ``count``."""
    import numpy as np

    data = from_b64(raw)
    width = len(data) // events
    if width not in (1, 2, 4) or width * events != len(data):
        raise ValueError(f"{len(data)} bytes are not one position per event of {events}")
    positions = np.frombuffer(data, dtype=f"<u{width}")
    if int(positions.max()) >= count:
        raise ValueError("positions out of range")
    return positions


def _check_shapes(record: ParsedRecord) -> None:
    """Each event has a value in exactly its shape's columns."""
    import numpy as np

    shapes, values = record.shapes, record.values
    if not shapes or any(len(set(s)) != len(s) or not set(s) <= values.keys() for s in shapes):
        raise ValueError(f"shapes {shapes!r:.200} name a key twice or no column")
    if len(shapes) == 1:  # one shape: every column, and no event without a value
        if set(shapes[0]) != values.keys() or any(
            int(ix.max()) >= len(values[key]) for key, ix in record.ix.items()
        ):
            raise ValueError(f"columns {list(values)!r:.200} do not match the events' shape")
        return
    shape_ix = record.shape_ix if record.shape_ix is not None else np.zeros(len(record), np.uint8)
    for number, shape in enumerate(shapes):
        events = shape_ix == number
        for key, found in values.items():
            ix = record.ix.get(key)
            present = np.ones(int(events.sum()), bool) if ix is None else ix[events] < len(found)
            if not (np.all(present) if key in shape else not np.any(present)):
                raise ValueError(f"column {key!r:.100} does not match the events' shapes")


@dataclass(frozen=True)
class ColumnarBatch:
    """One version-4 record, as readers want it: each event's JSON, or the object it holds."""

    record: ParsedRecord

    def __len__(self) -> int:
        return len(self.record)

    def distinct(self) -> tuple[list[str], np.ndarray]:
        """The distinct payloads' JSON, and each event's position among them."""
        objects, inverse = self.distinct_objects()
        return [json.dumps(obj) for obj in objects], inverse

    def distinct_objects(self) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The distinct payloads as the objects their JSON holds (a reader that decodes them
        makes no text only to parse it), and each event's position among them."""
        import numpy as np

        record = self.record
        keys = list(record.ix)
        shape_ix = (
            record.shape_ix if record.shape_ix is not None else np.zeros(len(record), np.uint8)
        )
        rows = np.stack([shape_ix, *(record.ix[k] for k in keys)], axis=1).astype(np.int64)
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        return [self._object(row, keys) for row in unique.tolist()], inverse.reshape(-1)

    def _object(self, row: list[int], varying: list[str]) -> dict[str, Any]:
        """The event of shape ``row[0]`` whose ``varying`` columns are at ``row[1:]``."""
        at = dict(zip(varying, row[1:], strict=True))
        values = self.record.values
        return {key: values[key][at.get(key, 0)] for key in self.record.shapes[row[0]]}


_FIRST_STEP = bytes(4)  # a stepped record's first event: at its t0


def event_offsets(
    records: Sequence[ParsedRecord | SteppedRecords], counts: np.ndarray
) -> np.ndarray:
    """Every event's int64 microseconds after its record's ``t0`` (``counts``: per record its
    events, a :class:`SteppedRecords` counting as its records): the ``dt_le64`` records' as
    they are, the ``dd_le32`` records' summed for all of them at once (one cumulative sum,
    less each record's total before it)."""
    import numpy as np

    stepped_parts: list[bytes] = []  # each stepped record's 0, then its steps
    plain: list[bytes] = []  # each other record's int64 offsets
    kinds, runs = [], []  # whether records are stepped, run by run of records
    for r in records:
        if type(r) is SteppedRecords:
            stepped_parts.append(r.steps)
            kinds.append(True)
            runs.append(len(r))
        else:
            if r.steps is not None:
                stepped_parts += (_FIRST_STEP, r.steps)
            else:
                plain.append(r.dt)
            kinds.append(r.steps is not None)
            runs.append(1)
    if not stepped_parts:
        return np.frombuffer(b"".join(plain), dtype="<i8")
    # Each stepped record's steps after a first step of 0 (its t0's event), summed in one go.
    sums = np.frombuffer(b"".join(stepped_parts), dtype="<u4").cumsum(dtype=np.int64)
    is_stepped = np.repeat(np.array(kinds, dtype=bool), runs)
    lengths = counts[is_stepped]
    sums -= np.repeat(sums[np.cumsum(lengths) - lengths], lengths)
    if not plain:
        return sums
    out = np.empty(int(counts.sum()), dtype=np.int64)
    per_event = np.repeat(is_stepped, counts)
    out[~per_event] = np.frombuffer(b"".join(plain), dtype="<i8")
    out[per_event] = sums
    return out
