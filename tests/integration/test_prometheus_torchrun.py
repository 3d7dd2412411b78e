"""Acceptance: a real ``tb-monitor run --prometheus-port`` job serves every rank's step time.

One agent with two workers (c10d on 127.0.0.1, gloo on CPU, an all_reduce a step); /metrics is
scraped over HTTP while the job runs and parsed with prometheus_client's parser.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import need
from ports import free_port
from torchrun_jobs import JOB_TIMEOUT, agent_env, stop_agents, tb_monitor_run

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).parent / "scripts" / "train_rank_health.py"
RANKS = 2


def _scrape(port: int) -> dict[str, list]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _scrape_until_every_rank(agent: subprocess.Popen, port: int) -> dict[str, list]:
    """Scrape while the job runs until each rank's step time is there (or the job ends)."""
    families: dict[str, list] = {}
    deadline = time.monotonic() + JOB_TIMEOUT
    while agent.poll() is None and time.monotonic() < deadline:
        try:
            families = _scrape(port)
        except OSError:  # the agent is not serving yet
            families = {}
        steps = families.get("tb_monitor_rank_step_seconds", [])
        if {s.labels["rank"] for s in steps} == {str(r) for r in range(RANKS)}:
            return families
        time.sleep(0.2)
    return families


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> tuple[dict[str, list], int, str]:
    """/metrics of a running job once it has every rank's step time; the agent's exit code."""
    need("torch")
    need("prometheus_client")
    logdir = tmp_path_factory.mktemp("prometheus") / "logs"
    port = free_port()
    command = tb_monitor_run(
        "--logdir",
        str(logdir),
        "--prometheus-port",
        str(port),
        "--nnodes=1",
        f"--nproc-per-node={RANKS}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        str(SCRIPT),
        "--steps",
        "150",
    )
    env = agent_env(TB_MONITOR_RANK_WINDOW_S="0.5", TB_MONITOR_HEARTBEAT_S="0.5")
    agent = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        families = _scrape_until_every_rank(agent, port)
        output = agent.communicate(timeout=JOB_TIMEOUT)[0]
    finally:
        stop_agents([agent])
    return families, agent.returncode, output


@pytest.mark.slow
def test_every_rank_step_time_is_served_while_the_job_runs(scraped):
    """Both workers' mean step times are on the agent's one endpoint, one series per rank."""
    families, returncode, output = scraped
    steps = families.get("tb_monitor_rank_step_seconds", [])
    assert sorted(s.labels["rank"] for s in steps) == [str(r) for r in range(RANKS)], output
    assert all(0 < s.value < 60 for s in steps)
    assert returncode == 0, output


@pytest.mark.slow
def test_time_in_collectives_per_rank(scraped):
    """Each rank's seconds in collectives (an all_reduce a step) are served next to it."""
    families, _, output = scraped
    collective = families.get("tb_monitor_rank_collective_seconds", [])
    assert sorted(s.labels["rank"] for s in collective) == [str(r) for r in range(RANKS)], output


@pytest.mark.slow
def test_the_agent_serves_the_job_state_and_restarts(scraped):
    """The agent's own series: the job is running, and has not restarted."""
    families, _, output = scraped
    states = {s.labels["state"]: s.value for s in families.get("tb_monitor_job_state", [])}
    assert states.get("running") == 1.0, output
    (restarts,) = [s for s in families["tb_monitor_restarts"] if s.name.endswith("_total")]
    assert restarts.value == 0.0


@pytest.mark.parametrize(
    "option", [["--prometheus-port", "9100"], ["--prometheus-port=9100"], ["--prom=9100"]]
)
def test_the_port_option_is_ours_and_not_torchruns(option):
    """``--prometheus-port`` (or an abbreviation) is read by tb-monitor run, not passed on."""
    need("torch")
    need("prometheus_client")
    from tb_monitor.cli import run

    command = run._parse_command(["--logdir", "logs", *option, "--nnodes=1", str(SCRIPT)])
    assert command.prometheus_port == 9100
    assert not [arg for arg in command.torchrun_argv if arg.startswith("--prom") or arg == "9100"]


@pytest.mark.parametrize("port", ["0", "65536", "http"])
def test_a_bad_port_is_a_usage_error_naming_it(port, capsys):
    """A port that is not 1-65535 stops tb-monitor run before any agent starts, naming it."""
    need("torch")
    from tb_monitor.cli import run

    assert run.main(["--logdir", "logs", "--prometheus-port", port, str(SCRIPT)]) == 2
    assert f"not a port number: {port!r}" in capsys.readouterr().err
