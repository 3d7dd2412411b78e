"""Sorted events' ids and records kept as runs: indexed like the columns they stand for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_plugin.runlength import EventIds, EventRecords

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
    a, b = sorted(np.random.default_rng(seed).integers(0, len(ids) + 1, size=2).tolist())
    assert np.array_equal(runs[a:b], ids[a:b]) and np.array_equal(runs[b:a], ids[b:a])
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


def _records(lengths: list[int], seed: int) -> np.ndarray:
    """Runs of ``lengths`` events on one record each, records drawn from few (so neighbouring
    runs may share one: a node's record seen again after another's)."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=len(lengths))
    return np.repeat(values, lengths).astype(np.int32)


@given(_PIECES, st.integers(0, 2**16))
def test_every_way_of_indexing_gives_the_column_s_records(lengths, seed):
    """Whole, sliced, by index array, by mask and one by one: the records of the plain column."""
    rec = _records(lengths, seed)
    runs = EventRecords.of(rec)
    assert len(runs) == len(rec) and np.array_equal(runs[:], rec)
    assert np.array_equal(runs[2:-3], rec[2:-3])
    a, b = sorted(np.random.default_rng(seed).integers(0, len(rec) + 1, size=2).tolist())
    assert np.array_equal(runs[a:b], rec[a:b]) and runs[a:b].dtype == np.int32
    picks = np.random.default_rng(seed).integers(0, max(len(rec), 1), size=min(len(rec), 7))
    assert np.array_equal(runs[picks], rec[picks])
    assert np.array_equal(runs[rec % 2 == 0], rec[rec % 2 == 0])
    assert [int(runs[i]) for i in range(-len(rec), len(rec))] == [*rec.tolist(), *rec.tolist()]


@given(_PIECES, st.integers(0, 2**16))
def test_a_per_record_column_gathered_by_runs_is_gathered_per_event(lengths, seed):
    """``per_event`` of a per-record column is that column indexed by every event's record."""
    rec = _records(lengths, seed)
    per_record = np.random.default_rng(seed).integers(0, 100, size=6)
    assert np.array_equal(EventRecords.of(rec).per_event(per_record), per_record[rec])


@given(_PIECES, st.integers(0, 2**16))
def test_each_event_s_run_holds_its_record(lengths, seed):
    """``run_of`` puts every event in a run whose record is the event's, runs covering all."""
    rec = _records(lengths, seed)
    runs = EventRecords.of(rec)
    positions = np.arange(len(rec))
    assert np.array_equal(runs.records[runs.run_of(positions)], rec)
    assert int(runs.lengths().sum()) == len(rec)


def test_a_record_s_events_in_a_row_cost_one_run():
    """However many events a record has in a row, they cost two integers."""
    rec = np.repeat(np.arange(1000, dtype=np.int32) % 2, 60)  # alternating: no two runs merge
    runs = EventRecords.of(rec)
    assert len(runs.starts) == 1000 and runs.nbytes == 8000


def test_records_no_run_would_save_cost_what_the_column_costs():
    """A record per event (distinct messages): no starts kept, 4 bytes an event, indexed alike."""
    rec = np.arange(1000, dtype=np.int32)[::-1].copy()
    runs = EventRecords.of(rec)
    assert runs.starts is None and runs.nbytes == 4000
    assert np.array_equal(runs[::3], rec[::3]) and int(runs[-1]) == 0
    assert np.array_equal(runs.per_event(np.arange(1000) * 2), rec * 2)


@given(_PIECES, st.integers(0, 2**16), st.booleans())
def test_spans_records_are_the_column_s_over_each_span_in_turn(lengths, seed, singletons):
    """The records of spans (a window's events lane by lane; some empty) are the column's
    over each span, one after another, with or without run starts kept."""
    rec = _records(lengths, seed) if not singletons else np.arange(sum(lengths), dtype=np.int32)
    runs = EventRecords.of(rec)
    rng = np.random.default_rng(seed)
    bounds = np.sort(rng.integers(0, len(rec) + 1, size=2 * rng.integers(0, 6)))
    firsts, lasts = bounds[0::2], bounds[1::2]
    expected = [rec[a:b] for a, b in zip(firsts, lasts, strict=True)]
    found = runs.spans(firsts, lasts)
    assert found.tolist() == (np.concatenate(expected).tolist() if expected else [])
