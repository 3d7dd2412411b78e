"""Version-4 timeline records' events turned into the store's records, in numpy.

Events alike in every column but a rendezvous message form a *group*: the store decodes one
payload per group (``contract.decode_record``), so a node's keep-alives, however many records
hold them, are one decode. A rendezvous event's message (a counter or a time in it makes
every event distinct) stays apart: a record is a (group, message) pair, and the message its
only Python object. Undecodable groups' events are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tb_monitor import contract
from tb_plugin.columnar_merge import ColumnarEvents
from tb_plugin.interned import Interner, Records, Texts

__all__ = ["Described", "Groups", "NewEvents", "add_records", "group_events"]

#: What the store says of a group's decoded payload (``EventTable._describe``): its lane,
#: state, kind, run and name ids, its message, its search text's parts around the message, and
#: its row when it may open or close an interval; None when it could not be decoded.
Described = tuple[tuple[int, ...], str, tuple[int, int], dict[str, Any] | None] | None
_APART = "message"


@dataclass(frozen=True)
class Groups:
    """Events by group (one series' events alike but for a rendezvous message), segment by
    segment (``ColumnarEvents``: a run of alike events, or one event)."""

    series: list[int]  # per group: its series
    shapes: list[tuple[str, ...]]  # per group: its events' keys, in their order
    payloads: list[dict[str, Any]]  # per group: its events' values but a message kept apart
    group: np.ndarray  # per segment: its group
    apart: np.ndarray  # per segment: whether its message is kept apart (a rendezvous event's)
    apart_groups: list[bool]  # per group: whether its events' messages are kept apart
    messages: list[str]  # the message column's values when kept apart, else none
    message: np.ndarray | None  # per segment: its position there, -1 for none


def group_events(events: ColumnarEvents, series: np.ndarray, kinds: list[str]) -> Groups:
    """``events`` (``series``: per record, its series, whose kinds are ``kinds``) grouped; a
    rendezvous event's message apart when every message is a string."""
    series = series[events.segment_record]
    rendezvous = np.asarray([kind == contract.RENDEZVOUS for kind in kinds], dtype=bool)
    messages = events.values.get(_APART, [])
    apart = rendezvous[series] & all(type(m) is str for m in messages)
    distinct, per_event = [], []
    for key, values in events.values.items():
        position = events.position[key]
        if key == _APART:  # only the other events' messages are part of their group
            position = np.where(apart, -1, position)
            used = np.unique(position[position >= 0])
            found, ids = _canonical([values[i] for i in used.tolist()])
            ids = ids[np.searchsorted(used, position)] if len(used) else ids[position]
            ids[position < 0] = len(found)
        else:
            found, ids = _canonical(values)
            ids = ids[position]  # position -1: the last id, "absent"
        distinct.append(found)
        per_event.append(ids)
    sizes = [len(kinds), len(events.shapes)] + [len(found) + 1 for found in distinct]
    rows, group = _unique_rows([series, events.shape, *per_event], sizes)
    at = {key: i for i, key in enumerate(events.values)}
    shapes = [events.shapes[row[1]] for row in rows]
    payloads = [
        {
            key: distinct[at[key]][row[2 + at[key]]]
            for key in shape
            if row[2 + at[key]] < len(distinct[at[key]])
        }
        for shape, row in zip(shapes, rows, strict=True)
    ]
    position = events.position[_APART] if _APART in events.values and apart.any() else None
    apart_groups = [bool(apart[i]) for i in np.unique(group, return_index=True)[1].tolist()]
    series_of = [row[0] for row in rows]
    return Groups(series_of, shapes, payloads, group, apart, apart_groups, messages, position)


def _canonical(values: list[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct values (first seen first) and each value's id among them, then one more
    id (``len``) for an event without the key. Strings, integers, booleans and None compare by
    type and value, floats by their text; a container is its own (a worker event's metadata,
    alike across records only by chance: telling it apart would cost a JSON dump each)."""
    seen: dict[Any, int] = {}
    distinct: list[Any] = []
    ids = []
    for value in values:
        kind = type(value)
        key = (kind, value) if kind in _BY_VALUE else (kind, repr(value)) if kind is float else None
        found = len(distinct) if key is None else seen.setdefault(key, len(distinct))
        if found == len(distinct):
            distinct.append(value)
        ids.append(found)
    return distinct, np.asarray([*ids, len(distinct)], dtype=np.int32)


_BY_VALUE = (str, int, bool, type(None))


def _unique_rows(columns: list[np.ndarray], sizes: list[int]) -> tuple[list[list[int]], np.ndarray]:
    """The distinct rows of ``columns`` (each below its size) and each event's row: one sort of
    an integer key, made dense again whenever the next column would overflow it."""
    key, bound = np.zeros(len(columns[0]), dtype=np.int64), 1
    for ids, size in zip(columns, sizes, strict=True):
        if bound * size >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key, bound = key.reshape(-1).astype(np.int64), int(key.max()) + 1
        key = key * size + ids
        bound *= size
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rows = np.stack([ids[first] for ids in columns], axis=1).tolist()
    return rows, inverse.reshape(-1)


@dataclass(frozen=True)
class NewEvents:
    """Segments whose records were added, ready to append to the store's columns."""

    keep: np.ndarray  # per segment: whether it was decodable
    rec: np.ndarray  # per segment: its record's id
    bounding: np.ndarray  # per segment: whether its record may open or close an interval


def add_records(
    groups: Groups,
    described: list[Described],
    msgs: Interner,
    texts: Texts,
    records: Records,
) -> NewEvents:
    """One record per (group, message) pair of the segments, added to ``records`` and ``texts``
    in numpy but for one ``msgs`` lookup per message."""
    group_msg = msgs.many([d[1] if d else "" for d in described])
    msg = group_msg[groups.group]
    if groups.message is not None:
        apart = msgs.many([*groups.messages, ""])[groups.message]
        msg = np.where(groups.apart, apart, msg)
    span = max(int(msg.max()) + 1, 1)
    pairs, pair_of = np.unique(groups.group * span + msg, return_inverse=True)
    pair_of = pair_of.reshape(-1)
    pair_group, pair_msg = np.divmod(pairs, span)
    # per group: lane, state, kind, run and name ids, then the text's two parts
    table = np.asarray([(*d[0], *d[2]) if d else (0,) * 7 for d in described], dtype=np.int64)
    per_pair = table[pair_group]
    first_text = texts.extend(per_pair[:, 5], pair_msg, per_pair[:, 6])
    fields = np.column_stack([per_pair[:, :5], pair_msg, first_text + np.arange(len(pairs))])
    group_bounds = np.asarray([d is not None and d[3] is not None for d in described], dtype=bool)
    bounding_pairs = group_bounds[pair_group]
    rows: list[dict[str, Any] | None] = [None] * len(pairs)
    for at in np.flatnonzero(bounding_pairs).tolist():
        row = described[pair_group[at]][3]
        apart = groups.apart_groups[pair_group[at]]
        rows[at] = {**row, "message": msgs.values[pair_msg[at]]} if apart else row
    first = records.extend(fields, rows)
    rec = first + pair_of
    bounding = bounding_pairs[pair_of]
    decodable = np.asarray([d is not None for d in described], dtype=bool)[groups.group]
    return NewEvents(decodable, rec, bounding)
