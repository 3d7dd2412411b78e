"""Every lane's sorted times bisected at once: the same positions as a searchsorted per lane."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.lane_order import search_segments

#: Lanes of sorted times drawn from few values, so ties and empty lanes are common.
_LANES = st.lists(st.lists(st.integers(0, 12).map(float), max_size=25).map(sorted), max_size=12)


def _segments(lanes: list[list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lanes one after another as one column, and each lane's first and end position."""
    bounds = np.cumsum([0, *map(len, lanes)])
    t = np.array([x for lane in lanes for x in lane], dtype=np.float64)
    return t, bounds[:-1], bounds[1:]


@given(_LANES, st.floats(-1, 14, allow_nan=False), st.sampled_from(["left", "right"]))
def test_each_segment_is_searched_as_searchsorted_searches_it(lanes, value, side):
    """Per segment: its first position plus numpy's searchsorted within it, ties included."""
    t, firsts, lasts = _segments(lanes)
    found = search_segments(t, firsts, lasts, value, side)
    expected = [
        a + np.searchsorted(t[a:b], value, side) for a, b in zip(firsts, lasts, strict=True)
    ]
    assert found.tolist() == [int(x) for x in expected]


def test_no_segments_and_no_times_give_no_positions():
    """An empty column (a store before its first event) has no positions to search."""
    none = np.zeros(0, dtype=np.int64)
    assert search_segments(np.zeros(0), none, none, 1.0).tolist() == []


def test_a_side_other_than_left_or_right_is_refused_by_name():
    """A mistyped side is an error naming it, not a silent left search."""
    t, firsts, lasts = _segments([[1.0, 2.0]])
    with pytest.raises(ValueError, match="'middle'"):
        search_segments(t, firsts, lasts, 1.5, "middle")
