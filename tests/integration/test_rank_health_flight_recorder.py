"""A stalled rank reports the newest collective in torch's Flight Recorder (``rank/fr_seq``),
which DDP's C++ collectives pass through too: how the rank a DDP job waits for is named."""

from __future__ import annotations

from datetime import timedelta

from tb_monitor import contract
from tb_monitor._stat import end_windows
from tb_monitor.rank._flight_recorder import last_collective_seq
from tb_monitor.rank.health import RankHealth
from tb_monitor.testing import capture

FR_SEQ = contract.beat_tag("fr_seq")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _recorder(clock: _Clock, reads: list[float]) -> RankHealth:
    """A recorder on ``clock`` whose Flight Recorder reads are logged in ``reads`` (each
    returns the next collective: 41, 42, ...); no heartbeat thread, windows of an hour."""

    def read() -> int:
        reads.append(clock.now)
        return 40 + len(reads)

    return RankHealth(
        window=timedelta(hours=1),
        heartbeat_s=3600,
        clock=clock,
        flight_recorder_after_s=10.0,
        last_collective=read,
    )


def test_a_stalled_rank_reports_the_flight_recorder_until_steps_resume(torch):
    """No step for flight_recorder_after_s: each heartbeat reports the newest collective, read
    again after 1 s, then twice as long each time up to 30 s; the first heartbeat after a step
    reports -1, then nothing."""
    clock, reads = _Clock(), []
    with capture() as captured:
        recorder = _recorder(clock, reads)
        reported: list[float | None] = []
        seen = 0
        for now in (5, 12, 13, 14, 15, 17, 21, 29, 45, 75, 104, "step", 106, 110):
            if now == "step":
                recorder.manual_step()
                continue
            clock.now = float(now)
            recorder.beat()
            end_windows()  # each heartbeat in a window of its own
            values = [s.value for s in captured.scalars(FR_SEQ)]
            reported.append(values[-1] if len(values) > seen else None)
            seen = len(values)
        recorder.close()
    assert reads == [12.0, 13.0, 15.0, 21.0, 29.0, 45.0, 75.0]
    assert reported == [None, 41, 42, 42, 43, 43, 44, 45, 46, 47, 47, -1, None]


def test_a_step_between_heartbeats_withdraws_the_flight_recorder_read(torch):
    """A step that no heartbeat saw (the beats held off for longer than the stall's threshold)
    still ends the stall's read: the next heartbeat reports -1, not the old stall's collective,
    and the recorder is read again on its backed-off schedule, no sooner."""
    clock, reads = _Clock(), []
    with capture() as captured:
        recorder = _recorder(clock, reads)
        for now in (12, 13, 15, 19, 27, 43, "step", 55, 57, 74):
            if now == "step":
                clock.now = 44.0
                recorder.manual_step()
                continue
            clock.now = float(now)
            recorder.beat()
            end_windows()
        recorder.close()
    assert reads == [12.0, 13.0, 15.0, 19.0, 27.0, 43.0, 74.0]
    assert [s.value for s in captured.scalars(FR_SEQ)][-3:] == [46, -1, 47]


def test_the_flight_recorder_holds_ddp_gradient_all_reduces(torch, tmp_path):
    """torch's Flight Recorder, read as a stalled rank reads it, counts each DDP backward's
    gradient all_reduce on the default group (gloo, one rank)."""
    import torch.distributed as dist

    # The buffer keeps the entries of default groups this process destroyed (earlier tests'):
    # train past their newest sequence number first.
    stale = last_collective_seq() or 0
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        for _ in range(3 + stale):  # DDP's first iterations also rebuild its buckets (a broadcast)
            model(torch.ones(1, 4)).sum().backward()
        before = last_collective_seq()
        for _ in range(3):
            model(torch.ones(1, 4)).sum().backward()
        after = last_collective_seq()
    finally:
        dist.destroy_process_group()
    assert before is not None and after == before + 3
