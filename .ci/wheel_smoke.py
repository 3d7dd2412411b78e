"""Smoke checks of an installed tb-monitor, run by ``.ci/wheels`` with a clean venv's python.

Run from a directory outside the checkout, so that ``tb_monitor`` can only come from the venv's
site-packages. ``--expect c``: a wheel, every C accelerator must load and be the one the package
uses; ``--expect python``: the sdist installed without a compiler, every accelerator absent and
the pure-Python twins in use. Both: a fixture logdir read by ``tb-monitor report``, and a real
TensorBoard server whose plugin listing holds the Timeline plugin, active on that logdir.

Also a pytest plugin (``-p wheel_smoke``): the unit tests run against the installed package, and
their header says where it came from; a ``tb_monitor`` imported from anywhere else stops them.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

#: Each C accelerator as the package looks it up (``tb_monitor._env.c_twin``): module, name.
ACCELERATORS = [
    ("tb_monitor._accumulator", "Accumulator"),
    ("tb_monitor.sinks._encoding", "encode_scalars"),
    ("tb_monitor.rank._stepclock", "StepClock"),
    ("tb_monitor.logdir._string_tensors", "string_tensors"),
    ("tb_monitor.contract._columnar_index", "steps_index"),
]
TIMELINE = "tb_monitor_timeline"
#: Local URLs must not go through an HTTP proxy from the environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def installed_package() -> Path:
    """Where ``tb_monitor`` was imported from; exits unless it is this venv's site-packages."""
    import tb_monitor

    where = Path(tb_monitor.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        sys.exit(f"tb_monitor imported from {where}, not from the venv at {sys.prefix}")
    return where


def check_accelerators(expect: str) -> None:
    """Every accelerator loads and is used (``c``), or none does (``python``)."""
    from tb_monitor import _accumulators, _env

    for module, name in ACCELERATORS:
        found = _env.c_twin(module, name)
        print(f"  {module}.{name}: {'C' if found is not None else 'absent'}")
        if (found is not None) != (expect == "c"):
            sys.exit(f"{module}.{name} is {'loaded' if found else 'absent'}; expected {expect}")
    chosen = _accumulators.ACCUMULATOR
    wanted = _accumulators.C_ACCUMULATOR if expect == "c" else _accumulators.PyAccumulator
    if chosen is not wanted or chosen is None:
        sys.exit(f"Stat accumulates with {chosen!r}; expected {wanted!r}")


def check_report(logdir: Path) -> None:
    """``tb-monitor report`` names the synthetic job's failed attempt, its cause and its end."""
    from tb_monitor.testing import generate_job

    generate_job(logdir, nodes=2, workers_per_node=2, restarts=1, scalars=True, rank_stats=True)
    cli = Path(sys.executable).parent / "tb-monitor"
    done = subprocess.run([cli, "report", logdir], capture_output=True, text=True, timeout=120)
    wanted = ("2 attempts, 1 restart", "OutOfMemoryError", "healthy: every job succeeded")
    missing = [text for text in wanted if text not in done.stdout]
    if done.returncode != 0 or missing:
        sys.exit(f"tb-monitor report: exit {done.returncode}, missing {missing}\n{done.stderr}")
    print("  tb-monitor report: " + done.stdout.split("\n\n")[1].splitlines()[0])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _plugins_listing(url: str) -> dict[str, Any] | None:
    try:
        with _NO_PROXY.open(url, timeout=5) as answer:
            return json.load(answer)
    except OSError:
        return None


def check_tensorboard(logdir: Path, timeout: float = 120.0) -> None:
    """TensorBoard, started as users start it, lists the Timeline plugin active on ``logdir``."""
    port = _free_port()
    command = [Path(sys.executable).parent / "tensorboard", "--logdir", logdir]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/data/plugins_listing"
    deadline, listing = time.monotonic() + timeout, None
    try:
        while time.monotonic() < deadline and server.poll() is None:
            listing = _plugins_listing(url)
            if listing and listing.get(TIMELINE, {}).get("enabled"):
                print(f"  TensorBoard lists {TIMELINE}: {sorted(listing)}")
                return
            time.sleep(0.5)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    sys.exit(f"TensorBoard's listing {listing} lacks an active {TIMELINE}\n{err.decode()[-2000:]}")


def pytest_configure() -> None:
    """Stop the tests before they start unless they import the installed ``tb_monitor``."""
    installed_package()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name, after the tests, the ``tb_monitor`` they imported (shown with ``-q`` too)."""
    terminalreporter.write_line(f"tb_monitor: {installed_package()}")


def main() -> int:
    """Run every smoke check; the first that fails exits non-zero with what it saw."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", choices=("c", "python"), required=True)
    parser.add_argument("--workdir", type=Path, required=True, help="for the fixture logdir")
    args = parser.parse_args()
    print(f"  tb_monitor from {installed_package()}")
    check_accelerators(args.expect)
    logdir = args.workdir / "fixture-logdir"
    check_report(logdir)
    check_tensorboard(logdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
