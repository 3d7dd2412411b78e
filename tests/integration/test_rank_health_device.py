"""Asynchronous collectives that finish on a GPU after torch returned (NCCL): timed by the CUDA
events NCCL records, off the training thread.

Without a GPU, ``_QueuedWork`` stands in for NCCL's ``Work`` as the wrapper sees it: a future
that completes when the kernel is queued, the work itself when the test says the device is
done, and ``_get_duration`` in milliseconds. The last test drives real NCCL where CUDA is.
"""

from __future__ import annotations

import gc
import logging
import os
import time
import weakref
from datetime import timedelta

import pytest

from tb_monitor.integrations._device_works import DeviceWorks
from tb_monitor.integrations.rank_health import RankHealth
from tb_monitor.testing import capture


class _QueuedWork:
    """What NCCL's ``Work`` answers: future done at once, work done when ``finish`` is called."""

    def __init__(self, torch, duration_ms: float | None) -> None:
        self._future = torch.futures.Future()
        self._future.set_result(None)
        self._duration_ms = duration_ms
        self._done = False
        self._failure: Exception | None = None

    def finish(self) -> None:
        self._done = True

    def fail(self, failure: Exception) -> None:
        self._failure = failure

    def get_future(self):
        return self._future

    def is_completed(self) -> bool:
        if self._failure is not None:
            raise self._failure
        return self._done

    def _get_duration(self) -> float:
        if self._duration_ms is None:  # what NCCL says for a group created without timing
            raise RuntimeError("getDuration only works if timing was enabled")
        return self._duration_ms


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def recorder(torch):
    """A RankHealth with an injected clock, its collective wrapper at ``recorder.collective``
    (which returns the work it is given); ``recorder.scalars()`` closes it and returns what it
    wrote, by tag."""
    clock = _Clock()
    with capture() as captured:
        health = RankHealth(window=timedelta(hours=1), heartbeat_s=3600, clock=clock)
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
    assert scalars["rank/collective_s.count"] == 1
    assert scalars["rank/collective_s.max"] == pytest.approx(0.25)
    assert scalars["rank/left.value"] == 1


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
    assert scalars["rank/collective_s.count"] == 2
    assert scalars["rank/collective_s.max"] == pytest.approx(3.0)
    assert recorder._device_works.timed_when_seen == 2
    messages = [record.getMessage() for record in caplog.records]
    assert len([m for m in messages if "TORCH_NCCL_ENABLE_TIMING" in m]) == 1


def test_a_failed_collective_is_left_without_an_exception(torch, recorder):
    """A work whose collective failed (is_completed raises its error) has ended: it is left,
    timed to when its failure was seen, and the poller goes on."""
    failed, next_one = _QueuedWork(torch, 10.0), _QueuedWork(torch, 20.0)
    recorder.collective(failed)
    recorder.collective(next_one)
    recorder.clock.now += 2.0
    failed.fail(RuntimeError("NCCL communicator was aborted"))
    next_one.finish()
    assert recorder._device_works.poll() == 0
    scalars = recorder.scalars()
    assert scalars["rank/collective_s.count"] == 2
    assert scalars["rank/collective_s.max"] == pytest.approx(2.0)
    assert scalars["rank/left.value"] == 2


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
    works = DeviceWorks(lambda last, seconds: None, _Clock(), max_pending=2)
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        added = [works.add(_QueuedWork(torch, 1.0), seq, 0.0) for seq in (1, 2, 3, 4)]
    works.close()
    assert added == [True, True, False, False]
    assert works.timed_at_launch == 2
    assert len([r for r in caplog.records if "timed to their launch" in r.getMessage()]) == 1


def test_close_records_the_finished_works_and_lets_go_of_the_rest(torch):
    """At close the works already done are recorded; the others are released, not waited for."""
    done: list[tuple[int, list[float]]] = []
    works = DeviceWorks(lambda last, seconds: done.append((last, seconds)), _Clock())
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
    """Groups created after install record CUDA events; an explicit setting is kept."""
    monkeypatch.delenv("TORCH_NCCL_ENABLE_TIMING", raising=False)
    RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install().close()
    assert os.environ["TORCH_NCCL_ENABLE_TIMING"] == "1"
    monkeypatch.setenv("TORCH_NCCL_ENABLE_TIMING", "0")
    RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install().close()
    assert os.environ["TORCH_NCCL_ENABLE_TIMING"] == "0"


def test_a_real_nccl_all_reduce_is_timed_on_the_gpu_without_a_host_sync(torch, tmp_path):
    """On a GPU: the call returns while the GPU is still busy before the kernel, and the wait
    recorded is the kernel's span (NCCL's events), not the queue ahead of it."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("needs NCCL")
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        store = dist.FileStore(str(tmp_path / "store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        try:
            tensor = torch.ones(1 << 20, device="cuda")
            # NCCL makes its communicator on the first collective: not the one measured.
            dist.all_reduce.__tb_monitor_timed__(tensor)
            torch.cuda.synchronize()
            torch.cuda._sleep(1 << 28)  # ~0.2 s of GPU time queued ahead of the collective
            launched = time.perf_counter()
            work = dist.all_reduce(tensor, async_op=True)
            assert not work.is_completed()  # the host did not wait for the GPU
            torch.cuda.synchronize()
            waited = time.perf_counter() - launched
            recorder._device_works.poll()
        finally:
            recorder.close()
            dist.destroy_process_group()
    by_tag = {scalar.tag: scalar.value for scalar in captured.scalars()}
    assert by_tag["rank/collective_s.count"] == 1
    assert waited > 0.05
    assert 0 < by_tag["rank/collective_s.max"] < waited / 2
