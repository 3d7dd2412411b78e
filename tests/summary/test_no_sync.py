"""The caller's thread never reads a tensor back: no host synchronisation, and what is written
is the tensor as it was at the call, whatever the caller does with it afterwards."""

from __future__ import annotations

import threading

import pytest
from conftest import need
from summary_events import events_by_run
from test_tensors import Spy

from tb_monitor import SummaryWriter

torch = need("torch")
np = need("numpy")
from torch.utils.tensorboard import SummaryWriter as TorchWriter  # noqa: E402


def _log_everything(writer, make, make_scalar=None) -> None:
    """One call of each method that takes tensors, each on a fresh tensor from ``make``
    (one-element scalars from ``make_scalar``, by default ``make`` too)."""
    make_scalar = make_scalar or make
    writer.add_scalar("s", make_scalar(()), 1)
    writer.add_scalars("m", {"a": make_scalar(()), "b": make_scalar((1,))}, 1)
    writer.add_tensor("t", make((2, 3)), 1)
    writer.add_histogram("h", make((100,)), 1)
    writer.add_image("i", make((3, 4, 4)), 1)
    writer.add_audio("a", make((50,)), 1)
    writer.add_pr_curve("pr", make((8,)) > 0.5, make((8,)), 1)
    writer.add_mesh("mesh", make((1, 3, 3)), global_step=1)
    writer.add_hparams({"lr": 0.1}, {"acc": make_scalar(())}, run_name="hp")


def _spied(shape: tuple[int, ...]) -> Spy:
    return torch.rand(shape, generator=torch.Generator().manual_seed(1)).as_subclass(Spy)


def test_no_tensor_is_read_on_the_callers_thread(tmp_path):
    """Every method taking tensors leaves their reading to the writer's thread (but for a
    one-element CPU scalar, read at once: CPU ops are done when they return, so reading one
    waits on nothing; on a GPU a scalar is captured like the rest, test_cuda_* below)."""
    Spy.reads.clear()
    caller = threading.get_ident()
    with SummaryWriter(tmp_path) as writer:
        _log_everything(writer, _spied, lambda shape: torch.rand(shape))
        on_caller = [name for name, thread in Spy.reads if thread == caller]
    assert on_caller == []
    assert any(thread != caller for _, thread in Spy.reads)  # read, on the writer's thread


def test_what_is_written_is_the_tensor_at_the_call(tmp_path):
    """Tensors and arrays changed in place after the call are written as they were."""
    for kind, cls in (("torch", TorchWriter), ("ours", SummaryWriter)):
        weights, buffer, loss = torch.ones(1000), np.ones(10), torch.tensor(2.0)
        with cls(tmp_path / kind) as writer:
            writer.add_histogram("w", weights, 1)
            writer.add_histogram("b", buffer, 1)
            writer.add_scalar("loss", loss, 1)
            writer.add_tensor("t", weights[:4], 1)
            weights.mul_(5)
            buffer[:] = 7
            loss.add_(1)
    assert events_by_run(tmp_path / "ours") == events_by_run(tmp_path / "torch")


def _log_cuda(writer) -> None:
    values = torch.arange(1000, device="cuda", dtype=torch.float32) / 7
    for step in range(3):
        writer.add_scalar("loss", values[step], step)
        writer.add_tensor("t", values[:6], step)
        writer.add_histogram("h", values * step, step)
        values.add_(1)  # in place, on the device, after each call


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_logged_without_a_host_synchronisation(tmp_path):
    """With sync debug mode "error", scalars, tensors and histograms of CUDA tensors log, and
    every value reaches the logdir as torch's writer (which syncs) writes it."""
    with SummaryWriter(tmp_path / "ours") as writer:
        torch.cuda.set_sync_debug_mode("error")
        try:
            _log_cuda(writer)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert writer.dropped == 0
    with TorchWriter(tmp_path / "torch") as writer:
        _log_cuda(writer)
    assert events_by_run(tmp_path / "ours") == events_by_run(tmp_path / "torch")
