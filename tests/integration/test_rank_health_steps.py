"""Which calls mark a step boundary: real torch optimizers, gradient accumulation, ``step()``."""

from __future__ import annotations

import itertools
import os
import time
from datetime import timedelta

import pytest

from tb_monitor import contract
from tb_monitor.rank.health import RankHealth, step
from tb_monitor.testing import capture, manual_clock

STEPS = contract.stat_tag(contract.RANK_STEP, "count")
STEPS_SO_FAR = contract.beat_tag("steps")
SINCE_STEP = contract.beat_tag("since_step_s")


def _c_step_clock() -> type:
    """The C step hook's type; the test is skipped where it is not built (it is on Linux)."""
    module = pytest.importorskip("tb_monitor.rank._stepclock")
    if not hasattr(module, "StepClock"):
        pytest.skip("the C step clock is built on Linux only")
    return module.StepClock


@pytest.fixture(params=["python", "c"])
def clock(request):
    """The step clock's two implementations: the pure-Python hook (an injected clock ticking
    1 s a reading) and the C hook (``time.perf_counter``, where ``_stepclock`` is built)."""
    if request.param == "python":
        ticks = itertools.count()
        return lambda: float(next(ticks))
    _c_step_clock()
    return time.perf_counter


@pytest.fixture
def recorded(torch, clock):
    """Run ``loop(model)`` under an installed RankHealth and return the scalars its windows and
    last heartbeat wrote, by tag."""

    def run(loop) -> dict[str, float]:
        with capture() as captured:
            recorder = RankHealth(
                window=timedelta(hours=1), heartbeat_s=3600, clock=clock
            ).install()
            assert type(recorder._step_clock).__name__ == (
                "_PyStepClock" if clock is not time.perf_counter else "StepClock"
            )
            loop(torch.nn.Linear(2, 2))
            recorder.close()
        return {scalar.tag: scalar.value for scalar in captured.scalars()}

    return run


def _stepped(torch, optimizer, model, times: int) -> None:
    for _ in range(times):
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_every_step_of_an_optimizer_is_a_boundary(torch, recorded, name):
    """Each ``step()`` of SGD, Adam or AdamW is a boundary, with no code change: five steps
    make four step times (the first boundary ends startup) and five steps so far."""

    def loop(model):
        _stepped(torch, getattr(torch.optim, name)(model.parameters(), lr=0.1), model, 5)

    scalars = recorded(loop)
    assert scalars[STEPS] == 4
    assert scalars[STEPS_SO_FAR] == 5


def test_gradient_accumulation_counts_one_step_per_optimizer_step(torch, recorded):
    """Four backward passes per ``step()`` are one step, not four (three steps: two times)."""

    def loop(model):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            for _ in range(4):
                model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()

    assert recorded(loop)[STEPS] == 2


def test_with_several_optimizers_the_first_one_seen_marks_steps(torch, recorded):
    """A GAN-style loop stepping two optimizers counts the first one's steps only (four
    boundaries: three step times)."""

    def loop(model):
        first = torch.optim.SGD(model.parameters(), lr=0.1)
        second = torch.optim.Adam(model.parameters(), lr=0.1)
        for _ in range(4):
            _stepped(torch, first, model, 1)
            _stepped(torch, second, model, 2)

    assert recorded(loop)[STEPS] == 3


def test_once_step_is_called_only_it_marks_boundaries(torch, recorded):
    """After ``tb_monitor.step()``, optimizer steps no longer count (two optimizer steps and
    three manual ones: four step times)."""

    def loop(model):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _stepped(torch, optimizer, model, 2)
        for _ in range(3):
            step()
            _stepped(torch, optimizer, model, 1)

    assert recorded(loop)[STEPS] == 4


def test_steps_after_close_are_not_recorded(torch):
    """``close()`` removes the hook: later optimizer steps cost nothing and count nothing."""
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
    recorder.close()
    model = torch.nn.Linear(2, 2)
    _stepped(torch, torch.optim.SGD(model.parameters(), lr=0.1), model, 3)
    assert recorder._steps == 0


def test_each_step_lands_in_the_window_it_was_taken_in(torch, clock):
    """Steps wait off the Stat until their window ends, yet each window counts its own (the
    first boundary only starts the clock)."""
    with capture() as captured, manual_clock() as wall:
        recorder = RankHealth(window=timedelta(seconds=10), heartbeat_s=3600, clock=clock).install()
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        _stepped(torch, optimizer, model, 3)
        wall.advance(10)
        _stepped(torch, optimizer, model, 2)
        recorder.close()
    counts = [s.value for s in captured.scalars() if s.tag == STEPS]
    assert counts == [2, 2]


