"""Acceptance (issue 26): ``tb-monitor run`` never slows a job's shutdown down, and a job a signal
ended is TERMINATED in the report.

The scenarios and their timing are ``benchmarks/bench_shutdown.py``'s: the same two-agent job of
the user-style DDP script (tests/integration/scripts/users/ddp_multinode.py, which knows nothing
of tb_monitor) under plain torchrun and under ``tb-monitor run``, side by side, the fault
injected from outside. The bounds are generous (a loaded 2-core machine) but a worker that
outlives its SIGTERM shows as torchrun's 30-s grace, which they catch.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need
from torchrun_jobs import tb_monitor_command

from tb_monitor.logdir import readers

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_shutdown.py"
#: torchrun waits this long for a worker to die of its SIGTERM before the SIGKILL (seconds).
TORCHRUN_GRACE_S = 30.0


def _bench():
    spec = importlib.util.spec_from_file_location("bench_shutdown", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _report(run) -> tuple[subprocess.CompletedProcess, dict]:
    """``tb-monitor report --json`` of a scenario's logdir: the process and its document."""
    done = subprocess.run(
        tb_monitor_command("report", "--json", run.logdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, json.loads(done.stdout)


def _within(ours: float | None, plain: float | None) -> bool:
    """Ours is as fast as plain torchrun's, with room for a loaded machine (not for 30 s)."""
    return ours is not None and plain is not None and ours <= 2 * plain + 5.0


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """Run one scenario under both launchers: {launcher: Shutdown}, cached per scenario."""
    need("torch")
    bench, cache = _bench(), {}

    def run(scenario: str, node_a_only: bool = False) -> dict:
        if scenario not in cache:
            workdir = str(tmp_path_factory.mktemp(scenario))
            cache[scenario] = {
                launcher: bench.run_scenario(launcher, scenario, workdir, node_a_only=node_a_only)
                for launcher in bench.LAUNCHERS
            }
        return cache[scenario]

    return run


def test_a_node_whose_ranks_wait_in_a_collective_shuts_down_as_fast_as_under_torchrun(
    side_by_side,
):
    """SIGTERM to a node whose ranks are blocked in DDP's all_reduce ends them at once."""
    runs = side_by_side("blocked-rank", node_a_only=True)
    plain, ours = runs["torchrun"], runs["tb-monitor"]
    assert plain.node_a is not None, plain.output[-3000:]
    assert ours.node_a is not None and ours.node_a < TORCHRUN_GRACE_S, ours.output[-3000:]
    assert _within(ours.node_a, plain.node_a), (ours.node_a, plain.node_a)


def test_sigterm_to_every_agent_ends_every_process_as_fast_as_under_torchrun(side_by_side):
    """A job preempted by SIGTERM to its agents ends, every process, as fast as plain torchrun."""
    runs = side_by_side("agent-sigterm")
    plain, ours = runs["torchrun"], runs["tb-monitor"]
    assert plain.job is not None, plain.output[-3000:]
    assert ours.job is not None, ours.output[-3000:]
    assert _within(ours.job, plain.job), (ours.job, plain.job)


def test_sigterm_to_the_agents_exits_as_torchrun_does(side_by_side):
    """Under tb-monitor run, the preempted agents exit with plain torchrun's exit code."""
    runs = side_by_side("agent-sigterm")
    ours, plain = runs["tb-monitor"], runs["torchrun"]
    assert ours.returncodes == [1, 1], ours.output[-6000:]  # an agent's dying words, if any
    assert plain.returncodes == [1, 1], plain.output[-6000:]


def test_a_preempted_agent_records_its_verdict_terminated(side_by_side):
    """Each agent a SIGTERM stopped records TERMINATED with the signal and torchrun's exit code."""
    ours = side_by_side("agent-sigterm")["tb-monitor"]
    verdicts = [
        row
        for row in readers.decode_timeline(readers.iter_timeline(ours.logdir))
        if row["name"] == "torchelastic.worker.status.TERMINATED" and row["source"] == "AGENT"
    ]
    assert len(verdicts) == 2, ours.output[-3000:]
    assert all(
        (row["metadata"]["signal"], row["metadata"]["exit_code"]) == ("SIGTERM", 1)
        for row in verdicts
    )


def test_a_preempted_job_is_terminated_in_the_report(side_by_side):
    """``tb-monitor report`` calls a preempted job TERMINATED, with exit code 1, never healthy."""
    done, report = _report(side_by_side("agent-sigterm")["tb-monitor"])
    assert (report["status"], report["exit_code"], done.returncode) == ("terminated", 1, 1)
    assert [job["status"] for job in report["jobs"]] == ["TERMINATED"]


def test_a_preempted_jobs_attempt_is_terminated_with_no_root_cause(side_by_side):
    """The attempt a SIGTERM to the agents cut short is TERMINATED: no rank's end after the
    signal (the agent's SIGTERM to it, a peer's lost connection) is given as its root cause."""
    done, report = _report(side_by_side("agent-sigterm")["tb-monitor"])
    [job] = report["jobs"]
    last = job["attempts"][-1]
    assert (last["outcome"], last["root_cause"]) == ("TERMINATED", None), done.stdout[-3000:]
    assert job["terminated"]["stop_began"] is not None
