"""Records' twins (a record drawn with one field changed): made once, for many at a time."""

from __future__ import annotations

import numpy as np

from tb_plugin.interned import FIELDS, Records


def _records(count: int) -> Records:
    records = Records()
    fields = np.arange(count * len(FIELDS), dtype=np.int64).reshape(count, len(FIELDS))
    records.extend(fields, [None] * count)
    return records


def _fields(records: Records, rec: int) -> dict[str, int]:
    return {name: records.get(name, rec) for name in FIELDS}


def test_a_twin_has_its_records_fields_but_the_one_changed():
    """A twin holds every field of its record but the one named, which holds the new id."""
    records = _records(3)
    (twin,) = records.twins_of(np.asarray([1]), "state", np.asarray([99]))
    assert _fields(records, int(twin)) == {**_fields(records, 1), "state": 99}
    assert records.row[int(twin)] is None


def test_the_same_pair_gives_one_twin_within_a_call_and_across_calls():
    """Pairs asked twice in one call, or again later (one at a time too), share one twin."""
    records = _records(4)
    recs, states = np.asarray([2, 0, 2, 3]), np.asarray([7, 7, 7, 8])
    first = records.twins_of(recs, "state", states)
    assert first[0] == first[2] and len(set(first.tolist())) == 3
    assert len(records) == 4 + 3
    again = records.twins_of(recs[::-1], "state", states[::-1])
    assert again.tolist() == first[::-1].tolist() and len(records) == 7
    assert records.twin(0, "state", 7) == first[1]
    assert records.twin(0, "lane", 7) == len(records) - 1  # another field: another twin
