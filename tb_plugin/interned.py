"""Values interned as small integers: what the per-event columns hold instead of the values.

:class:`Interner` turns values into dense ids; :class:`Records` holds each distinct record (a
run's payload of one kind) once, its fields as interned ids, so an event costs its time and one
integer (a node's keep-alives, most of a long job's events, are one record); :class:`Texts`
holds each record's search text as ids of its parts, joined only when read.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from itertools import count, repeat
from typing import Any

import numpy as np

__all__ = ["FIELDS", "Interner", "Records", "Texts", "column"]

#: What a record holds as an interned id, in the order :meth:`Records.add` takes them; each is
#: the ``rec_<name>`` column of :class:`~tb_plugin.columns.Columns`.
FIELDS = ("lane", "state", "kind", "run", "name", "msg", "text")


class Interner:
    """Values to dense ids, so columns hold small integers."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.values)
            self.values.append(value)
        return found

    def many(self, values: list[Any]) -> np.ndarray:
        """The ids of ``values``, new ones interned: C calls, no Python per value (a big job's
        distinct messages are many). One pass over the dict: each value takes its id, or a new one
        numbered by its position (its first one); those are then made dense, in order."""
        ids, known = self.ids, len(self.values)
        try:
            out = np.fromiter(
                map(ids.setdefault, values, count(known)), dtype=np.int64, count=len(values)
            )
        except BaseException:  # an unhashable value: the interner as it was
            for value in [value for value, found in ids.items() if found >= known]:
                del ids[value]
            raise
        new = out >= known
        if new.any():
            first, dense = np.unique(out[new], return_inverse=True)
            out[new] = known + dense.reshape(-1)
            fresh = [values[at] for at in (first - known).tolist()]
            ids.update(zip(fresh, range(known, known + len(fresh)), strict=True))
            self.values.extend(fresh)
        return out


class Records:
    """Each distinct record (a run's payload of one kind), decoded once: the per-event columns
    hold its id, and every field an event shows is a lookup here. A node's keep-alives, most of
    a long job's events, are one record; so an event costs its time and one integer. Its JSON
    is not kept: the details panel reads an event's back from the data provider
    (``TimelineStore.event``)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str, str], int] = {}  # (run, kind, payload) -> record id
        #: Per field of :data:`FIELDS`, each record's interned id.
        self.columns = {name: array.array("q") for name in FIELDS}
        self.row: list[dict[str, Any] | None] = []  # when it may open or close an interval
        #: (record id, field, value) -> its twin with that field changed (``twin``)
        self.twins: dict[tuple[int, str, int], int] = {}

    def __len__(self) -> int:
        return len(self.row)

    def add(self, fields: tuple[int, ...], row: dict[str, Any] | None) -> int:
        """Append a record (``fields`` in the order of :data:`FIELDS`); return its id."""
        for values, value in zip(self.columns.values(), fields, strict=True):
            values.append(value)
        self.row.append(row)
        return len(self.row) - 1

    def extend(self, fields: np.ndarray, rows: list[dict[str, Any] | None]) -> int:
        """Append records (``fields``: one row of ids per record, in the order of
        :data:`FIELDS`); return the first one's id. Whole columns at a time."""
        first = len(self.row)
        for values, ids in zip(self.columns.values(), fields.T, strict=True):
            values.frombytes(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
        self.row.extend(rows)
        return first

    def twin(self, rec: int, name: str, value: int) -> int:
        """The record drawn like ``rec`` but with field ``name``'s id ``value`` (made once): a
        collateral rank's end drawn in its own state, a job's event on its own lane."""
        return int(self.twins_of(np.asarray([rec]), name, np.asarray([value]))[0])

    def twins_of(self, recs: np.ndarray, name: str, values: np.ndarray) -> np.ndarray:
        """:meth:`twin` of each ``recs[i]`` with ``values[i]``, the new ones appended as whole
        columns (every collateral end drawn stopped at once: no Python record per twin)."""
        keys = list(zip(recs.tolist(), repeat(name), values.tolist()))
        out = np.fromiter((self.twins.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        missing = np.flatnonzero(out < 0)
        if len(missing):
            fresh = list(dict.fromkeys(keys[i] for i in missing.tolist()))
            of = np.fromiter((rec for rec, _, _ in fresh), dtype=np.int64, count=len(fresh))
            columns = [np.frombuffer(ids, dtype=np.int64)[of] for ids in self.columns.values()]
            fields = np.stack(columns, axis=1)
            fields[:, FIELDS.index(name)] = [value for _, _, value in fresh]
            first = self.extend(fields, [None] * len(fresh))
            self.twins.update(zip(fresh, range(first, first + len(fresh)), strict=True))
            out[missing] = [self.twins[keys[i]] for i in missing.tolist()]
        return out

    def get(self, name: str, rec: int) -> int:
        """Record ``rec``'s id of field ``name``."""
        return self.columns[name][rec]


class Texts(Sequence[str]):
    """Each record's search text, lower case: its message between two parts (its name before;
    its state, host, error and run after), joined only when read: distinct rendezvous
    messages cost three integers each here, not a second, longer copy of each."""

    def __init__(self, msgs: Sequence[str]) -> None:
        self._msgs = msgs
        self._parts = Interner()
        self._ids = {name: array.array("i") for name in ("pre", "msg", "post")}

    def part(self, text: str) -> int:
        """The id of a lower-case part."""
        return self._parts(text)

    def extend(self, pre: np.ndarray, msg: np.ndarray, post: np.ndarray) -> int:
        """Texts ``parts[pre] + msgs[msg].lower() + parts[post]``; the first one's id."""
        first = len(self)
        for name, ids in (("pre", pre), ("msg", msg), ("post", post)):
            self._ids[name].frombytes(np.ascontiguousarray(ids, dtype=np.intc).tobytes())
        return first

    def __len__(self) -> int:
        return len(self._ids["post"])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        pre, msg, post = (self._ids[name][i] for name in ("pre", "msg", "post"))
        parts = self._parts.values
        return parts[pre] + self._msgs[msg].lower() + parts[post]

    def __iter__(self) -> Any:
        parts, msgs, n = self._parts.values, self._msgs, len(self)
        ids = (self._ids[name][:n] for name in ("pre", "msg", "post"))
        return (parts[p] + msgs[m].lower() + parts[q] for p, m, q in zip(*ids, strict=True))


def column(values: array.array, dtype: type) -> np.ndarray:
    """A numpy copy of an append-only array: it keeps growing, and a buffer it exported
    could not be resized."""
    return np.frombuffer(values, dtype=dtype).copy()
