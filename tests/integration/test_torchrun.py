"""Acceptance: real torchrun jobs under ``tb-monitor run`` land whole in the logdir (issue 5).

The jobs (two agents x two workers on 127.0.0.1, gloo on CPU) are ``tests/torchrun_jobs.py``'s,
shared with the restart analysis tests: ``restarted`` (rank 2 raises a ValueError once),
``always_failing`` (rank 1 raises on every attempt).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import Counter

import pytest
from conftest import need
from torchrun_jobs import (
    FAIL_RANK,
    JOB_TIMEOUT,
    MAX_RESTARTS,
    OTHER_FAIL_RANK,
    SCRIPT,
    Job,
    stop_agents,
    tb_monitor_run,
)
from torchrun_jobs import timeline as _timeline

pytestmark = [pytest.mark.slow, pytest.mark.torch]

_tb_monitor_run = tb_monitor_run


def _injected_failures(job: Job) -> list[dict]:
    return [
        e
        for e in job.events_named("tb_monitor.worker.status.FAILED")
        if "injected failure" in (e["message"] or "")
    ]


# -- the job with one failure ----------------------------------------------------------------


def test_job_succeeds_after_exactly_one_restart(restarted):
    """Both agents exit 0, after the group restarted once (one restart used, not two)."""
    assert restarted.returncodes == [0, 0], restarted.output
    remaining = restarted.scalar_values("agent-", "torchelastic/workers.default.remaining_restarts")
    assert min(remaining) == MAX_RESTARTS - 1


def test_rendezvous_rounds_from_both_agents(restarted):
    """Each agent's run holds its joins of rounds 0 and 1; both rounds were completed."""
    agents = restarted.runs("agent-")
    assert len(agents) == 2
    rendezvous = [e for e in restarted.events if e["kind"] == "rendezvous"]
    for run in agents:
        messages = " | ".join(e["message"] for e in rendezvous if e["run"] == run)
        assert "has joined round 0" in messages and "has joined round 1" in messages
    completed = " | ".join(e["message"] for e in rendezvous)
    assert "marked round 0" in completed and "marked round 1" in completed


def test_agent_start_events_for_both_attempts_of_every_rank(restarted):
    """The agents record a worker START for each of the four ranks in each of the two attempts."""
    starts = Counter(e["rank"] for e in restarted.events_named("torchelastic.worker.status.START"))
    assert starts == {0: 2, 1: 2, 2: 2, 3: 2}


def test_worker_start_events_of_both_attempts(restarted):
    """Every rank's own run records the worker process starting, in both attempts."""
    running = restarted.events_named("tb_monitor.worker.status.RUNNING")
    assert Counter(e["rank"] for e in running) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert {e["run"] for e in running} == {f"{restarted.run_id}/rank-{r}" for r in range(4)}


def test_failed_worker_exception_with_traceback(restarted):
    """The failing rank's exception is in its run with traceback, rank and restart count."""
    (failure,) = _injected_failures(restarted)
    assert failure["run"] == f"{restarted.run_id}/rank-{FAIL_RANK}"
    assert failure["rank"] == FAIL_RANK and failure["metadata"]["restart_count"] == 0
    assert failure["state"] == "FAILED"
    assert "Traceback (most recent call last)" in failure["error_trace"]
    assert "ValueError: injected failure" in failure["error_trace"]


def test_agent_records_the_failed_attempts_workers(restarted):
    """The agent records every worker's end at a failure that leads to a restart (torch does not):
    the failed rank with its exit code and error file, before the second attempt starts."""
    failed = [
        e
        for e in restarted.events_named("torchelastic.worker.status.FAILED")
        if e["source"] == "WORKER" and e["rank"] == FAIL_RANK
    ]
    assert len(failed) == 1, restarted.output
    assert failed[0]["metadata"]["exit_code"] == 1
    assert "ValueError: injected failure" in failed[0]["error_trace"]
    second_start = max(
        e["wall_time"] for e in restarted.events_named("torchelastic.worker.status.START")
    )
    assert failed[0]["wall_time"] < second_start


