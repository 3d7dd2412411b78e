"""``tb-monitor demo [--logdir DIR] [--port N] [--no-serve]`` (see ``tb_monitor.demo``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from tb_monitor import demo
from tb_monitor.cli.parsing import fail
from tb_monitor.logdir import fs

__all__ = ["main"]

_PROG = "tb-monitor demo"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=_PROG, description=demo.__doc__.splitlines()[0])
    parser.add_argument(
        "--logdir",
        default=None,
        help="where the job writes (default: runs/demo-<date>-<time>, a new directory)",
    )
    parser.add_argument("--port", type=int, default=6006, help="TensorBoard's port (default 6006)")
    parser.add_argument(
        "--no-serve", action="store_true", help="write the logdir and exit, without TensorBoard"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo job, then serve TensorBoard until Ctrl-C; returns the exit code."""
    args = _parse(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print(
            f"{_PROG} runs a real PyTorch job and needs torch: pip install 'tb-monitor[torch]'",
            file=sys.stderr,
        )
        return 2
    logdir = args.logdir or time.strftime("runs/demo-%Y%m%d-%H%M%S")
    try:
        if fs.is_remote(logdir):
            return fail(_PROG, f"--logdir must be a local directory, got the URL {logdir!r}")
    except fs.LogdirError as exc:  # a malformed URL (s3:/bucket): never a local dir "s3:"
        return fail(_PROG, exc)
    logdir = os.path.abspath(logdir)
    print(f"{_PROG}: {demo.NODES} agents x {demo.WORKERS} CPU workers, one failure and a restart")
    print(f"logdir: {logdir}")
    try:
        code = demo.run_job(logdir)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if code != 0:
        return code
    if args.no_serve:
        print(f"done; view it with: tensorboard --logdir {logdir}")
        return 0
    return demo.serve(logdir, args.port)
