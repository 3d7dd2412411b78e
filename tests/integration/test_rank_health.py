"""Stragglers and hangs in real torchrun jobs (2 agents x 2 workers, gloo, an all_reduce a step),
recorded with no tb_monitor call in the loop and found by tb_monitor.analysis.stragglers. That a
healthy job flags nothing is read from test_users_jobs.py's healthy DDP job (one job fewer)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import need
from torchrun_jobs import agent_env, stop_agents, tb_monitor_command, two_agent_command

from tb_monitor import contract
from tb_monitor.analysis.stragglers import stalls
from tb_monitor.logdir import readers

COLLECTIVES = contract.stat_tag(contract.RANK_COLLECTIVE, "count")
LONGEST_COLLECTIVE = contract.stat_tag(contract.RANK_COLLECTIVE, "max")
LEFT = contract.beat_tag("left")
ENTERED = contract.beat_tag("entered")

#: Stragglers among ranks alike, hangs named within 30 s: beside no other timed test.
pytestmark = pytest.mark.timed

SCRIPT = Path(__file__).parent / "scripts" / "train_rank_health.py"
ASYNC_SCRIPT = Path(__file__).parent / "scripts" / "async_collective.py"
WINDOW_S = 1.0


def _start(logdir: Path, *script_args: str, script: Path = SCRIPT) -> list[subprocess.Popen]:
    need("torch")
    need("pandas")
    run_id = f"rh-{uuid.uuid4().hex[:8]}"
    command = two_agent_command(logdir, script, run_id, *script_args, max_restarts=0)
    env = agent_env(
        TB_MONITOR_RANK_WINDOW_S=str(WINDOW_S),
        TB_MONITOR_HEARTBEAT_S="0.5",
        TB_MONITOR_FR_AFTER_S="1",
    )
    return [
        subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(2)
    ]


def _finish(agents: list[subprocess.Popen]) -> list[int]:
    try:
        return [agent.wait(120) for agent in agents]
    finally:
        stop_agents(agents)


HANG = ("--steps", "1000", "--hang-rank", "3", "--hang-step", "5")


STEPS = contract.beat_tag("steps")


def _all_stepped(logdir: Path, ranks: int = 4) -> bool:
    """Whether every rank's heartbeats show steps taken: before that, an explicit floor judges
    the start too (``stalls``), and a start slower than 3 s is no hang of step 5."""
    stepped = {s.run for s in readers.iter_scalars(logdir) if s.tag == STEPS and s.value >= 2}
    return len(stepped) >= ranks


def _waited_for(logdir: Path, agents: list[subprocess.Popen]) -> list[int] | None:
    """The ranks ``stalls()`` first names as waited for once every rank has stepped, within
    60 s (startup ~10 s, detection <= 30 s), asserting the job still runs then."""
    named = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and named is None:
        time.sleep(1)
        try:
            if not _all_stepped(logdir):
                continue
            found = stalls(logdir, floor_s=3, window_s=WINDOW_S)
        except FileNotFoundError:
            continue
        waited = found[found.waited_for]["rank"].tolist() if not found.empty else []
        if waited:
            named = waited
    assert all(agent.poll() is None for agent in agents)  # still running
    return named


def _waited_for_while_running(logdir: Path, *script_args: str) -> list[int] | None:
    """Start a job and return what ``_waited_for`` finds of it."""
    agents = _start(logdir, *script_args)
    try:
        return _waited_for(logdir, agents)
    finally:
        stop_agents(agents)


@pytest.fixture(scope="module")
def hanging(tmp_path_factory):
    """A live job whose rank 3 sleeps before step 5's collective: (logdir, agents), stopped
    at the module's end (the tests that read it see it still running)."""
    logdir = tmp_path_factory.mktemp("hanging") / "logs"
    agents = _start(logdir, *HANG)
    yield logdir, agents
    stop_agents(agents)


@pytest.mark.slow
def test_the_hanging_rank_of_a_ddp_job_is_named_from_the_flight_recorder(tmp_path):
    """With DDP the gradients are reduced in C++, so no collective passes through Python: rank
    3, hanging before step 5's forward, is named all the same while the job runs, as the one
    behind in torch's Flight Recorder (the others entered the next gradient all_reduce)."""
    hang = ("--ddp", "--steps", "1000", "--hang-rank", "3", "--hang-step", "5")
    assert _waited_for_while_running(tmp_path / "logs", *hang) == [3]


