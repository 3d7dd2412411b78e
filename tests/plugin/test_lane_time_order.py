"""Events sorted by their record's lane and time with one key, then exactly: as a lexsort."""

from __future__ import annotations

import array

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.lane_order import exact_time_order, lane_time_order


@given(st.integers(0, 2**16), st.integers(1, 300), st.integers(1, 12), st.integers(1, 5))
def test_the_order_is_the_lexsort_by_lane_then_time(seed, events, records, lanes):
    """Whole microseconds apart or tied, events come out by lane, then time, ties as read; their
    times with them."""
    rng = np.random.default_rng(seed)
    t = 1.7e9 + rng.integers(0, 50, size=events) * 0.25  # ties on purpose
    rec = rng.integers(0, records, size=events).astype(np.int32)
    rec_lane = rng.integers(0, lanes, size=records).astype(np.int64)
    order, in_time = lane_time_order(t, rec, rec_lane)
    assert order.tolist() == np.lexsort((t, rec_lane[rec])).tolist()
    assert np.array_equal(in_time, t[order])


def test_single_precision_times_sort_as_they_would_as_doubles():
    """Times in float32 (an odd count of them) sort as the same times in float64."""
    t = np.array([40.5, 10.25, 30.0, 10.25, 20.0], dtype=np.float32)
    rec = np.array([1, 0, 1, 0, 0], dtype=np.int32)
    rec_lane = np.array([0, 1])
    expected, _ = lane_time_order(t.astype(np.float64), rec, rec_lane)
    order, in_time = lane_time_order(t, rec, rec_lane)
    assert order.tolist() == expected.tolist() == [1, 3, 4, 2, 0]
    assert in_time.dtype == np.float32 and np.array_equal(in_time, t[order])


def test_a_span_too_long_for_the_key_still_sorts_by_lane_then_time():
    """Times too far apart for microseconds beside the lane bits fall back to a lexsort."""
    t = np.array([3e12, -3e12, 0.0, 1.0])
    rec = np.array([0, 0, 1, 1], dtype=np.int32)
    order, in_time = lane_time_order(t, rec, np.array([1, 0]))
    assert order.tolist() == [2, 3, 1, 0]
    assert in_time.tolist() == [0.0, 1.0, -3e12, 3e12]


def test_no_events_give_an_empty_order():
    """A store before its first event sorts nothing."""
    empty = np.zeros(0, dtype=np.int32)
    order, in_time = lane_time_order(np.zeros(0), empty, np.zeros(0, dtype=np.int64))
    assert order.tolist() == in_time.tolist() == []


@pytest.mark.parametrize("events", [0, 1, 5])
def test_the_sorted_times_hold_no_view_of_the_times_given(events):
    """The times come back in arrays of their own, none at all included: a first sort is given
    a view of the store's append-only column, which must not stay exported."""
    column = array.array("d", [1.7e9 + 2.0 * i for i in range(events)][::-1])
    t = np.frombuffer(column, dtype=np.float64)
    rec = np.zeros(events, dtype=np.int32)
    _, in_time = lane_time_order(t, rec, np.zeros(1, dtype=np.int64))
    assert not np.shares_memory(in_time, t)
    del t
    column.frombytes(np.zeros(1).tobytes())  # a BufferError while a view of it is alive


def _exactly(t: np.ndarray, rec: np.ndarray, rec_lane: np.ndarray) -> np.ndarray:
    """The store's order: the one-key sort, then each lane put exactly in time order."""
    order, in_time = lane_time_order(t, rec, rec_lane)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(rec_lane[rec], minlength=4))))
    exact_time_order(in_time, order, bounds)
    assert np.array_equal(in_time, t[order])
    return order


def test_events_under_a_microsecond_apart_are_put_in_time_order():
    """Two records' events on one lane, 0.7 us apart, one key apart from none: the later one
    read first still comes second (a window starting between them must count one)."""
    a = 1.7e9
    t = np.array([a + 0.9e-6, a + 10 + 0.9e-6, a + 10 + 0.2e-6])
    rec = np.array([0, 0, 1], dtype=np.int32)
    assert _exactly(t, rec, np.array([0, 0])).tolist() == [0, 2, 1]


@given(st.integers(0, 2**16), st.integers(1, 300), st.integers(1, 12))
def test_with_sub_microsecond_times_the_order_is_the_lexsort(seed, events, records):
    """Times a fraction of a microsecond apart, any lanes: the exact lexsort by lane, time."""
    rng = np.random.default_rng(seed)
    t = 1.7e9 + rng.integers(0, 40, size=events) * 3e-7
    rec = rng.integers(0, records, size=events).astype(np.int32)
    rec_lane = rng.integers(0, 4, size=records).astype(np.int64)
    assert _exactly(t, rec, rec_lane).tolist() == np.lexsort((t, rec_lane[rec])).tolist()
