"""tb-monitor inside Accelerate: ``TBMonitorTracker`` writes one run per process, with the real
``Accelerator`` on CPU, read back by TensorBoard's own readers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from adapter_logdirs import scalars, session_end, session_start, texts
from conftest import need
from ports import free_port

need("torch")
accelerate = need("accelerate")

from tb_monitor.integrations.accelerate import TBMonitorTracker  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]


def test_accelerator_logs_and_configuration_land_in_the_process_run(tmp_path):
    """Through ``Accelerator``: scalars in ``<project>/rank-0``, the config as its HParams session."""
    tracker = TBMonitorTracker("proj", tmp_path)
    accelerator = accelerate.Accelerator(cpu=True, log_with=tracker)
    accelerator.init_trackers("proj", config={"lr": 0.1, "optimizer": "sgd"})
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    accelerator.end_training()
    run = tmp_path / "proj" / "rank-0"
    assert scalars(run)["loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    start = session_start(run)
    assert (start.group_name, start.hparams["optimizer"].string_value) == ("proj", "sgd")
    assert session_end(run).status == 1  # STATUS_SUCCESS


def test_text_and_dict_values_take_their_summaries(tmp_path):
    """A str is a text, a dict of numbers ``add_scalars``' sub-runs, as Accelerate's tracker."""
    tracker = TBMonitorTracker("proj", tmp_path)
    tracker.log({"note": "warmup done", "lr": {"head": 0.1, "body": 0.01}}, step=5)
    tracker.finish()
    assert texts(tmp_path / "proj" / "rank-0")["note/text_summary"] == ["warmup done"]
    assert scalars(tmp_path / "proj" / "rank-0" / "lr_head")["lr"] == [(5, pytest.approx(0.1))]


def test_a_value_that_is_no_summary_is_left_out_with_a_warning(tmp_path, caplog):
    """A list is no summary: one warning names it, and the values beside it are logged."""
    tracker = TBMonitorTracker("proj", tmp_path)
    tracker.log({"sizes": [1, 2], "loss": 0.5}, step=1)
    tracker.finish()
    assert "'sizes'" in caplog.text
    assert scalars(tmp_path / "proj" / "rank-0") == {"loss": [(1, 0.5)]}


PROCESS_SCRIPT = """
from accelerate import Accelerator
from tb_monitor.integrations.accelerate import TBMonitorTracker

tracker = TBMonitorTracker("proj", {logdir!r})
accelerator = Accelerator(cpu=True, log_with=tracker)
tracker.store_init_configuration({{"lr": 0.1}})
for step in range(3):
    tracker.log({{"loss": accelerator.process_index + step}}, step=step)
tracker.finish()
accelerator.end_training()
"""


@pytest.mark.slow
def test_every_process_writes_its_own_run(tmp_path):
    """Two processes (gloo): each process's tracker writes its own run, not the main's only."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(PROCESS_SCRIPT.format(logdir=str(tmp_path))))
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
            },
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr[-3000:]
    for rank in (0, 1):
        run = tmp_path / "proj" / f"rank-{rank}"
        assert [value for _, value in scalars(run)["loss"]] == [rank, rank + 1, rank + 2]
        assert session_start(run).hparams["lr"].number_value == 0.1
