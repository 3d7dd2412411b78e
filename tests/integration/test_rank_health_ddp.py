"""Stragglers under DDP with no change to the user's script: the wait for DDP's gradient
all-reduces (``tb_monitor.rank.grad_wait``) tells the slow rank.

In-process: a one-rank gloo group, to show what the timing does to a job (nothing) and what it
records. The real jobs are elsewhere: DDP's slow rank is ``test_users_jobs``'s user-style script;
FSDP's (both versions, their own all-gathers and reduce-scatters) are the fault campaign's CI
sample (``test_fault_campaign``: a rank stopped from outside on FSDP1, one held to a CPU quota on
FSDP2).
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from tb_monitor import contract
from tb_monitor.rank.grad_wait import GradWait
from tb_monitor.rank.health import RankHealth
from tb_monitor.testing import capture

GRAD_WAITS = contract.stat_tag(contract.RANK_GRAD_WAIT, "count")

# -- in-process: a one-rank gloo group ---------------------------------------------------------


@pytest.fixture(scope="module")
def _module_group(tmp_path_factory):
    """One one-rank gloo process group for this module's in-process tests, destroyed once at
    its end: gloo's teardown deadlocked in torch once in ~80 destroys here (its thread waiting
    for the GIL the destroying thread held), so the module pays for one destroy, not eight."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    store = dist.FileStore(str(tmp_path_factory.mktemp("group") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


@pytest.fixture
def group(torch, _module_group):
    """The module's one-rank gloo process group."""
    return _module_group


def _train(torch, model, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def _ddp(torch):
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))


def test_each_backward_of_a_ddp_built_after_install_records_its_gradient_wait(torch, group):
    """A DDP model the script builds itself: one gradient wait a backward, nothing to call."""
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        _train(torch, _ddp(torch), 5)
        recorder.close()
    assert {s.tag: s.value for s in captured.scalars()}[GRAD_WAITS] == 5


@pytest.mark.parametrize(
    "options",
    [{"find_unused_parameters": True}, {"static_graph": True}, {"gradient_as_bucket_view": True}],
    ids=lambda options: next(iter(options)),
)
def test_ddps_options_train_as_before_and_each_backward_is_timed(torch, group, options):
    """Unused-parameter search, a static graph, bucket views: one wait a backward, and the
    same parameters as an untimed twin trained alike."""
    waits: list[float] = []
    torch.manual_seed(0)
    twin = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **options)
    timer = GradWait(waits.append).install()
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **options)
        _train(torch, model, 4)
    finally:
        timer.close()
    _train(torch, twin, 4)
    assert len(waits) == 4
    for ours, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_a_users_comm_hook_is_still_theirs_and_runs(torch, group):
    """No comm hook of ours: the script registers its own (DDP allows one) and it runs."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def counting_hook(state, bucket):
        calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)

    waits: list[float] = []
    timer = GradWait(waits.append).install()
    try:
        model = _ddp(torch)
        model.register_comm_hook(None, counting_hook)
        _train(torch, model, 3)
    finally:
        timer.close()
    assert (len(calls), len(waits)) == (3, 3)


def test_a_users_exception_in_backward_still_reaches_them(torch, group):
    """An error raised in the user's comm hook propagates out of ``backward`` unchanged."""

    def failing_hook(state, bucket):
        raise ValueError("the user's own error")

    timer = GradWait(lambda seconds: None).install()
    try:
        model = _ddp(torch)
        model.register_comm_hook(None, failing_hook)
        with pytest.raises(Exception, match="the user's own error"):
            model(torch.ones(2, 4)).sum().backward()
    finally:
        timer.close()


def test_a_fault_in_recording_is_a_warning_and_training_goes_on(torch, group, caplog):
    """Our recording raising: one warning, every backward completes, no more timing."""

    def broken(seconds: float) -> None:
        raise RuntimeError("sink gone")

    timer = GradWait(broken).install()
    try:
        model = _ddp(torch)
        with caplog.at_level(logging.WARNING, logger="tb_monitor"):
            _train(torch, model, 3)
        assert all(p.grad is None for p in model.parameters())  # zeroed after each step()
    finally:
        timer.close()
    assert [r.getMessage().count("no longer timed") for r in caplog.records] == [1]


def test_close_puts_ddp_back_as_it_was(torch, group):
    """After ``close``: DDP's constructor is torch's again, and no backward is timed."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    waits: list[float] = []
    timer = GradWait(waits.append).install()
    model = _ddp(torch)
    assert DistributedDataParallel.__init__ is not original
    timer.close()
    _train(torch, model, 2)
    assert DistributedDataParallel.__init__ is original and waits == []


class _StandInEvent:
    """A timing CUDA event as the device path uses it, on CPU: 3 ms after its start, and done
    once the stand-in GPU has passed it (``gpu_done``, up to a number of events recorded)."""

    recorded = 0
    gpu_done = 0
    synchronized = 0

    def record(self) -> None:
        _StandInEvent.recorded += 1
        self.number = _StandInEvent.recorded

    def query(self) -> bool:
        return self.number <= _StandInEvent.gpu_done

    def synchronize(self) -> None:
        _StandInEvent.synchronized += 1

    def elapsed_time(self, end: _StandInEvent) -> float:
        return 3.0


def _cuda_timer(waits: list[float], capturing: bool = False) -> GradWait:
    """A GradWait that takes every model for a CUDA one, with stand-in events."""
    _StandInEvent.recorded = _StandInEvent.gpu_done = _StandInEvent.synchronized = 0
    return GradWait(
        waits.append,
        on_cuda=lambda param: True,
        cuda_event=_StandInEvent,
        capturing=lambda: capturing,
    ).install()


def test_on_cuda_each_wait_is_read_once_the_gpu_is_past_its_events(torch, group):
    """A CUDA model's wait is the time between two events, read by a later backward once the
    GPU is done with them, oldest first; nothing waits for the GPU."""
    waits: list[float] = []
    timer = _cuda_timer(waits)
    try:
        model = _ddp(torch)
        _train(torch, model, 2)  # the stand-in GPU is behind: nothing to read yet
        assert waits == []
        _StandInEvent.gpu_done = 4  # past both backwards' events
        _train(torch, model, 1)
        assert waits == [0.003, 0.003]
    finally:
        timer.close()
    assert _StandInEvent.synchronized == 0


def test_on_cuda_the_events_are_reused(torch, group):
    """Read events are recorded again: two events in all while the GPU keeps up."""
    made = []

    class Event(_StandInEvent):
        def __init__(self) -> None:
            made.append(self)

        def query(self) -> bool:
            return True

    waits: list[float] = []
    _StandInEvent.recorded = 0
    timer = GradWait(
        waits.append, on_cuda=lambda param: True, cuda_event=Event, capturing=lambda: False
    ).install()
    try:
        _train(torch, _ddp(torch), 5)
    finally:
        timer.close()
    assert (len(waits), len(made)) == (5, 2)


def test_no_event_is_recorded_into_a_cuda_graph_capture(torch, group):
    """While the stream captures a graph, the device path records nothing."""
    waits: list[float] = []
    timer = _cuda_timer(waits, capturing=True)
    try:
        _train(torch, _ddp(torch), 2)
    finally:
        timer.close()
    assert (_StandInEvent.recorded, waits) == (0, [])
