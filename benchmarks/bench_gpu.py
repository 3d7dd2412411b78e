"""What logging per-step GPU values costs a training step: .item() + each library vs tensors in.

A GPT-like model (about 68M parameters, bf16) trains on random tokens; every step logs 11 values,
3 of them GPU tensors (loss, grad norm, a logit statistic). Variants, interleaved round by round,
medians of several rounds, at two batch sizes (GPU-bound and balanced):

    none            no logging at all
    item            .item() on the 3 tensors, no library (the sync alone)
    summarywriter   .item() + torch.utils.tensorboard.SummaryWriter.add_scalar
    tensorboardx    .item() + tensorboardX.SummaryWriter.add_scalar
    torch.monitor   .item() + torch.monitor Stats with its TensorboardEventHandler
    tb-monitor      .item() + tb_monitor Stat.add / put_metric (floats)
    tb-monitor-t    tb_monitor Stat.add / put_metric given the tensors themselves (no sync)
    floor           values kept on the GPU, read back once every 100 steps

Printed: step time per variant and its overhead over "none", in percent, and a check that every
per-step value of "tb-monitor-t" reached the logdir. Without CUDA it prints
"no CUDA device: skipped" (``--device cpu`` runs a tiny model, to check the script itself).

    python benchmarks/bench_gpu.py [--rounds 5] [--steps 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta

VARIANTS = [
    "none",
    "item",
    "summarywriter",
    "tensorboardx",
    "torch.monitor",
    "tb-monitor",
    "tb-monitor-t",
    "floor",
]
FLOATS_PER_STEP = 8  # besides the 3 tensors: lr, step, tokens/s, ...


def _model(torch, device: str, tiny: bool):
    nn = torch.nn
    vocab, width, layers, heads = (512, 64, 2, 4) if tiny else (32000, 768, 8, 12)

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            layer = nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True)
            self.body = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(width, vocab)

        def forward(self, tokens):
            mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=device)
            return self.head(self.body(self.embed(tokens), mask=mask, is_causal=True))

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = GPT().to(device=device, dtype=dtype)
    return model, vocab


class Loggers:
    """One logging function per variant, each with its own sink in a temporary logdir."""

    def __init__(self, logdir: str) -> None:
        import tensorboardX
        import torch.monitor as tm
        from torch.utils.tensorboard import SummaryWriter

        import tb_monitor
        from tb_monitor.elastic.metrics import put_metric

        self.step = 0
        self.sw = SummaryWriter(f"{logdir}/summarywriter")
        self.tbx = tensorboardX.SummaryWriter(f"{logdir}/tensorboardx")
        self.tm_handle = tm.register_event_handler(tm.TensorboardEventHandler(self.tbx))
        self.tm_stats = [
            tm.Stat(f"tm{i}", [tm.Aggregation.MEAN], timedelta(seconds=10)) for i in range(11)
        ]
        self.monitor = tb_monitor.init(f"{logdir}/tb-monitor")
        self.ours = [
            tb_monitor.Stat(f"v{i}", [tb_monitor.Aggregation.MEAN], timedelta(seconds=10))
            for i in range(11)
        ]
        self.put_metric = put_metric
        self.kept: list = []
        self.per_step_tensors = 0

    def log(self, variant: str, tensors: list, floats: list[float]) -> None:
        self.step += 1
        if variant == "none":
            return
        if variant == "floor":
            self.kept.append(tensors)
            if len(self.kept) == 100:
                import torch

                torch.stack([torch.stack(t) for t in self.kept]).float().cpu()
                self.kept.clear()
            return
        if variant == "tb-monitor-t":
            for stat, value in zip(self.ours, [*tensors, *floats], strict=False):
                stat.add(value)
            for i, value in enumerate(tensors):
                self.put_metric(f"t{i}", value, "gpu")
            self.per_step_tensors += 1
            return
        values = [t.item() for t in tensors] + floats
        if variant == "item":
            return
        if variant == "summarywriter":
            for i, v in enumerate(values):
                self.sw.add_scalar(f"v{i}", v, self.step)
        elif variant == "tensorboardx":
            for i, v in enumerate(values):
                self.tbx.add_scalar(f"v{i}", v, self.step)
        elif variant == "torch.monitor":
            for stat, v in zip(self.tm_stats, values, strict=True):
                stat.add(v)
        elif variant == "tb-monitor":
            for stat, v in zip(self.ours, values, strict=True):
                stat.add(v)
            for i, v in enumerate(values[:3]):
                self.put_metric(f"f{i}", v, "gpu")

    def close(self) -> None:
        import torch.monitor as tm

        self.monitor.close()
        tm.unregister_event_handler(self.tm_handle)
        self.sw.close()
        self.tbx.close()


def _steps(torch, model, vocab, batch: int, device: str, steps: int, log: Callable) -> float:
    """Seconds per step over ``steps`` steps, logging through ``log``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, vocab, (batch, 256), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for step in range(steps):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), tokens[:, 1:].flatten()
        )
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        spread = logits.detach()[:, -1].float().std()
        log([loss.detach(), norm, spread], [1e-4, float(step), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    sync()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 16])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return
    tiny = args.device == "cpu"
    model, vocab = _model(torch, args.device, tiny)
    batches = [2] if tiny else args.batches
    with tempfile.TemporaryDirectory() as logdir:
        loggers = Loggers(logdir)
        for batch in batches:
            _steps(torch, model, vocab, batch, args.device, 10, lambda t, f: None)  # warm up
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(args.rounds):
                for variant in VARIANTS:  # interleaved: drift hits every variant alike
                    per_step = _steps(
                        torch,
                        model,
                        vocab,
                        batch,
                        args.device,
                        args.steps,
                        lambda t, f, v=variant: loggers.log(v, t, f),
                    )
                    times[variant].append(per_step)
            base = statistics.median(times["none"])
            print(f"batch {batch}: step time, median of {args.rounds} rounds x {args.steps} steps")
            for variant in VARIANTS:
                median = statistics.median(times[variant])
                overhead = (median / base - 1) * 100
                print(f"  {variant:<15} {median * 1e3:9.2f} ms   {overhead:+6.1f}%")
            floor = statistics.median(times["floor"])
            ours = statistics.median(times["tb-monitor-t"])
            print(
                f"  tb-monitor-t vs floor: {(ours - floor) / base * 100:+.2f} points (goal <= 0.5)"
            )
        expected = loggers.per_step_tensors
        loggers.close()
        import tb_monitor

        scalars = tb_monitor.read_scalars(f"{logdir}/tb-monitor")
        landed = int((scalars.tag == "gpu/t0").sum())
        print(f"per-step values of tb-monitor-t in the logdir: {landed} of {expected}")
        if landed != expected:
            sys.exit("values were lost")


if __name__ == "__main__":
    main()