def test_a_collective_held_from_before_close_still_runs():
    """A collective imported while recording (``from torch.distributed import barrier``) keeps
    working after the recorder closes: torch's own function runs, not our closed Stats."""
    need("torch")
    from datetime import timedelta

    import torch.distributed as dist

    from tb_monitor.rank.health import RankHealth

    recorder = RankHealth(window=timedelta(seconds=60), heartbeat_s=3600).install()
    held = dist.barrier
    recorder.close()
    assert hasattr(held, "__tb_monitor_timed__") and dist.barrier is not held
    with pytest.raises((ValueError, RuntimeError), match="process group"):
        held()  # torch's barrier itself: no process group in this test


def test_a_collective_that_ends_after_close_returns_its_result():
    """A collective still running when the recorder closes (another thread closed it) returns
    what torch returned: the closed Stat does not raise into the training loop."""
    need("torch")
    from datetime import timedelta

    from tb_monitor.rank.health import RankHealth

    recorder = RankHealth(window=timedelta(seconds=60), heartbeat_s=3600).install()

    def closed_meanwhile() -> str:
        recorder.close()
        return "torch's result"

    assert recorder._timed(closed_meanwhile)() == "torch's result"


def test_an_async_collective_is_timed_to_its_completion(tmp_path):
    """An ``async_op`` all_reduce that the last rank joins 1.5 s late counts, on the ranks that
    launched it at once, the time until it completed (not its launch), and is then left."""
    logdir = tmp_path / "logs"
    assert _finish(_start(logdir, "--late-s", "1.5", script=ASYNC_SCRIPT)) == [0, 0]
    by_run: dict[str, dict[str, float]] = {}
    for scalar in readers.iter_scalars(logdir):
        by_run.setdefault(scalar.run.rsplit("/", 1)[-1], {})[scalar.tag] = scalar.value
    rank0 = by_run["rank-0"]
    assert rank0[COLLECTIVES] == 1
    assert rank0[LONGEST_COLLECTIVE] >= 1.0
    assert rank0[LEFT] == rank0[ENTERED] == 1


# -- one live job whose rank 3 hangs, read by the last tests (so it runs beside no other job)


@pytest.mark.slow
def test_the_hanging_rank_is_named_while_the_job_still_runs(hanging):
    """Rank 3 sleeps before step 5's collective; within 30 s, with the job still running,
    stalls() names rank 3 as the one the others wait for."""
    assert _waited_for(*hanging) == [3]


@pytest.mark.browser
def test_report_and_the_ranks_view_name_the_hanging_rank_of_a_live_job(
    hanging, browser, tmp_path, monkeypatch
):
    """Rank 3 of a real torchrun job hangs before a collective: while the job still runs,
    ``tb-monitor report`` exits 1 naming rank 3 as the rank the job waits for, and the Timeline's
    Ranks view in Chromium under a live ``tensorboard --logdir`` names it too. The reading side's
    stall floor is 3 s here (``TB_MONITOR_STALL_FLOOR_S``): the job's steps take milliseconds."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))
    from plugin_helpers import RanksTab, start_tensorboard, stop

    monkeypatch.setenv("TB_MONITOR_STALL_FLOOR_S", "3")
    logdir, agents = hanging
    deadline = time.monotonic() + 90
    report = None
    while time.monotonic() < deadline:
        time.sleep(1)
        report = subprocess.run(
            tb_monitor_command("report", str(logdir)), capture_output=True, text=True
        )
        if report.returncode == 1 and "STALLED: the job waits for" in report.stdout:
            break  # (while starting up, a rank may read as stalled with no step yet)
    assert report is not None and report.returncode == 1, report and report.stdout
    assert "STALLED: the job waits for rank 3" in report.stdout
    server = start_tensorboard(logdir, tmp_path, "--reload_interval=1")
    try:
        tab = RanksTab(browser, server.url)
        try:
            waited = tab.frame.locator(".tl-stalled [data-waited-for='true'] .tl-rank-link")
            waited.wait_for(timeout=60_000)
            assert waited.inner_text().startswith("rank 3 · the job waits for it")
        finally:
            tab.close()
    finally:
        stop(server)
    assert all(agent.poll() is None for agent in agents)  # named while the job runs
