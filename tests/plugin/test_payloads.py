"""Payload columns narrowed: each in the smallest unsigned type that holds it, named."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.payloads import narrow


@given(st.lists(st.integers(0, 2**32 - 1), max_size=40))
def test_a_column_decodes_to_its_values_in_the_type_it_names(values):
    """Whatever its values, a column read back as its named type is the column."""
    part = narrow(n=np.array(values, dtype=np.int64))
    decoded = np.frombuffer(base64.b64decode(part["n"]), dtype="<" + part["types"]["n"])
    assert decoded.tolist() == values


@pytest.mark.parametrize(
    ("largest", "expected"), [(0, "u1"), (255, "u1"), (256, "u2"), (65535, "u2"), (65536, "u4")]
)
def test_the_narrowest_type_holding_the_largest_value_is_chosen(largest, expected):
    """A count up to 255 costs a byte, up to 65,535 two, beyond that four."""
    assert narrow(n=np.array([0, largest]))["types"] == {"n": expected}


@pytest.mark.parametrize("bad", [-1, 2**32])
def test_a_value_no_unsigned_32_bit_type_holds_is_refused_naming_the_column(bad):
    """A negative or too large value is an error naming the column and the value."""
    with pytest.raises(ValueError, match=rf"'bin'.*{bad}"):
        narrow(bin=np.array([3, bad], dtype=np.int64))
