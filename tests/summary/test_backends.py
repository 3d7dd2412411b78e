"""Whose builders make the summaries: torch's, else tensorboardX's, else a clear ImportError."""

from __future__ import annotations

import sys

import pytest
from conftest import need
from summary_events import raw_events_by_run

from tb_monitor import SummaryWriter
from tb_monitor.summary import builders

np = need("numpy")
need("tensorboardX")
TorchWriter = need("torch.utils.tensorboard").SummaryWriter


@pytest.fixture
def without(monkeypatch):
    """Make the named summary modules unimportable for one test."""

    def hide(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)
        builders.backend.cache_clear()

    yield hide
    builders.backend.cache_clear()


def _log(writer) -> None:
    writer.add_scalar("s", 0.5, 1)
    writer.add_histogram("h", np.arange(100.0), 1)
    writer.add_text("t", "hi", 1)
    writer.add_image("i", np.ones((3, 4, 4)), 1)
    writer.add_scalars("m", {"a": 1.0}, 2)
    writer.add_pr_curve("pr", np.array([1, 0, 1]), np.array([0.9, 0.2, 0.4]), 1)
    writer.add_custom_scalars_multilinechart(["a", "b"])
    writer.add_hparams({"lr": 0.1}, {"acc": 0.5}, run_name="hp")


def test_without_torch_tensorboardx_builders_write_what_torch_writes(tmp_path, without):
    """With torch's builders gone, tensorboardX's build the same summaries, in torch's runs."""
    with TorchWriter(tmp_path / "torch") as writer:
        _log(writer)
    without("torch.utils.tensorboard.summary")
    with SummaryWriter(tmp_path / "ours") as writer:
        _log(writer)
        assert builders.backend().__name__ == "tensorboardX.summary"
    assert raw_events_by_run(tmp_path / "ours") == raw_events_by_run(tmp_path / "torch")


def test_without_torch_or_tensorboardx_the_error_names_the_extra(tmp_path, without):
    """Neither builder importable: an ImportError that says which extra to install."""
    without("torch.utils.tensorboard.summary", "tensorboardX.summary")
    with pytest.raises(ImportError, match=r"tb-monitor\[torch\]"):
        SummaryWriter(tmp_path)