def test_worker_succeeded_events(restarted):
    """The agents record SUCCEEDED for all four ranks, and every rank records its clean exit."""
    agent_side = restarted.events_named("torchelastic.worker.status.SUCCEEDED")
    assert {e["rank"] for e in agent_side if e["source"] == "WORKER"} == {0, 1, 2, 3}
    worker_side = restarted.events_named("tb_monitor.worker.status.SUCCEEDED")
    assert {e["rank"] for e in worker_side} == {0, 1, 2, 3}


def test_agent_events_carry_real_times(restarted):
    """Agent events (timestamp 0 in torch's JSON) are placed at the time they were recorded."""
    agent_events = [e for e in restarted.events if e["kind"] == "agent"]
    assert agent_events
    assert all(e["wall_time"] >= restarted.started - 1 for e in agent_events)


def test_agent_metadata_is_decoded(restarted):
    """The nested metadata JSON of agent worker events is decoded for readers."""
    (start, *_) = restarted.events_named("torchelastic.worker.status.START")
    assert start["local_id"] in (0, 1) and start["metadata"]["role_world_size"] == 4


def test_torchelastic_metrics_include_the_restart(restarted):
    """torchelastic's metrics land under torchelastic/, including the workers' restart."""
    tags = {s.tag for s in restarted.scalars if s.run.startswith(f"{restarted.run_id}/agent-")}
    assert tags and all(tag.startswith("torchelastic/") for tag in tags)
    assert "torchelastic/SimpleElasticAgent._restart_workers.success" in tags
    assert restarted.scalar_values("agent-", "torchelastic/workers.default.failed")


def test_every_rank_writes_its_own_scalars(restarted):
    """Each rank's Stat windows and metrics are in its own run."""
    for rank in range(4):
        run = f"rank-{rank}"
        assert restarted.scalar_values(run, "train.loss.mean"), run
        assert restarted.scalar_values(run, "train/step_time_us"), run


# -- the job that keeps failing ----------------------------------------------------------------


def test_always_failing_job_exits_non_zero(always_failing):
    """When the rank fails on every attempt, the job exits non-zero."""
    assert any(code != 0 for code in always_failing.returncodes), always_failing.output


def test_always_failing_job_shows_the_final_failure(always_failing):
    """The last attempt's failure is in the logdir, from the worker and from its agent."""
    last = [f for f in _injected_failures(always_failing) if f["metadata"]["restart_count"] == 1]
    assert len(last) == 1 and "Traceback" in last[0]["error_trace"]
    final = [
        e
        for e in always_failing.events_named("torchelastic.worker.status.FAILED")
        if e["source"] == "WORKER" and e["rank"] == OTHER_FAIL_RANK
    ]
    assert final and "injected failure" in final[0]["error_trace"]


# -- a single-node job: --standalone and a destination chosen by the user --------------------


