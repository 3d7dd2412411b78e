"""`tb-monitor demo`: a real two-agent elastic job with a restart, its logdir, and TensorBoard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import need
from ports import free_port

from tb_monitor import contract, timeline
from tb_monitor.logdir import readers

pytestmark = [pytest.mark.slow, pytest.mark.torch]

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _tb_monitor(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "tb_monitor.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo job, run once for real with --no-serve: (completed process, logdir)."""
    need("torch")
    logdir = tmp_path_factory.mktemp("demo") / "logs"
    done = _tb_monitor("demo", "--no-serve", "--logdir", str(logdir))
    assert done.returncode == 0, done.stdout + done.stderr
    return done, logdir


@pytest.fixture(scope="module")
def rows(demo):
    """The demo logdir's decoded timeline records."""
    return list(readers.decode_timeline(readers.iter_timeline(demo[1])))


def test_demo_shows_live_progress_and_a_summary(demo):
    """stdout has progress lines (attempt, ranks, steps, events) and one line per attempt."""
    out = demo[0].stdout
    assert "attempt 1 · ranks running" in out and "step 40/40" in out
    assert "attempt 0: " in out and "attempt 1: SUCCEEDED" in out


def test_logdir_holds_both_agents_rendezvous_and_agent_events(demo, rows):
    """Two agent runs, each with its rendezvous records and its agent's SUCCEEDED."""
    agents = {r["run"] for r in rows if r["kind"] == contract.RENDEZVOUS}
    assert len(agents) == 2 and all(run.startswith("demo/agent-") for run in agents)
    succeeded = {
        r["run"] for r in rows if r["kind"] == contract.AGENT and r["state"] == "SUCCEEDED"
    }
    assert succeeded == agents


def test_every_rank_writes_its_own_scalars(demo):
    """Runs demo/rank-0..3 each hold the loss Stat, the demo metrics and the @prof timings."""
    tags: dict[str, set[str]] = {}
    for scalar in readers.iter_scalars(demo[1]):
        tags.setdefault(scalar.run, set()).add(scalar.tag)
    for rank in range(4):
        run_tags = tags[f"demo/rank-{rank}"]
        assert {"loss.mean", "loss.max", "loss.min", "demo/step", "demo/weight_norm"} <= run_tags
        assert any(tag.endswith("train_step.duration.ms") for tag in run_tags)
    agent_runs = [run for run in tags if run.startswith("demo/agent-")]
    assert len(agent_runs) == 2
    assert all("torchelastic/workers.default.remaining_restarts" in tags[r] for r in agent_runs)


def test_the_group_restarts_once(demo, rows):
    """Both agents join rendezvous rounds 0 and 1, and every rank starts in both attempts."""
    joined = {
        (r["run"], timeline.lane_of(r).label)
        for r in rows
        if r["kind"] == contract.RENDEZVOUS and "has joined round 1 " in (r["message"] or "")
    }
    assert len(joined) == 2
    attempts = {
        (span.lane.label, span.number)
        for span in timeline.spans(rows)
        if span.lane.kind == contract.WORKER and span.end is not None
    }
    assert attempts == {(f"rank {rank}", n) for rank in range(4) for n in (0, 1)}


def test_restart_summary_of_the_demo(demo):
    """The restart summary has the failed first attempt and the successful second one."""
    need("pandas")
    from tb_monitor.notebook import restart_summary

    summary = restart_summary(demo[1])
    assert summary["attempt"].tolist() == [0, 1]
    assert summary["outcome"].tolist() == ["FAILED", "SUCCEEDED"]
    assert summary["first_failed_rank"].iloc[0] == 3  # the others fail after it, in all_reduce
    assert (summary["rendezvous_s"] > 0).all()


def test_the_injected_failure_is_on_the_timeline(demo, rows):
    """The failing rank's own FAILED record carries the InjectedFailure traceback."""
    failed = [
        r
        for r in rows
        if r["kind"] == contract.WORKER and r["state"] == "FAILED" and r["rank"] == 3
    ]
    assert failed, "rank 3 recorded no FAILED event"
    assert "InjectedFailure" in failed[0]["error_trace"]


def test_without_torch_demo_says_which_extra_to_install(tmp_path):
    """With `import torch` failing, one line names the torch extra and the exit code is 2."""
    fake = tmp_path / "no_torch"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('torch is hidden by the test')\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
    }
    logdir = tmp_path / "logs"
    done = _tb_monitor("demo", "--no-serve", "--logdir", str(logdir), env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "pip install 'tb-monitor[torch]'" in done.stderr
    assert not logdir.exists()


def test_serve_prints_the_timeline_url_and_stops_on_ctrl_c(tmp_path):
    """serve() starts TensorBoard with the Timeline plugin, prints its URL, exits 0 on SIGINT."""
    from tb_monitor.testing import generate_job

    logdir = tmp_path / "logs"
    generate_job(logdir, nodes=2, workers_per_node=2)
    port = free_port()
    # SIGINT handled as a terminal's Ctrl-C, even where the suite runs in the background (its
    # children then start with SIGINT ignored, and Python installs no handler).
    code = (
        "import signal, sys, tb_monitor.demo as d; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.exit(d.serve({str(logdir)!r}, {port}))"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        url = f"http://127.0.0.1:{port}/#{contract.PLUGIN_NAME}"
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(url in line for line in lines):
            line = server.stdout.readline()
            assert line, f"serve exited early with {server.wait()}: {lines}"
            lines.append(line)
        assert any(url in line for line in lines)
        with _NO_PROXY.open(f"http://127.0.0.1:{port}/data/plugins_listing", timeout=30) as r:
            assert contract.PLUGIN_NAME in json.load(r)
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
