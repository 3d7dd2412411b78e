"""A training loop with Hugging Face Accelerate as users write it, launched by torchrun on every
node.

``python accelerate_loop.py [--epochs N]``; it knows nothing of tb_monitor. A tiny regression
model on synthetic data; ``Accelerator(cpu=True)`` under torchrun is DDP on gloo. The forward
stands for real compute with a sleep of ``STEP_SLEEP_S`` seconds (default 0.02); the rank
numbered ``SLOW_RANK`` sleeps ``SLOW_FACTOR`` (default 2.0) times as long. ``TRAIN_SECONDS``
sets the number of steps (``TRAIN_SECONDS / STEP_SLEEP_S``) in place of ``--epochs``.
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


class Regressor(torch.nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )
        self.seconds = seconds

    def forward(self, x):
        time.sleep(self.seconds)
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True)
    seconds = float(os.environ.get("STEP_SLEEP_S", "0.02"))
    if os.environ.get("SLOW_RANK") == str(accelerator.process_index):
        seconds *= float(os.environ.get("SLOW_FACTOR", "2.0"))
    data = TensorDataset(torch.randn(512, 20), torch.randn(512, 1))
    model = Regressor(seconds)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    train_seconds = os.environ.get("TRAIN_SECONDS")
    max_steps = int(float(train_seconds) / seconds) if train_seconds else None
    step = 0
    for epoch in range(10**9 if max_steps else args.epochs):
        for inputs, targets in loader:
            loss = F.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % 20 == 0:
                accelerator.print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            if max_steps and step >= max_steps:
                break
        if max_steps and step >= max_steps:
            break
    print(f"[RANK{accelerator.process_index}] finished after {step} steps", flush=True)


if __name__ == "__main__":
    main()
