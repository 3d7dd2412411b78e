"""A Lightning training script as users write it, launched by torchrun on every node.

``python lightning_trainer.py [--devices 2] [--num_nodes 2] [--max_epochs N]``; it knows nothing of
tb_monitor. A tiny regression model on synthetic data, DDP on CPU (gloo). The forward stands for real
compute with a sleep of ``STEP_SLEEP_S`` seconds (default 0.02); the rank numbered ``SLOW_RANK``
sleeps ``SLOW_FACTOR`` (default 2.0) times as long. ``TRAIN_SECONDS`` bounds training by time
(Lightning's ``max_time``, which every rank agrees on) instead of epochs.
"""

import argparse
import os
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, compute_seconds=0.02, slow_rank=-1, slow_factor=2.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )

    def forward(self, x):
        seconds = self.hparams.compute_seconds
        if self.global_rank == self.hparams.slow_rank:
            seconds *= self.hparams.slow_factor
        time.sleep(seconds)
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def train_dataloader(batch_size):
    generator = torch.Generator().manual_seed(0)
    dataset = TensorDataset(
        torch.rand(512, 20, generator=generator), torch.rand(512, 1, generator=generator)
    )
    return DataLoader(dataset, batch_size=batch_size)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num_nodes", type=int, default=2)
    parser.add_argument("--max_epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()

    model = Regressor(
        compute_seconds=float(os.environ.get("STEP_SLEEP_S", "0.02")),
        slow_rank=int(os.environ.get("SLOW_RANK", "-1")),
        slow_factor=float(os.environ.get("SLOW_FACTOR", "2.0")),
    )
    train_seconds = os.environ.get("TRAIN_SECONDS")
    trainer = L.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=args.devices,
        num_nodes=args.num_nodes,
        max_epochs=-1 if train_seconds else args.max_epochs,
        max_time={"seconds": float(train_seconds)} if train_seconds else None,
        enable_progress_bar=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, train_dataloader(args.batch_size))
    print(f"[RANK{trainer.global_rank}] finished after {trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