def _step_at(torch, recorder_clock: list[float], times: list[float]) -> None:
    """Optimizer steps of a fresh model, each taken when the injected clock reads ``times``."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for at in times:
        recorder_clock[0] = at
        _stepped(torch, optimizer, model, 1)


def test_startup_before_the_first_step_is_not_a_step(torch):
    """A minute of startup before the first optimizer step adds no step: the first window
    holds only the times between steps."""
    now = [0.0]
    with capture() as captured:
        recorder = RankHealth(
            window=timedelta(hours=1), heartbeat_s=3600, clock=lambda: now[0]
        ).install()
        _step_at(torch, now, [60.0, 60.5, 61.0, 61.5])
        recorder.close()
    scalars = {s.tag: s.value for s in captured.scalars()}
    assert scalars[STEPS] == 3
    assert scalars[contract.stat_tag(contract.RANK_STEP, "max")] == 0.5


def test_each_window_logs_the_median_and_p95_of_its_step_times(torch):
    """Per window, ``rank/step_s.p50`` and ``.p95`` are the quantiles of that window's steps."""
    now = [0.0]
    with capture() as captured, manual_clock() as wall:
        recorder = RankHealth(
            window=timedelta(seconds=10), heartbeat_s=3600, clock=lambda: now[0]
        ).install()
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for at in [0.0, 1.0, 3.0, 6.0, 10.0, 15.0]:  # steps of 1, 2, 3, 4, 5 s
            now[0] = at
            _stepped(torch, optimizer, model, 1)
        wall.advance(10)
        for at in [25.0, 35.0]:  # 10 s each
            now[0] = at
            _stepped(torch, optimizer, model, 1)
        recorder.close()
    p50, p95 = (contract.stat_tag(contract.RANK_STEP, q) for q in ("p50", "p95"))
    windows = [(s.tag, s.value) for s in captured.scalars() if s.tag in (p50, p95)]
    assert windows == [(p50, 3.0), (p95, pytest.approx(4.8)), (p50, 10.0), (p95, 10.0)]


def test_a_heartbeat_counts_from_the_last_step_not_from_a_window_boundary(torch):
    """``rank/since_step_s`` is the time from the rank's last step to the beat, whichever
    window the step or the beat fell in (windows end at 10 s and 20 s; ``close`` beats at 22 s)."""
    with capture() as captured, manual_clock() as wall:
        start = wall.time()
        recorder = RankHealth(
            window=timedelta(seconds=10), heartbeat_s=3600, clock=lambda: wall.time() - start
        ).install()
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step_at, beat_at in ((2.0, 7.0), (11.0, 17.0)):
            wall.advance(step_at - (wall.time() - start))
            _stepped(torch, optimizer, model, 1)
            wall.advance(beat_at - step_at)
            recorder.beat()
        wall.advance(5.0)
        recorder.close()
    assert [s.value for s in captured.scalars() if s.tag == SINCE_STEP] == [5.0, 6.0, 11.0]


def test_a_forked_child_does_not_count_its_parents_steps(torch, clock):
    """A forked child (a DataLoader worker) forgets the steps its parent had not yet recorded."""
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600, clock=clock).install()
    try:
        model = torch.nn.Linear(2, 2)
        _stepped(torch, torch.optim.SGD(model.parameters(), lr=0.1), model, 3)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what it would record, and leave at once
            recorder.beat()
            os.write(write, str(recorder._steps).encode())
            os._exit(0)
        os.close(write)
        child_steps = int(os.read(read, 64).decode())
        os.waitpid(pid, 0)
        recorder.beat()
        assert (child_steps, recorder._steps) == (0, 3)
    finally:
        recorder.close()


def test_the_c_step_clock_reads_the_clock_perf_counter_reads():
    """The C hook's times and ``time.perf_counter`` share a clock: heartbeats subtract one
    from the other."""
    before = time.perf_counter()
    now = _c_step_clock().now()
    after = time.perf_counter()
    assert before <= now <= after


def test_the_c_step_clock_refuses_a_buffer_of_no_steps():
    """``StepClock(0)`` is a ValueError naming the value."""
    with pytest.raises(ValueError, match="got 0"):
        _c_step_clock()(0)
