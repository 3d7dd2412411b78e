"""The same job read by ``tb-monitor report --json``, the plugin's ``ranks`` route (a real
TensorBoard) and the notebook: the same window, stragglers and stalls, whatever the window.

The job is written as the recorder writes it (``rank_jobs``: windows logged ms late, a short
window at each attempt's end, restarts, a hang at the end), with the default 10-s window and
with ``TB_MONITOR_RANK_WINDOW_S=5``; the readers run without that variable, as they would on
another machine, and take the window from the data.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import need
from plugin_helpers import start_tensorboard, stop, wait_for
from rank_jobs import HUNG_RANK, SLOW_RANK, write_recorded_job

from tb_monitor import contract

pytestmark = pytest.mark.slow

ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/ranks?width=4000"
TB_MONITOR = os.path.join(os.path.dirname(sys.executable), "tb-monitor")


def _report(logdir) -> dict:
    """``tb-monitor report --json``'s ``ranks``, from the command itself."""
    env = {k: v for k, v in os.environ.items() if k != "TB_MONITOR_RANK_WINDOW_S"}
    done = subprocess.run(
        [TB_MONITOR, "report", "--json", str(logdir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["ranks"]


def _plugin(logdir, tmp_path) -> dict:
    """The ``ranks`` route of a real TensorBoard, once it has read everything."""
    server = start_tensorboard(logdir, tmp_path)
    try:

        def read() -> dict | None:
            body = server.get_json(ROUTE)
            return body if body.get("ranks") and body.get("loading") is None else None

        return wait_for(read, timeout=60, what="the ranks route to hold the job")
    finally:
        stop(server)


def _notebook(logdir) -> tuple[dict, list[int]]:
    """The notebook's report's ranks, and the ranks the heatmap labels in bold."""
    need("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from tb_monitor import notebook

    ranks = notebook.report(logdir).ranks.to_json()
    figure = notebook.rank_heatmap(logdir)
    bold = [
        int(label.get_text().split()[-1])
        for label in figure.axes[0].get_yticklabels()
        if label.get_fontweight() == "bold"
    ]
    return ranks, bold


def _stalls(stalls: list[dict]) -> list[tuple]:
    return [
        (s["rank"], s["waited_for"], s["in_collective"], s["fr_seq"], round(s["since_step_s"], 3))
        for s in stalls
    ]


def _stragglers(scores: list[dict]) -> list[tuple]:
    return [(s["rank"], round(s["relative"], 5), s["windows_over"]) for s in scores]


@pytest.mark.parametrize("window_s", [10.0, 5.0])
def test_report_plugin_and_notebook_name_the_same_ranks(tmp_path, window_s):
    """Same window, same stragglers (scores and runs of windows), same stalls (the one waited
    for first), and the report counts the windows the heatmap draws."""
    need("pandas")
    logdir = tmp_path / "logs"
    write_recorded_job(logdir, window_s)
    report = _report(logdir)
    plugin = _plugin(logdir, tmp_path)
    notebook, bold = _notebook(logdir)

    assert report["window_s"] == plugin["window_s"] == notebook["window_s"] == window_s
    assert [s["rank"] for s in report["stragglers"]] == [SLOW_RANK]
    assert _stragglers(plugin["stragglers"]) == _stragglers(report["stragglers"])
    assert _stragglers(notebook["stragglers"]) == _stragglers(report["stragglers"])
    assert bold == [SLOW_RANK]

    assert [s["rank"] for s in report["stalls"] if s["waited_for"]] == [HUNG_RANK]
    assert _stalls(plugin["stalls"]) == _stalls(report["stalls"]) == _stalls(notebook["stalls"])

    cells = np.frombuffer(base64.b64decode(plugin["cells"]), np.uint8)
    cells = cells.reshape(len(plugin["ranks"]), plugin["bins"])
    assert plugin["per_bin"] == 1 and plugin["bin_s"] == window_s
    assert report["windows"] == int((cells > 0).any(axis=0).sum())
