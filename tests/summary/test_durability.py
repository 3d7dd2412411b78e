"""Nothing accepted by tb_monitor.SummaryWriter is lost (close, SIGTERM, an object store), and
the memory its queued snapshots hold is bounded, with counted drops past the bound."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import threading

from conftest import need
from summary_events import raw_events_by_run

from tb_monitor import SummaryWriter
from tb_monitor.logdir import readers
from tb_monitor.sinks.writer import DROPPED_TAG
from tb_monitor.summary import builders
from tb_monitor.summary.pending import PendingSummary
from tb_monitor.summary.snapshot import Budget, capture

torch = need("torch")
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402


def _log(writer) -> None:
    for step in range(20):
        writer.add_scalar("loss", 1 / (step + 1), step)
        writer.add_scalars("lr", {"a": step, "b": -step}, step)
    writer.add_histogram("w", torch.arange(100.0), 1)
    writer.add_text("note", "done", 1)


def test_an_object_store_logdir_holds_what_torch_writes_locally(s3_bucket, tmp_path):
    """Every run and Event written to s3:// reads back as torch's writer writes it locally."""
    with SummaryWriter(f"{s3_bucket}/exp") as writer:
        _log(writer)
    with TorchWriter(tmp_path) as writer:
        _log(writer)
    assert raw_events_by_run(f"{s3_bucket}/exp") == raw_events_by_run(tmp_path)


def test_everything_accepted_is_on_disk_after_sigterm(tmp_path):
    """A process terminated right after logging (flush_secs=120) has every summary on disk and
    dies by the signal."""
    script = """
        import sys, time, torch
        from tb_monitor import SummaryWriter
        writer = SummaryWriter(sys.argv[1], flush_secs=120)
        for step in range(50):
            writer.add_scalar("loss", float(step), step)
        writer.add_histogram("w", torch.ones(1000), 1)
        writer.add_scalars("lr", {"a": 1.0}, 1)
        print("logged", flush=True)
        time.sleep(60)
    """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "logged\n", child.stderr.read()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == -signal.SIGTERM, child.stderr.read()
    finally:
        child.kill()
    runs = {
        (run, value.tag) for run, e in readers.iter_events(tmp_path) for value in e.summary.value
    }
    assert runs == {(".", "loss"), (".", "w"), ("lr_a", "lr")}
    assert [p.value for p in readers.iter_scalars(tmp_path) if p.tag == "loss"] == list(range(50))


def test_past_its_bytes_a_snapshot_is_dropped_and_counted():
    """Snapshots beyond the budget are dropped and counted once the wait is over; released
    bytes make room again; one larger than the whole budget still passes alone, and one of no
    bytes always does."""
    budget = Budget(max_bytes=100, stall_s=0.01)
    assert budget.reserve(80)
    assert not budget.reserve(40)
    assert budget.dropped == 1
    budget.release(80)
    assert budget.reserve(40)
    budget.release(40)
    assert budget.reserve(1000)
    assert budget.reserve(0)  # a summary holding no tensor always passes
    assert budget.held == 1000 and budget.dropped == 1


def test_a_summary_dropped_unbuilt_gives_its_bytes_back():
    """A pending summary the writer's queue drops (never built) releases what it held."""
    budget = Budget(max_bytes=1 << 20, stall_s=0.01)
    snapshot = capture(None, ("t", torch.ones(256)), {})
    assert budget.reserve(snapshot.nbytes)
    pending = PendingSummary(builders.backend().tensor_proto, snapshot, budget)
    assert budget.held == 1024
    del pending
    gc.collect()
    assert budget.held == 0


class Slow(torch.Tensor):
    """A tensor whose reading back, off the caller's thread, waits for ``go``: a slow writer."""

    go = threading.Event()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "cpu" and threading.current_thread().daemon:
            cls.go.wait(10)
        return super().__torch_function__(func, types, args, kwargs or {})


def _past_the_budget(logdir, monkeypatch) -> int:
    """Two histograms into ``logdir`` while the writer is held: the second would pass a 4 KiB
    budget. What the writer counted as dropped before it went on."""
    monkeypatch.setattr("tb_monitor.summary.writer.MAX_PENDING_BYTES", 4096)
    monkeypatch.setattr("tb_monitor.summary.writer.STALL_S", 0.0)
    Slow.go.clear()
    with SummaryWriter(logdir) as writer:
        writer.add_histogram("h", torch.ones(800).as_subclass(Slow), 1)  # 3,200 bytes held
        writer.add_histogram("h", torch.ones(800), 2)  # 6,400 would be held: dropped
        dropped = writer.dropped
        Slow.go.set()
    return dropped


def test_the_budget_counts_in_the_writers_drops(tmp_path, monkeypatch):
    """While the writer is busy, a snapshot that would pass MAX_PENDING_BYTES is dropped and
    counted in ``dropped``; what was accepted is written."""
    assert _past_the_budget(tmp_path, monkeypatch) == 1
    steps = [
        e.step for _, e in readers.iter_events(tmp_path) for v in e.summary.value if v.tag == "h"
    ]
    assert steps == [1]


def test_a_snapshot_dropped_past_the_budget_lands_in_dropped_records(tmp_path, monkeypatch):
    """A summary dropped past MAX_PENDING_BYTES is written in its run's dropped_records."""
    _past_the_budget(tmp_path, monkeypatch)
    dropped = [p.value for p in readers.iter_scalars(tmp_path) if p.tag == DROPPED_TAG]
    assert dropped == [1.0]
