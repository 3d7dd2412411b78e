"""Multi-node DDP training, written the way pytorch/examples' ddp-tutorial-series multinode.py is.

Launched by torchrun (``python ddp_multinode.py TOTAL_EPOCHS SAVE_EVERY [--batch_size N]``); it knows
nothing of tb_monitor. A tiny model on synthetic data on CPU (gloo). The model's forward stands for
real compute with a sleep of ``STEP_SLEEP_S`` seconds (default 0.02); the rank numbered ``SLOW_RANK``
sleeps ``SLOW_FACTOR`` (default 2.0) times as long, as a rank on a slower machine would. With
``EVAL_EVERY`` set, every that many epochs (not the first) each rank evaluates for ``EVAL_SECONDS``
(default 15): forward passes over its data without gradients or optimizer steps.
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        generator = torch.Generator().manual_seed(0)
        self.data = [
            (torch.rand(20, generator=generator), torch.rand(1, generator=generator))
            for _ in range(size)
        ]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


class ToyModel(torch.nn.Module):
    """A linear layer whose forward takes as long as a real model's would."""

    def __init__(self, compute_seconds):
        super().__init__()
        self.net = torch.nn.Linear(20, 1)
        self.compute_seconds = compute_seconds

    def forward(self, x):
        time.sleep(self.compute_seconds)
        return self.net(x)


def ddp_setup():
    init_process_group(backend="gloo")


def compute_seconds():
    seconds = float(os.environ.get("STEP_SLEEP_S", "0.02"))
    if os.environ.get("SLOW_RANK") == os.environ["RANK"]:
        seconds *= float(os.environ.get("SLOW_FACTOR", "2.0"))
    return seconds


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(
            f"[RANK{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}",
            flush=True,
        )
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True)

    def _evaluate(self, seconds):
        self.model.eval()
        end = time.monotonic() + seconds
        with torch.no_grad():
            while time.monotonic() < end:
                for source, targets in self.train_data:
                    F.mse_loss(self.model(source), targets)
                    if time.monotonic() >= end:
                        break
        print(f"[RANK{self.global_rank}] evaluated for {seconds:.0f} s", flush=True)
        self.model.train()

    def train(self, max_epochs):
        eval_every = int(os.environ.get("EVAL_EVERY", "0"))
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if eval_every and epoch and epoch % eval_every == 0:
                self._evaluate(float(os.environ.get("EVAL_SECONDS", "15")))
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs():
    train_set = MyTrainDataset(512)
    model = ToyModel(compute_seconds())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size):
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset)
    )


def main(save_every, total_epochs, batch_size, snapshot_path):
    ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument(
        "--batch_size", default=32, type=int, help="Input batch size on each device (default: 32)"
    )
    parser.add_argument(
        "--snapshot_path", default="snapshot.pt", help="Where to save and resume from"
    )
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size, args.snapshot_path)
