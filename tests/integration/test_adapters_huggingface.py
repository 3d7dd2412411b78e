"""tb-monitor inside transformers' Trainer: ``TBMonitorCallback`` logs what ``TensorBoardCallback``
logs, fills the HParams dashboard and never flushes per ``on_log``, with the real Trainer, a tiny
GPT-2 built from a config (nothing downloaded) on CPU, read back by TensorBoard's own readers."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapter_logdirs import hparams_experiment, scalars, session_end, session_start, texts
from conftest import need

torch = need("torch")
transformers = need("transformers")

from tb_monitor import SummaryWriter  # noqa: E402
from tb_monitor.integrations.huggingface import TBMonitorCallback  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 4


class _Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.tokens = torch.randint(32, (8, 8), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class _CountingWriter(SummaryWriter):
    """Our writer, counting the flushes it is asked for."""

    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def _train(tmp_path: Path, callback: TBMonitorCallback) -> None:
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=8, n_embd=8, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        report_to="none",
        max_steps=STEPS,
        logging_steps=1,
        per_device_train_batch_size=2,
        learning_rate=0.01,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    model = transformers.GPT2LMHeadModel(config)
    trainer = transformers.Trainer(model, args, train_dataset=_Tokens(), callbacks=[callback])
    trainer.train()


def test_logs_land_under_transformers_tags(tmp_path):
    """Each step's loss is ``train/loss`` at its global step; args and config are texts."""
    _train(tmp_path, TBMonitorCallback(log_dir=tmp_path / "tb"))
    points = scalars(tmp_path / "tb")
    assert [step for step, _ in points["train/loss"]] == [1, 2, 3, 4]
    assert "train/learning_rate" in points
    logged = texts(tmp_path / "tb")
    assert '"learning_rate": 0.01' in logged["args/text_summary"][0]
    assert '"n_embd": 8' in logged["model_config/text_summary"][0]


def test_training_arguments_fill_the_hparams_dashboard(tmp_path):
    """The arguments are the run's hyperparameters, its scalars the dashboard's metrics."""
    _train(tmp_path, TBMonitorCallback(log_dir=tmp_path / "tb"))
    assert session_start(tmp_path / "tb").hparams["learning_rate"].number_value == 0.01
    assert session_end(tmp_path / "tb").status == 1  # STATUS_SUCCESS
    experiment = hparams_experiment(tmp_path / "tb")
    assert {"learning_rate", "max_steps"} <= {info.name for info in experiment.hparam_infos}
    assert "train/loss" in {info.name.tag for info in experiment.metric_infos}


def test_on_log_does_not_flush(tmp_path):
    """``on_log`` hands values to the writer's thread: no flush per call (transformers' flushes)."""
    writer = _CountingWriter(tmp_path / "tb")
    _train(tmp_path, TBMonitorCallback(tb_writer=writer))
    assert len(scalars(tmp_path / "tb")["train/loss"]) == STEPS  # on_log ran at every step
    assert writer.flushes == 0


def test_default_log_dir_is_transformers(tmp_path, monkeypatch):
    """Without a log_dir, ``$TENSORBOARD_LOGGING_DIR`` is used, as transformers' callback does."""
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "from-env"))
    _train(tmp_path, TBMonitorCallback())
    assert len(scalars(tmp_path / "from-env")["train/loss"]) == STEPS
