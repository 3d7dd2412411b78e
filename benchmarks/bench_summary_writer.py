"""tb_monitor.SummaryWriter against torch's and tensorboardX's writers, side by side in one run.

- Caller's time per call (what the training loop pays): a scalar (a float, and a one-element
  tensor), a histogram of 1M floats and a 3x256x256 image. Targets against torch's writer:
  scalar <= 0.1x, histogram <= 0.25x, image <= 0.25x.
- End to end: a small CPU training loop (an MLP) logging its loss every step and a histogram of
  its first layer's weights every 100 steps; step time without logging, with ours, with torch's.
- ``--device cuda``: host synchronisations on the caller's thread per call (sync debug mode
  "warn", warnings counted by thread) for scalar, tensor and histogram of CUDA tensors.

Writers and set-ups take turns in interleaved rounds (the order rotating each round); each
figure is the median over rounds. Every writer's close (ours writes then) is outside the timing.

    python benchmarks/bench_summary_writer.py [--quick] [--rounds 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import tensorboardX
import torch
from torch.utils.tensorboard import SummaryWriter as TorchWriter

from tb_monitor import SummaryWriter

WRITERS: dict[str, Callable[[str], Any]] = {
    "torch": TorchWriter,
    "tensorboardX": tensorboardX.SummaryWriter,
    "tb_monitor": SummaryWriter,
}


def _cases(device: str) -> dict[str, tuple[Callable[[Any, int], None], int]]:
    """Each case: a call logging at ``step``, and how many calls a round makes."""
    loss = torch.tensor(0.5, device=device)
    weights = torch.randn(1_000_000, device=device)
    image = torch.rand(3, 256, 256, device=device)
    return {
        "scalar (float)": (lambda w, step: w.add_scalar("loss", 0.5, step), 2000),
        "scalar (tensor)": (lambda w, step: w.add_scalar("loss", loss, step), 2000),
        "histogram 1M": (lambda w, step: w.add_histogram("w", weights, step), 4),
        "image 3x256x256": (lambda w, step: w.add_image("img", image, step), 10),
    }


@contextlib.contextmanager
def _writer(name: str) -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as logdir:
        writer = WRITERS[name](logdir)
        try:
            yield writer
        finally:
            writer.close()


def _us_per_call(name: str, call: Callable[[Any, int], None], number: int) -> float:
    with _writer(name) as writer:
        call(writer, 0)  # warm-up: lazy imports, the first event file
        start = time.perf_counter()
        for step in range(1, number + 1):
            call(writer, step)
        return (time.perf_counter() - start) / number * 1e6


def _rotated(names: list[str], round_: int) -> list[str]:
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def caller_time(rounds: int, scale: float) -> None:
    print(f"\ncaller's time per call, median of {rounds} rounds (us; ratio to torch's)")
    print(f"{'case':<18}" + "".join(f"{name:>22}" for name in WRITERS))
    for case, (call, number) in _cases("cpu").items():
        number = max(2, int(number * scale))
        times: dict[str, list[float]] = {name: [] for name in WRITERS}
        for round_ in range(rounds):
            for name in _rotated(list(WRITERS), round_):
                times[name].append(_us_per_call(name, call, number))
        medians = {name: statistics.median(values) for name, values in times.items()}
        cells = [f"{m:>12.1f} ({m / medians['torch']:5.3f}x)" for m in medians.values()]
        print(f"{case:<18}" + "".join(f"{c:>22}" for c in cells))


class _Model:
    """A small MLP and its optimizer: a CPU step of about a millisecond."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
        )
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.x, self.y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step(self) -> torch.Tensor:
        self.opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.detach()


def _ms_per_step(name: str | None, model: _Model, steps: int) -> float:
    with contextlib.ExitStack() as stack:
        writer = None if name is None else stack.enter_context(_writer(name))
        start = time.perf_counter()
        for step in range(steps):
            loss = model.step()
            if writer is not None:
                writer.add_scalar("loss", loss, step)
                if step % 100 == 0:
                    writer.add_histogram("fc1", model.net[0].weight, step)
        return (time.perf_counter() - start) / steps * 1e3


def training_loop(rounds: int, steps: int) -> None:
    model = _Model()
    setups: list[str | None] = [None, "tb_monitor", "torch"]
    times: dict[str | None, list[float]] = {setup: [] for setup in setups}
    _ms_per_step(None, model, steps // 4)  # warm-up
    for round_ in range(rounds):
        for setup in _rotated(setups, round_):
            times[setup].append(_ms_per_step(setup, model, steps))
    base = statistics.median(times[None])
    print(f"\ntraining loop: {steps} steps a round, median of {rounds} rounds (ms per step)")
    for setup, values in times.items():
        median = statistics.median(values)
        label = "no logging" if setup is None else setup
        print(f"{label:<14}{median:8.3f} ms  ({(median / base - 1) * 100:+.1f}% vs no logging)")


def host_syncs(device: str, number: int) -> None:
    if device != "cuda" or not torch.cuda.is_available():
        print("\nhost synchronisations: no CUDA device here; run with --device cuda on a GPU")
        return
    values = torch.randn(1_000_000, device="cuda")
    calls = {
        "scalar": lambda w, step: w.add_scalar("loss", values[0], step),
        "tensor": lambda w, step: w.add_tensor("t", values[:16], step),
        "histogram": lambda w, step: w.add_histogram("h", values, step),
    }
    print(f"\nhost synchronisations on the caller's thread per call ({number} calls each)")
    print(f"{'call':<12}" + "".join(f"{name:>14}" for name in WRITERS))
    for case, call in calls.items():
        counts = [_syncs_per_call(name, call, number) for name in WRITERS]
        print(f"{case:<12}" + "".join(f"{count:>14}" for count in counts))


def _syncs_per_call(name: str, call: Callable[[Any, int], None], number: int) -> str:
    """Host syncs per call on the caller's thread, as text ("n/a": the writer lacks the method)."""
    caller, seen = threading.get_ident(), []

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message) and threading.get_ident() == caller:
            seen.append(message)

    with _writer(name) as writer, warnings.catch_warnings():
        try:
            call(writer, 0)
        except AttributeError:  # tensorboardX has no add_tensor
            return "n/a"
        torch.cuda.synchronize()
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for step in range(1, number + 1):
                call(writer, step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return f"{len(seen) / number:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~20 s run")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    torch.set_num_threads(1)  # the loop's step and the writers' threads share 2 cores here
    caller_time(rounds, 0.25 if args.quick else 1.0)
    training_loop(rounds, 300 if args.quick else 1000)
    host_syncs(args.device, 10 if args.quick else 30)


if __name__ == "__main__":
    main()
