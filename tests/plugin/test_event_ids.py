"""Sorted events' ids kept as runs of consecutive ids: indexed like the column they stand for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.columns import EventIds

#: Permutations of event ids made of runs, as a sort by (lane, time) leaves them.
_PIECES = st.lists(st.integers(1, 40), min_size=0, max_size=30)


def _ids(lengths: list[int], seed: int) -> np.ndarray:
    """Ids 0..n-1 cut into runs of ``lengths``, the runs shuffled."""
    bounds = np.cumsum([0, *lengths])
    runs = [np.arange(a, b, dtype=np.int32) for a, b in zip(bounds, bounds[1:], strict=False)]
    np.random.default_rng(seed).shuffle(runs)
    return np.concatenate(runs) if runs else np.zeros(0, np.int32)


@given(_PIECES, st.integers(0, 2**16))
def test_every_way_of_indexing_gives_the_column_s_ids(lengths, seed):
    """Whole, sliced, by index array, by mask and one by one: the same ids as the plain column."""
    ids = _ids(lengths, seed)
    runs = EventIds.of(ids)
    assert len(runs) == len(ids)
    assert np.array_equal(runs[:], ids) and runs[:].dtype == np.int32
    assert runs.tolist() == ids.tolist()
    assert np.array_equal(runs[3:-2], ids[3:-2])
    picks = np.random.default_rng(seed).integers(0, max(len(ids), 1), size=min(len(ids), 7))
    assert np.array_equal(runs[picks], ids[picks])
    mask = ids % 3 == 0
    assert np.array_equal(runs[mask], ids[mask])
    assert [int(runs[i]) for i in range(-len(ids), len(ids))] == [*ids.tolist(), *ids.tolist()]


@given(_PIECES, st.integers(0, 2**16))
def test_each_id_s_position_is_where_it_is(lengths, seed):
    """``position`` finds every id where the column holds it."""
    ids = _ids(lengths, seed)
    runs = EventIds.of(ids)
    assert [runs.position(int(i)) for i in ids] == list(range(len(ids)))


def test_a_record_s_events_sorted_in_a_row_cost_one_run():
    """A run of consecutive ids costs two integers, however long."""
    records = [np.arange(first, first + 60, dtype=np.int32) for first in range(0, 60_000, 60)]
    runs = EventIds.of(np.concatenate(records[::-1]))  # none follows on from the one before
    assert len(runs.starts) == 1000 and runs.nbytes == 8000


@pytest.mark.parametrize("missing", [-1, 10, 10**9])
def test_an_id_not_held_is_a_key_error_naming_it(missing):
    """Asking where an absent id is raises a KeyError with the id."""
    with pytest.raises(KeyError, match=str(missing)):
        EventIds.of(np.arange(10, dtype=np.int32)).position(missing)


def test_a_position_out_of_range_is_an_index_error():
    """One past the end is an IndexError naming the position, as for a numpy column."""
    with pytest.raises(IndexError, match="10"):
        EventIds.of(np.arange(10, dtype=np.int32))[10]


@pytest.mark.parametrize(
    "key",
    [np.array([0, 10]), np.array([-11]), np.ones(9, dtype=bool)],
    ids=["past", "before", "mask"],
)
def test_an_index_array_out_of_range_is_an_index_error(key):
    """Positions past either end, or a mask of another length, raise as for a numpy column."""
    with pytest.raises(IndexError):
        EventIds.of(np.arange(10, dtype=np.int32))[key]