def test_standalone_job_with_users_destination(tmp_path):
    """PET_EVENT_LOG_HANDLER=console keeps torchrun's console events, and we capture them too.

    ``--standalone`` makes torchrun pick a random run id: the agent's run is named by it.
    """
    need("torch")
    logdir = tmp_path / "logs"
    proc = subprocess.run(
        _tb_monitor_run(
            "--logdir", str(logdir), "--standalone", "--nproc-per-node=1", str(SCRIPT), "--steps=1"
        ),
        env={**os.environ, "PET_EVENT_LOG_HANDLER": "console", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"name": "torchelastic.worker.status.SUCCEEDED"' in proc.stderr  # console still prints
    events = _timeline(logdir)
    agent_events = [e for e in events if e["kind"] == "agent"]
    (run_id,) = {e["run_id"] for e in agent_events}
    uuid.UUID(run_id)  # torchrun's random standalone id
    (run,) = {e["run"] for e in agent_events}
    assert run.startswith(f"{run_id}/agent-")


# -- signals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_and_exits_like_torchrun(tmp_path, signum):
    """A signal to the agent ends it as torchrun's handlers do (exit 1); its events are on disk."""
    need("torch")
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(600)\n")
    logdir = tmp_path / "logs"
    agent = subprocess.Popen(
        _tb_monitor_run("--logdir", str(logdir), "--standalone", "--nproc-per-node=1", str(script)),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not any(e["state"] == "START" for e in _timeline(logdir)):
            assert time.monotonic() < deadline and agent.poll() is None, "worker never started"
            time.sleep(0.5)
        agent.send_signal(signum)
        _, stderr = agent.communicate(timeout=JOB_TIMEOUT)
    finally:
        stop_agents([agent])
    assert agent.returncode == 1, stderr
    assert "SignalException" in stderr
    failed = [e for e in _timeline(logdir) if e["kind"] == "agent" and e["state"] == "FAILED"]
    assert len(failed) == 1


# -- command line errors ---------------------------------------------------------------------


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        _tb_monitor_run(*args), capture_output=True, text=True, timeout=JOB_TIMEOUT
    )


def test_bad_option_prints_torchruns_error(tmp_path):
    """An option torchrun does not know gets torchrun's parser error and a non-zero exit."""
    proc = _run_cli("--logdir", str(tmp_path), "--no-such-option", str(SCRIPT))
    assert proc.returncode == 2
    assert "unrecognized arguments: --no-such-option" in proc.stderr
    assert "--rdzv-backend" in proc.stderr  # torchrun's usage


def test_missing_script_fails_before_starting(tmp_path):
    """A training script that does not exist is named in a clear error; nothing is started."""
    missing = tmp_path / "nope.py"
    proc = _run_cli("--logdir", str(tmp_path / "logs"), "--nproc-per-node=1", str(missing))
    assert proc.returncode == 2
    assert f"training script not found: '{missing}'" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_missing_logdir_is_a_usage_error(tmp_path):
    """``--logdir`` is required."""
    proc = _run_cli("--nproc-per-node=1", str(SCRIPT))
    assert proc.returncode == 2 and "--logdir" in proc.stderr


def test_without_torch_says_what_to_install(tmp_path):
    """Without PyTorch, one clear line names the extra to install; exit 2."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('No module named torch')\n")
    proc = subprocess.run(
        _tb_monitor_run("--logdir", str(tmp_path / "logs"), str(SCRIPT)),
        env={**os.environ, "PYTHONPATH": str(shadow)},
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert proc.returncode == 2
    assert "pip install 'tb-monitor[torch]'" in proc.stderr


# -- the same job on an object store ---------------------------------------------------------


def test_a_job_on_s3_reads_back_every_event_and_scalar(restarted_on_s3):
    """With --logdir s3://..., both agents succeed and the bucket holds the whole story: both
    agents' rendezvous rounds, every rank's starts in both attempts, the failure with its
    traceback, every rank's end, and the workers' scalars."""
    job = restarted_on_s3
    assert job.returncodes == [0, 0], job.output
    assert len(job.runs("agent-")) == 2
    starts = Counter(e["rank"] for e in job.events_named("torchelastic.worker.status.START"))
    assert starts == {0: 2, 1: 2, 2: 2, 3: 2}
    (failure,) = _injected_failures(job)
    assert "ValueError: injected failure" in failure["error_trace"]
    worker_side = job.events_named("tb_monitor.worker.status.SUCCEEDED")
    assert {e["rank"] for e in worker_side} == {0, 1, 2, 3}
    remaining = job.scalar_values("agent-", "torchelastic/workers.default.remaining_restarts")
    assert min(remaining) == MAX_RESTARTS - 1
    assert {s.run for s in job.scalars if s.run.startswith(f"{job.run_id}/rank-")} == {
        f"{job.run_id}/rank-{r}" for r in range(4)
    }
