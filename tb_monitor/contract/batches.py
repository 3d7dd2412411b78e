"""Content versions 2 to 4: several events per timeline record, encoded and decoded.

The record's tensor is a rank-1 string tensor ``[index, payload_0, ..., payload_m-1]``: each
payload is one event's JSON exactly as torch serialized it, stored once however often it
occurs, and ``index`` is a JSON object with ``t0``, the first event's wall time, and:
- version 3: ``dt_le64``, each event's microseconds after t0 as little-endian int64, and
  ``p_le32``, each event's payload position as little-endian uint32 (absent: all 0), both in
  base64: a reader decodes a run of keep-alives with a few C calls instead of parsing numbers;
- version 2: ``dt`` and ``p``, the same as JSON lists of integers.
A version-1 record is a scalar tensor. Version 4 (``columnar``) holds the events as columns;
``decode_records`` reads every version.
"""

from __future__ import annotations

import array
import binascii
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tb_monitor.contract._binary import (
    base64_le,
    bytes_le,
    from_b64,
    from_le,
    int64_offsets,
    json_value,
    time_offsets,
)
from tb_monitor.contract.columnar import (
    ColumnarBatch,
    ParsedRecord,
    SteppedRecords,
    is_columnar,
    parse_columnar,
    parse_steps_record,
    stepped_run,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DecodedRecords", "Unreadable", "decode_records", "encode_batch", "record_events"]


def encode_batch(times: Sequence[float], payload_ids: Sequence[int]) -> str:
    """The index of a version-3 record: each event's wall time and payload position."""
    if not times or len(times) != len(payload_ids):
        raise ValueError(
            f"a batch needs one payload per time, got {len(times)} and {len(payload_ids)}"
        )
    index: dict[str, Any] = time_offsets(times)
    if any(payload_ids):
        index["p_le32"] = base64_le(array.array("I", payload_ids))
    return json.dumps(index, separators=(",", ":"))


class Unreadable(tuple):  # type: ignore[type-arg]
    """The strings of a record whose tensor cannot be read (a reader's own checks refused
    it): none, and why, which ``decode_records`` gives as it leaves the record out."""

    why: str

    def __new__(cls, why: str) -> Unreadable:
        self = super().__new__(cls)
        self.why = why
        return self

    def __getnewargs__(self) -> tuple[str]:  # type: ignore[override]
        return (self.why,)

    def __repr__(self) -> str:
        return f"Unreadable({self.why!r})"


def _empty_record(values: Sequence[str | bytes]) -> str:
    """Why a record holds no string: its reader's reason, else none given."""
    return values.why if isinstance(values, Unreadable) else "a timeline record without a payload"


@dataclass
class DecodedRecords:
    """Many timeline records' events as numpy columns, one entry per event, in record order."""

    times: np.ndarray  # float64: the event's wall time
    record: np.ndarray  # int64: the position of its record in the input
    payload: np.ndarray  # int64: the position of its payload in ``payloads``
    #: every record's distinct payloads, record after record: JSON text, or (``objects``) a
    #: version-4 record's as the objects they hold
    payloads: list[Any]
    errors: list[tuple[int, str]]  # (position, why) of each record left out
    #: With ``columnar``: (position, record) of each version-4 record, not in the columns
    #: above (a reader may merge many series' records into columns at once, as the plugin
    #: does); a run of records read in C at once is one entry, at its first record's position.
    columnar: list[tuple[int, ParsedRecord | SteppedRecords]] = field(default_factory=list)


def decode_records(
    records: Iterable[tuple[Sequence[str | bytes], float, bool]],
    columnar: bool = False,
    objects: bool = False,
) -> DecodedRecords:
    """The events of many timeline records of any version, as whole columns.

    Each record is ``(values, wall_time, batched)``: its tensor's strings, its own wall time (a
    version-1 event's time) and whether the tensor has a dimension (versions 2 to 4). A long
    job's store decodes millions of events, so a record costs a few C calls and the events'
    times and positions are computed for all records at once. A record whose index does not
    describe its payloads is left out and named in ``errors``. A version-4 record's events are
    its distinct payloads' JSON, rebuilt (with ``objects``, the objects that JSON holds: a
    reader that decodes them skips the text); with ``columnar`` it is handed back whole.
    """
    t0s: list[float] = []
    counts: list[int] = []
    bases: list[int] = []  # per record: its first payload's position in ``payloads``
    used: list[int] = []  # per record kept: its position in the input
    offsets: list[bytes] = []  # per record: its events' int64 microseconds, little-endian
    positions: list[bytes] = []  # per record: its events' uint32 payload positions
    payloads: list[Any] = []
    errors: list[tuple[int, str]] = []
    found: list[tuple[int, ParsedRecord | SteppedRecords]] = []
    memo: dict[Any, Any] = {}  # version 4's values, parsed, by their text (str or bytes)
    records = records if type(records) is list else list(records)
    after = 0  # records before it were read in a run of stepped records (columnar only)
    for where, record in enumerate(records):
        if where < after:
            continue
        run = stepped_run(records, where, memo) if columnar else None
        if run is not None:  # this record and those after it like it, read at once in C
            found.append((where, run))
            after = where + len(run)
            continue
        values, wall_time, batched = record
        try:
            if batched:
                t0, dt, ids = _batch_index(values, memo)
                if isinstance(dt, ParsedRecord):
                    if columnar:
                        found.append((where, dt))
                        continue
                    batch = ColumnarBatch(dt)
                    strings, which = batch.distinct_objects() if objects else batch.distinct()
                    dt, ids = dt.offsets(), which.astype("<u4").tobytes()
                else:
                    strings = [_text(v) for v in values[1:]]
            elif len(values):
                t0, dt, ids, strings = wall_time, _ONE_OFFSET, _ONE_POSITION, [_text(values[0])]
            else:
                raise ValueError(_empty_record(values))
        except ValueError as exc:
            errors.append((where, str(exc)))
            continue
        t0s.append(t0)
        counts.append(len(dt) // 8)
        bases.append(len(payloads))
        used.append(where)
        offsets.append(dt)
        positions.append(ids)
        payloads.extend(strings)
    columns = _event_columns(t0s, counts, bases, used, offsets, positions)
    return DecodedRecords(*columns, payloads, errors, found)


def _event_columns(
    t0s: list[float],
    counts: list[int],
    bases: list[int],
    used: list[int],
    offsets: list[bytes],
    positions: list[bytes],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept records' events' times, records and payload positions, for all records at
    once (the per-record lists of ``decode_records``)."""
    import numpy as np  # tensorboard's dependency; imported here to keep writers' imports light

    n = np.array(counts, dtype=np.int64)
    # The same doubles as t0 + d * 1e-6 in Python: each number converts exactly, then one
    # multiply and one add, each rounded as IEEE 754 prescribes.
    times = np.repeat(np.array(t0s, dtype=np.float64), n)
    times += np.frombuffer(b"".join(offsets), dtype="<i8") * 1e-6
    payload = np.frombuffer(b"".join(positions), dtype="<u4").astype(np.int64)
    payload += np.repeat(np.array(bases, dtype=np.int64), n)
    record = np.repeat(np.array(used, dtype=np.int64), n)
    return times, record, payload


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_ONE_OFFSET = bytes(8)  # a version-1 record: one event at the record's time
_ONE_POSITION = bytes(4)


def _batch_index(
    values: Sequence[str | bytes], memo: dict[Any, Any] | None = None
) -> tuple[float, Any, bytes]:
    """A version-2 or -3 record's ``t0`` and its events' offsets (int64 µs) and positions
    (uint32) as little-endian bytes, checked to describe its payloads (``values[1:]``); a
    version-4 record's ``(t0, ParsedRecord, b"")``: its values string is decoded only the
    first time ``memo`` meets it (a node's keep-alive runs share it, record after record)."""
    if len(values) < 2:
        raise ValueError(
            _empty_record(values)
            if not values
            else f"a batched timeline record needs an index and a payload, got {len(values)} values"
        )
    if memo is not None and len(values) == 2:
        record = parse_steps_record(values[0], values[1], memo)
        if record is not None:
            return record.t0, record, b""
    raw = _text(values[0])
    try:
        index = json_value(raw)
    except ValueError as exc:
        raise ValueError(f"batch index is not JSON ({exc}): {raw!r:.200}") from None
    if not isinstance(index, dict):
        raise ValueError(f"batch index is not a JSON object: {raw!r:.200}")
    if is_columnar(index):
        if len(values) != 2:
            raise ValueError(f"a columnar record holds an index and its values, got {len(values)}")
        record = parse_columnar(index, values[1], memo)
        return record.t0, record, b""
    payloads = len(values) - 1
    t0 = index.get("t0")
    try:
        if type(t0) not in (int, float) or not abs(t0) < 2**62:  # NaN and inf fail too
            raise ValueError("t0 is not a number of seconds")
        if "dt_le64" in index:
            dt, ids = _binary_index(index, payloads)
        else:
            dt, ids = _list_index(index, payloads)
    except (ValueError, TypeError, OverflowError, binascii.Error) as exc:
        raise ValueError(
            f"batch index does not describe its {payloads} payloads ({exc}): {raw!r:.200}"
        ) from None
    return t0, dt, ids


def _binary_index(index: dict[str, Any], payloads: int) -> tuple[bytes, bytes]:
    """Version 3: base64 of little-endian int64 offsets and uint32 positions."""
    dt = int64_offsets(index["dt_le64"])
    events = len(dt) // 8
    if "p_le32" not in index:
        return dt, bytes(4 * events)  # every event is payload 0
    ids = from_b64(index["p_le32"])
    if len(ids) != 4 * events:
        raise ValueError("p_le32 does not hold one uint32 position per offset")
    if max(from_le(array.array("I"), ids)) >= payloads:
        raise ValueError("positions out of range")
    return dt, ids


def _list_index(index: dict[str, Any], payloads: int) -> tuple[bytes, bytes]:
    """Version 2: JSON lists of integers."""
    dt, ids = index.get("dt"), index.get("p")
    if type(dt) is not list or type(ids) is not list or not ids or len(dt) != len(ids):
        raise ValueError("dt and p are not lists of equal, non-zero length")
    if set(map(type, dt)) != {int} or set(map(type, ids)) != {int}:
        raise ValueError("offsets or positions are not integers")
    if min(ids) < 0 or max(ids) >= payloads:
        raise ValueError("positions out of range")
    return bytes_le(array.array("q", dt)), bytes_le(array.array("I", ids))


def record_events(
    values: Sequence[str | bytes], wall_time: float, batched: bool, objects: bool = False
) -> list[tuple[float, Any]]:
    """``(wall time, payload)`` of every event of one timeline record (see ``decode_records``:
    with ``objects``, a version-4 record's payloads are the objects their JSON holds); raises
    ValueError naming what is wrong with a batched record's index."""
    decoded = decode_records([(values, wall_time, batched)], objects=objects)
    if decoded.errors:
        raise ValueError(decoded.errors[0][1])
    payloads = decoded.payloads
    return [
        (t, payloads[i])
        for t, i in zip(decoded.times.tolist(), decoded.payload.tolist(), strict=True)
    ]
