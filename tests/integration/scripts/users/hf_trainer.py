"""A Hugging Face ``Trainer`` script as users write it, launched by torchrun on every node.

``python hf_trainer.py [--max_steps N] [--output_dir DIR]``; it knows nothing of tb_monitor. A tiny
GPT-2 built from a config (nothing downloaded) learns synthetic token sequences, DDP on CPU (gloo).
Each forward stands for real compute with a sleep of ``STEP_SLEEP_S`` seconds (default 0.02); the
rank numbered ``SLOW_RANK`` sleeps ``SLOW_FACTOR`` (default 2.0) times as long. ``TRAIN_SECONDS``
gives the step count that many seconds of ``STEP_SLEEP_S`` steps take, instead of ``--max_steps``.
"""

import argparse
import os
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, size, length, vocab_size):
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(vocab_size, (size, length), generator=generator)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, index):
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


def simulate_compute(module, inputs):
    """Stands for the compute of a model too big to run in a test."""
    seconds = float(os.environ.get("STEP_SLEEP_S", "0.02"))
    if os.environ.get("SLOW_RANK") == os.environ.get("RANK"):
        seconds *= float(os.environ.get("SLOW_FACTOR", "2.0"))
    time.sleep(seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=8)
    parser.add_argument("--output_dir", default="hf-output")
    args = parser.parse_args()

    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    model.register_forward_pre_hook(simulate_compute)
    train_seconds = os.environ.get("TRAIN_SECONDS")
    max_steps = args.max_steps
    if train_seconds:
        max_steps = max(
            1, int(float(train_seconds) / float(os.environ.get("STEP_SLEEP_S", "0.02")))
        )
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        use_cpu=True,
        ddp_backend="gloo",
        per_device_train_batch_size=4,
        max_steps=max_steps,
        logging_steps=4,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model, args=training_args, train_dataset=RandomTokens(256, 16, config.vocab_size)
    )
    result = trainer.train()
    print(
        f"[RANK{training_args.process_index}] finished after {result.global_step} steps", flush=True
    )


if __name__ == "__main__":
    main()
