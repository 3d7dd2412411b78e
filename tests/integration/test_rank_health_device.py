"""Asynchronous collectives that finish on a GPU after torch returned (NCCL): timed by the CUDA
events NCCL records, off the training thread (``TB_MONITOR_NCCL_TIMING=1``).

Without a GPU, ``_QueuedWork`` stands in for NCCL's ``Work`` as the wrapper sees it: a future
that completes when the kernel is queued, the work itself when the test says the device is
done, and ``_get_duration`` in milliseconds; the CUDA checks (is CUDA up, is this thread's
stream capturing a graph, can the poller enter thread-local capture mode) are injected. The last
test drives real NCCL where CUDA is.
"""

from __future__ import annotations

import gc
import logging
import os
import time
import weakref
from datetime import timedelta

import pytest

from tb_monitor import contract
from tb_monitor.rank._device_works import DeviceWorks
from tb_monitor.rank.health import RankHealth
from tb_monitor.testing import capture

COLLECTIVES = contract.stat_tag(contract.RANK_COLLECTIVE, "count")
LONGEST_COLLECTIVE = contract.stat_tag(contract.RANK_COLLECTIVE, "max")
LEFT = contract.beat_tag("left")


class _QueuedWork:
    """What NCCL's ``Work`` answers: future done at once, work done when ``finish`` is called."""

    def __init__(self, torch, duration_ms: float | None) -> None:
        self._future = torch.futures.Future()
        self._future.set_result(None)
        self._duration_ms = duration_ms
        self._done = False
        self._failed = False
        self.queries = 0

    def finish(self) -> None:
        self._done = True

    def fail(self) -> None:
        """NCCL's failed work: completed (with its exception), its end event never recorded."""
        self._done = self._failed = True

    def get_future(self):
        return self._future

    def is_completed(self) -> bool:
        self.queries += 1
        return self._done

    def _get_duration(self) -> float:
        if self._failed:
            raise RuntimeError("getDuration only works after the work has completed")
        if self._duration_ms is None:  # what NCCL says for a group created without timing
            raise RuntimeError("getDuration only works if timing was enabled")
        return self._duration_ms


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _works(done, clock, **options) -> DeviceWorks:
    """DeviceWorks as on a GPU outside a graph capture."""
    return DeviceWorks(done, clock, on_device=lambda: True, thread_setup=lambda: True, **options)


@pytest.fixture
def recorder(torch, monkeypatch):
    """A RankHealth timing NCCL on the GPU, with an injected clock, its collective wrapper at
    ``recorder.collective`` (which returns the work it is given); ``recorder.scalars()`` closes
    it and returns what it wrote, by tag."""
    monkeypatch.setenv("TB_MONITOR_NCCL_TIMING", "1")
    clock = _Clock()
    with capture() as captured:
        health = RankHealth(window=timedelta(hours=1), heartbeat_s=3600, clock=clock)
        health._device_works = _works(health._collectives_left, clock)
        health.clock = clock
        health.collective = health._timed(lambda work: work)

        def scalars() -> dict[str, float]:
            health.close()
            return {scalar.tag: scalar.value for scalar in captured.scalars()}

        health.scalars = scalars
        yield health
        if not health._closed:
            health.close()


def test_the_wait_is_the_cuda_events_span_once_the_device_is_done(torch, recorder):
    """A collective queued on the device is left, and timed by NCCL's events, only once done."""
    work = _QueuedWork(torch, duration_ms=250.0)
    assert recorder.collective(work) is work
    recorder.clock.now += 5.0
    assert recorder._device_works.poll() == 1
    assert (recorder._entered, recorder._left) == (1, 0)  # still on the device
    work.finish()
    recorder._device_works.poll()
    scalars = recorder.scalars()
    assert scalars[COLLECTIVES] == 1
    assert scalars[LONGEST_COLLECTIVE] == pytest.approx(0.25)
    assert scalars[LEFT] == 1


def test_without_cuda_events_the_wait_lasts_until_the_work_is_seen_done(torch, recorder, caplog):
    """A group created without TORCH_NCCL_ENABLE_TIMING: timed to when the poller saw the
    work done, with one warning that says how to get exact times."""
    works = [_QueuedWork(torch, duration_ms=None) for _ in range(2)]
    for work in works:
        recorder.collective(work)
    recorder.clock.now += 3.0
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        for work in works:
            work.finish()
        recorder._device_works.poll()
    scalars = recorder.scalars()
    assert scalars[COLLECTIVES] == 2
    assert scalars[LONGEST_COLLECTIVE] == pytest.approx(3.0)
    assert recorder._device_works.timed_when_seen == 2
    messages = [record.getMessage() for record in caplog.records]
    assert len([m for m in messages if "TORCH_NCCL_ENABLE_TIMING" in m]) == 1


