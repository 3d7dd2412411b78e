"""``tb_monitor.init(logdir, torch=True)``: torch.monitor and torchelastic metrics land in the logdir."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import need

from tb_monitor.logdir import readers

pytestmark = pytest.mark.torch

# A Stat that logs its window at once (max_samples reached), and one still holding a sample when
# the process ends with our handler registered: the case where torch.monitor crashes at exit.
TORCH_MONITOR_SCRIPT = """
import datetime, sys
import torch.monitor
import tb_monitor

tb_monitor.init(sys.argv[1], torch=True)
hour = datetime.timedelta(hours=1)
full = torch.monitor.Stat("torch.loss", [torch.monitor.Aggregation.MEAN], hour, 2)
full.add(1.0)
full.add(3.0)
pending = torch.monitor.Stat("torch.pending", [torch.monitor.Aggregation.SUM], hour)
pending.add(5.0)
"""

TORCHELASTIC_METRICS_SCRIPT = """
import sys
from torch.distributed.elastic import metrics
import tb_monitor

tb_monitor.init(sys.argv[1], torch=True)
metrics.put_metric("restarts", 1, "torchelastic")
metrics.put_metric("restarts", 2, "torchelastic")
"""


def _run(script: str, logdir) -> subprocess.CompletedProcess:
    need("torch")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(logdir)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _scalars(logdir) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for scalar in readers.iter_scalars(logdir):
        out.setdefault(scalar.tag, []).append(scalar.value)
    return out


def test_torch_monitor_window_lands_and_process_exits_0(logdir):
    """A torch.monitor Stat window lands; a Stat still holding data at exit does not crash it."""
    proc = _run(TORCH_MONITOR_SCRIPT, logdir)
    assert proc.returncode == 0, proc.stderr
    assert _scalars(logdir)["torch.loss.mean"] == [2.0]


def test_torchelastic_metrics_land(logdir):
    """Metrics put through torch.distributed.elastic.metrics become scalars <group>/<name>."""
    proc = _run(TORCHELASTIC_METRICS_SCRIPT, logdir)
    assert proc.returncode == 0, proc.stderr
    assert _scalars(logdir)["torchelastic/restarts"] == [1.0, 2.0]
