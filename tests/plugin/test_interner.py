"""Interning many values at once gives the ids interning them one at a time would."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.interned import Interner

_BATCHES = st.lists(st.lists(st.text(alphabet="abc", max_size=3), max_size=20), max_size=4)


@given(_BATCHES)
def test_many_interns_as_one_at_a_time(batches):
    """Batches of values, known and new, repeated or not, get dense ids in first-seen order."""
    one, many = Interner(), Interner()
    for values in batches:
        assert many.many(values).tolist() == [one(value) for value in values]
    assert (many.ids, many.values) == (one.ids, one.values)


def test_an_unhashable_value_leaves_the_interner_as_it_was():
    """A batch holding an unhashable value raises and interns nothing of it."""
    interner = Interner()
    interner.many(["a", "b"])
    with pytest.raises(TypeError):
        interner.many(["c", "a", ["unhashable"]])
    assert (interner.ids, interner.values) == ({"a": 0, "b": 1}, ["a", "b"])
    assert interner.many(["c"]).tolist() == [2]