def test_a_failed_collective_is_left_and_timed_to_when_it_was_seen(torch, recorder, caplog):
    """A work whose collective failed is completed but has no end event: it is left, timed to
    when its failure was seen, with no warning about timing, and the works behind it follow."""
    failed, next_one = _QueuedWork(torch, 10.0), _QueuedWork(torch, 20.0)
    recorder.collective(failed)
    recorder.collective(next_one)
    recorder.clock.now += 2.0
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        failed.fail()
        next_one.finish()
        assert recorder._device_works.poll() == 0
    scalars = recorder.scalars()
    assert scalars[COLLECTIVES] == 2
    assert scalars[LONGEST_COLLECTIVE] == pytest.approx(2.0)
    assert scalars[LEFT] == 2
    assert not caplog.records


def test_a_work_that_never_completes_is_let_go_after_give_up_s(torch):
    """A work the device never reports done does not hold up the ones behind it for ever."""
    done: list[tuple[int, list[float]]] = []
    clock = _Clock()
    works = _works(lambda last, seconds: done.append((last, seconds)), clock, give_up_s=60.0)
    stuck, after = _QueuedWork(torch, 1.0), _QueuedWork(torch, 2.0)
    works.add(stuck, 1, clock())
    works.add(after, 2, clock())
    after.finish()
    clock.now += 59.0
    assert works.poll() == 2
    clock.now += 1.0
    assert works.poll() == 0
    works.close()
    assert done == [(2, [60.0, 0.002])]
    assert works.given_up == 1


def test_while_its_stream_captures_a_graph_the_work_is_not_queried(torch):
    """During a CUDA graph capture (or without CUDA) the training thread never queries a work's
    events, which would invalidate the capture: the collective is timed to its launch."""
    works = DeviceWorks(lambda last, seconds: None, _Clock(), on_device=lambda: False)
    work = _QueuedWork(torch, 1.0)
    assert works.add(work, 1, 0.0) is False
    assert work.queries == 0
    works.close()


def test_a_poller_that_cannot_leave_global_capture_mode_polls_nothing(torch, caplog):
    """Where CUDA's thread-local capture mode cannot be set, the poller's queries could break
    another thread's capture: it lets go of its works and later ones are timed to launch."""
    works = DeviceWorks(
        lambda last, seconds: None, _Clock(), on_device=lambda: True, thread_setup=lambda: False
    )
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        works.add(_QueuedWork(torch, 1.0), 1, 0.0)
        works._thread.join(timeout=10)
    assert works.add(_QueuedWork(torch, 1.0), 2, 0.0) is False
    assert "thread-local capture mode" in caplog.text


def test_the_poller_waits_poll_s_between_looks(torch):
    """While a work runs on the device the poller looks at it every ``poll_s``, not in a spin,
    also after add() woke it."""
    works = _works(lambda last, seconds: None, _Clock(), poll_s=0.05)
    running = _QueuedWork(torch, 1.0)
    works.add(running, 1, 0.0)
    works.add(_QueuedWork(torch, 1.0), 2, 0.0)
    time.sleep(0.5)
    works.close()
    assert 3 <= running.queries <= 40  # ~10 looks; a spinning poller makes tens of thousands


def test_by_default_an_nccl_work_is_timed_to_its_launch(torch, monkeypatch):
    """Without TB_MONITOR_NCCL_TIMING, nothing is held or polled, and NCCL's timing is left as
    the environment has it."""
    monkeypatch.delenv("TB_MONITOR_NCCL_TIMING", raising=False)
    monkeypatch.delenv("TORCH_NCCL_ENABLE_TIMING", raising=False)
    recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
    work = _QueuedWork(torch, 1.0)
    try:
        assert recorder._timed(lambda: work)() is work
        assert recorder._left == 1 and work.queries == 0
    finally:
        recorder.close()
    assert "TORCH_NCCL_ENABLE_TIMING" not in os.environ


def test_the_poller_thread_records_a_work_without_being_asked(torch, recorder):
    """The daemon thread, not the training thread, sees the work done and records it."""
    work = _QueuedWork(torch, duration_ms=40.0)
    recorder.collective(work)
    work.finish()
    deadline = time.monotonic() + 10
    while recorder._left != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder._left == 1
    assert recorder._device_works._thread.name == "tb_monitor-device-works"


def test_past_max_pending_a_collective_is_timed_to_its_launch_with_one_warning(torch, caplog):
    """Held works keep their tensors alive, so at most ``max_pending`` are held; the rest are
    counted and the caller times them at once."""
    works = _works(lambda last, seconds: None, _Clock(), max_pending=2)
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        added = [works.add(_QueuedWork(torch, 1.0), seq, 0.0) for seq in (1, 2, 3, 4)]
    works.close()
    assert added == [True, True, False, False]
    assert works.timed_at_launch == 2
    assert len([r for r in caplog.records if "timed to their launch" in r.getMessage()]) == 1


