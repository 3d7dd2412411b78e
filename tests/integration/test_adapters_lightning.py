"""tb-monitor inside Lightning: ``TBMonitorLogger`` writes every rank's run, fills the HParams
dashboard, and ``RankHealthCallback`` feeds step times to rank health, with the real Lightning,
a tiny model on CPU, and the logdir read back by TensorBoard's own readers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from adapter_logdirs import hparams_experiment, scalars, session_end, session_start
from conftest import need

from tb_monitor import contract

L = need("lightning.pytorch")
torch = need("torch")

from tb_monitor.integrations.lightning import RankHealthCallback, TBMonitorLogger  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
STEP_COUNT = contract.stat_tag(contract.RANK_STEP, "count")


class Regressor(L.LightningModule):
    """A linear regression; ``manual`` steps its optimizer itself in ``training_step``."""

    def __init__(self, lr: float = 0.1, manual: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = not manual
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        if not self.automatic_optimization:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _batches(count: int):
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.rand(count * 2, 4, generator=generator), torch.rand(count * 2, 1, generator=generator)
    )
    return torch.utils.data.DataLoader(data, batch_size=2)


def _fit(tmp_path: Path, model, logger=None, callbacks=(), **trainer_args) -> None:
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=logger if logger is not None else False,
        callbacks=list(callbacks),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        **trainer_args,
    )
    trainer.fit(model, _batches(8))


def test_logger_writes_metrics_to_this_ranks_run(tmp_path):
    """Metrics land as scalars at Lightning's steps in ``<name>/version_0/rank-0``."""
    _fit(tmp_path, Regressor(), TBMonitorLogger(tmp_path / "logs"))
    points = scalars(tmp_path / "logs" / "lightning_logs" / "version_0" / "rank-0")
    assert [step for step, _ in points["train_loss"]] == list(range(8))
    assert "epoch" in points


def test_log_hyperparams_fills_the_hparams_dashboard(tmp_path):
    """The model's hyperparameters and the run's scalars make the HParams experiment."""
    _fit(tmp_path, Regressor(lr=0.05), TBMonitorLogger(tmp_path / "logs", name="exp"))
    run = tmp_path / "logs" / "exp" / "version_0" / "rank-0"
    start = session_start(run)
    assert start.hparams["lr"].number_value == 0.05
    assert start.group_name == "exp/version_0"
    assert session_end(run).status == 1  # STATUS_SUCCESS
    experiment = hparams_experiment(tmp_path / "logs")
    assert {info.name for info in experiment.hparam_infos} == {"lr", "manual"}
    assert "train_loss" in {info.name.tag for info in experiment.metric_infos}


def test_nested_and_non_number_hyperparameters_are_flattened(tmp_path):
    """Nested dicts become ``outer/inner`` hyperparameters, a list its text."""
    logger = TBMonitorLogger(tmp_path)
    logger.log_hyperparams({"optimizer": {"name": "sgd", "momentum": 0.9}, "layers": [4, 1]})
    logger.finalize("success")
    hparams = session_start(tmp_path / "lightning_logs" / "version_0" / "rank-0").hparams
    assert hparams["optimizer/name"].string_value == "sgd"
    assert hparams["optimizer/momentum"].number_value == 0.9
    assert hparams["layers"].string_value == "[4, 1]"


def test_version_is_one_past_the_highest_with_runs(tmp_path):
    """Without a run id, the version follows the highest ``version_<N>`` holding runs."""
    _fit(tmp_path, Regressor(), TBMonitorLogger(tmp_path))
    (tmp_path / "lightning_logs" / "version_7").mkdir()  # no runs: not a version yet
    assert TBMonitorLogger(tmp_path).version == 1


def test_version_is_torchruns_run_id_on_every_rank(tmp_path, monkeypatch):
    """Under torchrun the run id is the version, the same on every rank; ``none`` is not."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-42")
    monkeypatch.setenv("RANK", "1")
    logger = TBMonitorLogger(tmp_path)
    assert (logger.version, logger.log_dir) == ("job-42", str(tmp_path / "lightning_logs/job-42"))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert TBMonitorLogger(tmp_path).version == 0


def test_rank_health_counts_optimizer_steps_not_batches(tmp_path):
    """With automatic optimization and accumulation, a step is an optimizer step, counted once."""
    logger = TBMonitorLogger(tmp_path / "logs")
    _fit(tmp_path, Regressor(), logger, [RankHealthCallback()], accumulate_grad_batches=2)
    counts = scalars(tmp_path / "logs" / "lightning_logs" / "version_0" / "rank-0")[STEP_COUNT]
    assert sum(value for _, value in counts) == 3  # 4 optimizer steps: the first starts the clock


def test_rank_health_counts_batches_under_manual_optimization(tmp_path):
    """Under manual optimization each batch's end is a step, without the optimizer's too."""
    _fit(tmp_path, Regressor(manual=True), callbacks=[RankHealthCallback()])
    counts = scalars(tmp_path / "rank_health" / "rank-0")[STEP_COUNT]
    assert sum(value for _, value in counts) == 8  # 8 batches, timed from the start of training


def test_rank_health_records_into_a_monitor_already_open(tmp_path):
    """With a monitor open (the script's ``init``, ``tb-monitor run``'s), steps go there."""
    import tb_monitor

    with tb_monitor.init(tmp_path / "own", torch=True):
        _fit(tmp_path, Regressor(), callbacks=[RankHealthCallback()])
    assert sum(value for _, value in scalars(tmp_path / "own")[STEP_COUNT]) == 7
    assert not (tmp_path / "rank_health").exists()


DDP_SCRIPT = """
import sys
import lightning.pytorch as L
sys.path.insert(0, {tests!r})
from test_adapters_lightning import Regressor, _batches
from tb_monitor.integrations.lightning import RankHealthCallback, TBMonitorLogger

trainer = L.Trainer(
    default_root_dir={tmp!r}, accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
    logger=TBMonitorLogger({tmp!r}), callbacks=[RankHealthCallback()], log_every_n_steps=1,
    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
)
trainer.fit(Regressor(), _batches(8))
"""


@pytest.mark.slow
def test_every_ddp_rank_writes_its_own_run(tmp_path):
    """Under DDP (2 processes, gloo) both ranks agree on the version and write metrics, step
    times and their HParams session to their own run."""
    script = tmp_path / "train.py"
    tests = str(Path(__file__).parent)
    script.write_text(textwrap.dedent(DDP_SCRIPT.format(tests=tests, tmp=str(tmp_path))))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    version = tmp_path / "lightning_logs" / "version_0"
    for rank in (0, 1):
        points = scalars(version / f"rank-{rank}")
        assert len(points["train_loss"]) == 4  # 8 batches, half on each rank
        assert sum(value for _, value in points[STEP_COUNT]) == 3
        assert session_start(version / f"rank-{rank}").group_name == "lightning_logs/version_0"
    assert sorted(path.name for path in version.iterdir()) == ["hparams.yaml", "rank-0", "rank-1"]
