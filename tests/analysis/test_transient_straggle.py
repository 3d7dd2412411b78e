"""Slow batches between pauses are no straggler: the fault campaign's heavy data loading (seed
71, case 18) flagged rank 1 of a two-rank Hugging Face job with 1-s windows. Its slow disk reads
(8 to rank 0's 3, drawn at random) made it the slower rank in three windows with steps, between
windows where neither rank stepped; over the job it is the median rank. With two ranks the
median is their mean, so one slow batch puts a rank near x2 in its window. A window in which a
rank of short steps ended none is a pause (of the job, or of the rank alone: a long garbage
collection), and breaks its run of slow windows (``scoring.counted_windows``); for steps longer
than half a window it does not."""

from __future__ import annotations

import numpy as np
import pytest

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.testing import DEFAULT_START, rank_window_scalars

#: Rank 1's compute over the two ranks' mean in each 1-s window of that job (None: no step
#: ended in the window, on either rank); rank 0's is 2 minus it.
RANK_1 = (0.59, 0.99, 1.0, None, None, 0.05, 1.68, 0.72, None, None, 0.04, None, 1.95, 1.0)
RANK_1 += (1.01, 1.22, 0.96, 1.44, None, None, 1.82, None, 1.6, 1.01, 0.99, 1.68, 0.99, 1.46)


def _grid(shares, step_s: float = 0.1, paused: tuple[int, ...] = (0, 1)) -> RankGrid:
    """Two ranks' 1-s windows: rank 1's compute over their mean is ``shares`` (None: the ranks
    ``paused`` ended no step, the other one stepped as usual), each window's steps ``step_s``
    long."""
    series = {}
    for rank in (0, 1):
        tags: dict[str, tuple[list[float], list[float]]] = {}
        for window, share in enumerate(shares):
            if share is None and rank in paused:
                continue
            share = 1.0 if share is None else share
            compute = step_s / 2 * (share if rank == 1 else 2.0 - share)
            wall = DEFAULT_START + window + 1.004
            scalars = rank_window_scalars(compute, step_s - compute, max(1, round(1 / step_s)))
            for tag, value in scalars.items():
                tags.setdefault(tag, ([], []))[0].append(wall)
                tags[tag][1].append(value)
        series[f"job/rank-{rank}"] = {t: (np.array(w), np.array(v)) for t, (w, v) in tags.items()}
    return RankGrid.from_series(series, window_s=1.0)


def test_the_ranks_take_turns_being_slower():
    """The job as read: each rank slower in some windows, rank 1 the median rank overall."""
    scores = {s.rank: s for s in _grid(RANK_1).scores()}
    assert scores[1].relative == pytest.approx(1.0, abs=0.05)
    assert scores[0].windows_over == scores[1].windows_over == 1


def test_a_run_of_slow_batches_is_no_straggler():
    """Three 1-s windows of slow batches, spread over 6 s by pauses: no straggler."""
    assert _grid(RANK_1).stragglers() == []


def test_slow_steps_around_one_ranks_pauses_are_no_straggler():
    """Rank 1 pauses (a long garbage collection: rank 0 steps on till it waits) and is slow
    in the window after each pause: no straggler."""
    shares = (1.0, None, 1.9, None, 1.8, None, 1.9, 1.0)
    assert _grid(shares, paused=(1,)).stragglers() == []


def test_a_slow_rank_is_flagged_again_after_a_pause():
    """A rank x1.5 in three windows in a row after a pause of the job is flagged."""
    shares = (1.0, 1.5, None, None, 1.5, 1.5, 1.5, 1.0)
    assert [s.rank for s in _grid(shares).stragglers()] == [1]


def test_windows_between_long_steps_break_no_run():
    """In a job of 2-s steps (a step ends every other 1-s window) a rank x1.5 in three windows
    with steps, empty windows between them, is flagged."""
    shares = (1.5, None, 1.5, None, 1.5, None)
    assert [s.rank for s in _grid(shares, step_s=2.0).stragglers()] == [1]


def test_the_same_windows_without_pauses_flag_the_rank():
    """Rank 1's three slow windows, the pauses between them gone: it is flagged."""
    assert [s.rank for s in _grid((1.0, 1.44, 1.82, 1.6, 1.0)).stragglers()] == [1]