def test_close_records_the_finished_works_and_lets_go_of_the_rest(torch):
    """At close the works already done are recorded; the others are released, not waited for."""
    done: list[tuple[int, list[float]]] = []
    works = _works(lambda last, seconds: done.append((last, seconds)), _Clock())
    finished, running = _QueuedWork(torch, 5.0), _QueuedWork(torch, 5.0)
    works.add(finished, 1, 0.0)
    works.add(running, 2, 0.0)
    finished.finish()
    released = weakref.ref(running)
    del running
    works.close()
    gc.collect()
    assert done == [(1, [0.005])]
    assert released() is None
    assert works.add(_QueuedWork(torch, 5.0), 3, 0.0) is False


def test_install_asks_nccl_for_cuda_events_unless_the_environment_says_otherwise(
    torch, monkeypatch
):
    """With TB_MONITOR_NCCL_TIMING=1, groups created after install record CUDA events; an
    explicit setting is kept."""
    monkeypatch.setenv("TB_MONITOR_NCCL_TIMING", "1")
    monkeypatch.delenv("TORCH_NCCL_ENABLE_TIMING", raising=False)
    RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install().close()
    assert os.environ["TORCH_NCCL_ENABLE_TIMING"] == "1"
    monkeypatch.setenv("TORCH_NCCL_ENABLE_TIMING", "0")
    RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install().close()
    assert os.environ["TORCH_NCCL_ENABLE_TIMING"] == "0"


def test_a_real_nccl_collective_is_timed_on_the_gpu_without_a_host_sync(
    torch, tmp_path, monkeypatch
):
    """On a GPU: the call returns while the GPU is still busy before the kernel, and the time
    recorded is the kernel's span (NCCL's events), not the queue ahead of it."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("needs NCCL")
    monkeypatch.setenv("TB_MONITOR_NCCL_TIMING", "1")
    monkeypatch.delenv("TORCH_NCCL_ENABLE_TIMING", raising=False)
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        try:
            # Out of place: with one rank, NCCL skips an in-place collective (no kernel).
            tensor = torch.ones(1 << 20, device="cuda")
            gathered = torch.empty_like(tensor)
            # NCCL makes its communicator on the first collective: not the one measured.
            dist.all_gather_into_tensor.__tb_monitor_timed__(gathered, tensor)
            torch.cuda.synchronize()
            torch.cuda._sleep(1 << 28)  # ~0.2 s of GPU time queued ahead of the collective
            launched = time.perf_counter()
            work = dist.all_gather_into_tensor(gathered, tensor, async_op=True)
            assert not work.is_completed()  # the host did not wait for the GPU
            torch.cuda.synchronize()
            waited = time.perf_counter() - launched
            recorder._device_works.poll()
        finally:
            recorder.close()
            dist.destroy_process_group()
    by_tag = {scalar.tag: scalar.value for scalar in captured.scalars()}
    assert by_tag[COLLECTIVES] == 1
    assert waited > 0.05
    assert 0 <= by_tag[LONGEST_COLLECTIVE] < waited / 2


GRAD_WAITS = contract.stat_tag(contract.RANK_GRAD_WAIT, "count")
LONGEST_GRAD_WAIT = contract.stat_tag(contract.RANK_GRAD_WAIT, "max")


def test_a_cuda_ddp_backwards_gradient_wait_is_timed_by_events_without_a_host_sync(
    torch, tmp_path, monkeypatch
):
    """On a GPU, a DDP model on NCCL: every backward's gradient wait is recorded from the CUDA
    events on the stream, and nothing of ours synchronises the host while the backward runs."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import warnings

    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("needs NCCL")
    monkeypatch.delenv("TB_MONITOR_NCCL_TIMING", raising=False)  # the default times it so
    steps = 6
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        try:
            model = torch.nn.parallel.DistributedDataParallel(
                torch.nn.Linear(1024, 1024).cuda(), device_ids=[0]
            )
            batch = torch.ones(64, 1024, device="cuda")
            model(batch).sum().backward()  # NCCL's communicator and DDP's buckets: not measured
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    for _ in range(steps - 1):
                        model(batch).sum().backward()
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            recorder._grad_wait.read_done()
        finally:
            recorder.close()
            dist.destroy_process_group()
    ours = [w for w in seen if "tb_monitor" in str(w.filename)]
    assert ours == [], [str(w.message) for w in ours]
    by_tag = {scalar.tag: scalar.value for scalar in captured.scalars()}
    assert by_tag[GRAD_WAITS] == steps
    assert 0 <= by_tag[LONGEST_GRAD_WAIT] < 5.0
