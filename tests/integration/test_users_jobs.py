"""Acceptance on users' jobs (issue 26): unmodified DDP, Lightning and Hugging Face scripts run
under ``tb-monitor run`` as under plain torchrun, and a slow rank of the DDP script is the one
straggler.

Each scenario is one real job (``tests/users_jobs.py``: the DDP script on two agents x two
workers, the Lightning and Hugging Face scripts on one agent), shared by the tests that read it.
Faults on the same scripts are the fault campaign's CI sample (``test_fault_campaign``: a lost
node, a preemption, a partition, ...); shutdown beside plain torchrun is
``test_shutdown_torchrun``'s (SIGTERM to every agent, a rank blocked in a collective) and
``benchmarks/bench_shutdown.py``'s (a node lost with kill -9 as well).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import need
from users_jobs import (
    DDP,
    HF,
    LIGHTNING,
    SHORT_WINDOWS,
    UserJob,
    flagged_stragglers,
    machine_fault,
    script_lines,
    stalled_ranks,
    user_job,
    waited_for,
)

from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.scoring import FLAG_THRESHOLD, FLAG_WINDOWS, longest_over

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

#: A healthy DDP job: ~48 steps of 0.05 s compute, several 1 s windows.
DDP_ARGS = ("12", "100")
DDP_ENV = {**SHORT_WINDOWS, "STEP_SLEEP_S": "0.05"}
HEALTHY_TIMEOUT_S = 90.0  # a healthy job ends in 10-40 s here


@dataclass
class Ended:
    """How one job ended: exit codes, output, and under tb-monitor run its report and logdir."""

    returncodes: list[int | None]
    output: str
    report: dict | None
    logdir: Path | None = None
    live: Live | None = None  # under tb-monitor run: what its live report said while it ran

    def grid(self) -> RankGrid:
        """The job's rank-health grid, read back from its logdir."""
        assert self.logdir is not None
        return RankGrid.from_logdir(
            self.logdir, window_s=float(SHORT_WINDOWS["TB_MONITOR_RANK_WINDOW_S"])
        )

    def lines(self) -> list[str]:
        return script_lines(self.output)


@dataclass
class Live:
    """What ``tb-monitor report --json --follow`` said while a job ran, as a user watching it
    would have seen: every alarm, and the most ranks one document counted."""

    alarms: set[str] = field(default_factory=set)  # stalls, ranks waited for, flagged stragglers
    ranks: int = 0

    def read(self, document: dict) -> None:
        self.ranks = max(self.ranks, (document.get("ranks") or {}).get("count") or 0)
        self.alarms |= {f"rank {r} stalled" for r in stalled_ranks(document)}
        self.alarms |= {f"rank {r} waited for" for r in waited_for(document)}
        self.alarms |= {f"rank {r} a straggler" for r in flagged_stragglers(document)}


#: How long the follow may take to print its last documents once the job's processes are gone.
LAST_DOCUMENT_S = 10.0


def finish(job: UserJob, timeout: float = 150.0) -> Ended:
    """Wait for ``job`` to end and read it back, under tb-monitor run following its live report
    meanwhile; after ``timeout`` everything is killed, and its output ends with what still ran."""
    deadline = time.monotonic() + timeout
    late, live = "", None
    try:
        if job.monitored:
            live = _follow_to_the_end(job, deadline)
        job.wait(max(deadline - time.monotonic(), 0.0))
    except TimeoutError as exc:  # names what still runs
        late = f"\n{exc}"
    job.stop()
    report = job.report() if job.monitored else None
    logdir = job.logdir if job.monitored else None
    return Ended(job.returncodes, job.output() + late, report, logdir, live)


def _follow_to_the_end(job: UserJob, deadline: float) -> Live:
    """Read every document of the job's live report until the follow ends (the report found the
    job finished), or ``LAST_DOCUMENT_S`` after its processes are gone, or at ``deadline``. A
    follow that fails is an alarm of its own, never an error here (the job's parity tests still
    read it)."""
    live = Live()
    gone_at = None
    with job.followed() as feed:
        try:
            while not feed.ended and time.monotonic() < deadline:
                if gone_at is None and not job.running():
                    gone_at = time.monotonic()
                if gone_at is not None and time.monotonic() - gone_at > LAST_DOCUMENT_S:
                    break
                live.read(feed.next(timeout=max(deadline - time.monotonic(), 1.0)))
            if feed.ended:
                live.read(feed.next())  # the last document, once the follow found it finished
        except AssertionError as exc:  # no document in time, or the follow died without one
            live.alarms.add(f"the live report failed: {exc}")
    return live


def run_healthy(
    tmp: Path, script: Path, *args: str, env: dict[str, str], nodes: int = 2
) -> dict[bool, Ended]:
    """``script`` run to its end under plain torchrun, then under tb-monitor run. Each once more
    when it failed for the machine's sake (a port taken meanwhile), and plain torchrun's once
    more when it failed at all: it is the reference (gloo sometimes aborts a rank in
    ``destroy_process_group`` here, and its peers then hang)."""
    ended = {}
    for monitored in (False, True):
        for attempt in ("", "-retry"):
            workdir = tmp / f"{monitored}{attempt}"
            with user_job(workdir, script, *args, monitored=monitored, env=env, nodes=nodes) as job:
                ended[monitored] = run = finish(job, timeout=HEALTHY_TIMEOUT_S)
            fault = machine_fault(run.returncodes, run.output)
            if fault is None and (monitored or set(run.returncodes) == {0}):
                break
            why = fault or f"exit codes {run.returncodes}"
            warnings.warn(
                f"{script.name} under {_launcher(monitored)} failed ({why}): again", stacklevel=2
            )
    return ended


def _launcher(monitored: bool) -> str:
    return "tb-monitor run" if monitored else "plain torchrun"


# -- the scenarios, one real job (or one per launcher) each --------------------------------


@pytest.fixture(scope="module")
def ddp_healthy(tmp_path_factory) -> dict[bool, Ended]:
    """The DDP script with no fault, under plain torchrun and under tb-monitor run."""
    need("torch")
    return run_healthy(tmp_path_factory.mktemp("ddp"), DDP, *DDP_ARGS, env=DDP_ENV)


@pytest.fixture(scope="module")
def lightning_healthy(tmp_path_factory) -> dict[bool, Ended]:
    """The Lightning script with no fault, under each launcher: one node of two workers (each
    worker's ``import lightning`` costs ~5 s of CPU; the DDP script's jobs have two nodes)."""
    need("lightning")
    return run_healthy(
        tmp_path_factory.mktemp("lightning"),
        LIGHTNING,
        "--num_nodes",
        "1",
        env=SHORT_WINDOWS,
        nodes=1,
    )


@pytest.fixture(scope="module")
def hf_healthy(tmp_path_factory) -> dict[bool, Ended]:
    """The Hugging Face script with no fault, under each launcher, on one node of two workers."""
    need("transformers")
    return run_healthy(tmp_path_factory.mktemp("hf"), HF, env=SHORT_WINDOWS, nodes=1)


@pytest.fixture(scope="module")
def ddp_slow_rank(tmp_path_factory) -> Ended:
    """The DDP script with rank 1's forward three times as slow, under tb-monitor run (twice
    as slow, a fresh-clone CI's load once blurred one of the first three windows)."""
    need("torch")
    env = {**DDP_ENV, "SLOW_RANK": "1", "SLOW_FACTOR": "3.0"}
    with user_job(tmp_path_factory.mktemp("slow"), DDP, *DDP_ARGS, env=env) as job:
        return finish(job)


# -- (a) the scripts run unchanged -----------------------------------------------------------


@pytest.mark.parametrize("scenario", ["ddp_healthy", "lightning_healthy", "hf_healthy"])
def test_script_exits_as_under_plain_torchrun(scenario, request):
    """A user's script exits with the same codes under tb-monitor run as under plain torchrun."""
    ended = request.getfixturevalue(scenario)
    assert set(ended[False].returncodes) == {0}, ended[False].output
    assert ended[True].returncodes == ended[False].returncodes, ended[True].output


@pytest.mark.parametrize("scenario", ["ddp_healthy", "lightning_healthy", "hf_healthy"])
def test_script_prints_as_under_plain_torchrun(scenario, request):
    """A user's script prints the same lines under tb-monitor run as under plain torchrun."""
    ended = request.getfixturevalue(scenario)
    assert ended[False].lines(), ended[False].output
    assert ended[True].lines() == ended[False].lines()


@pytest.mark.parametrize("scenario", ["ddp_healthy", "lightning_healthy", "hf_healthy"])
def test_report_says_succeeded(scenario, request):
    """The report of a user's job that ran to its end says it succeeded, exit code 0."""
    report = request.getfixturevalue(scenario)[True].report
    assert (report["status"], report["exit_code"]) == ("succeeded", 0), report["jobs"]
    assert [job["status"] for job in report["jobs"]] == ["SUCCEEDED"]


# -- (b) stragglers under unmodified DDP ---------------------------------------------------------


def test_slow_rank_is_the_only_straggler(ddp_slow_rank):
    """In a DDP job whose rank 1's forward is 2x slower, rank 1 and only rank 1 is flagged."""
    ranks = ddp_slow_rank.report["ranks"]
    assert ddp_slow_rank.returncodes == [0, 0], ddp_slow_rank.output
    assert [s["rank"] for s in ranks["stragglers"]] == [1], json.dumps(ranks["slowest"])


def test_slow_rank_is_the_only_alarm_while_it_runs(ddp_slow_rank):
    """While the job runs, its live report flags rank 1 and calls no rank stalled or waited for."""
    live = ddp_slow_rank.live
    assert live.ranks == 4 and live.alarms == {"rank 1 a straggler"}, ddp_slow_rank.output


def test_slow_rank_is_flagged_within_three_windows(ddp_slow_rank):
    """The first three windows with step times already flag rank 1, and only it (a window
    holding only the job's first step boundary has steps but no step time yet)."""
    grid = ddp_slow_rank.grid()
    timed = (grid.steps > 0) & np.isfinite(grid.relative)
    columns = np.flatnonzero(timed.all(axis=0))[:FLAG_WINDOWS]
    last = columns[-1] + 1
    longest = longest_over(
        grid.relative[:, :last], FLAG_THRESHOLD, present=grid.counted_windows()[:, :last]
    )
    flagged = [grid.ranks[row] for row in np.flatnonzero(longest >= FLAG_WINDOWS)]
    assert flagged == [1], grid.relative[:, :last]


def test_every_rank_records_its_wait_for_the_all_reduces(ddp_slow_rank):
    """Each rank waited in DDP's all-reduces; the fast ones longer than the slow rank 1."""
    grid = ddp_slow_rank.grid()
    waits = np.nanmedian(grid.collective_s, axis=1)
    slow = grid.ranks.index(1)
    assert (waits > 0).all() and waits[slow] < min(np.delete(waits, slow))


def test_step_times_have_a_median_and_p95_per_window(ddp_slow_rank):
    """Each rank's windows carry its step time median and p95 (p95 at least the median)."""
    grid = ddp_slow_rank.grid()
    has = grid.steps > 0
    assert (
        np.isfinite(grid.step_p50[has]).all() and (grid.step_p95[has] >= grid.step_p50[has]).all()
    )


@pytest.mark.parametrize(
    ("scenario", "ranks"), [("ddp_healthy", 4), ("lightning_healthy", 2), ("hf_healthy", 2)]
)
def test_healthy_job_flags_nothing(scenario, ranks, request):
    """A healthy user's job ends with no straggler and no stall in its report."""
    read = request.getfixturevalue(scenario)[True].report["ranks"]
    assert read["count"] == ranks
    assert (read["stragglers"], read["stalls"]) == ([], []), json.dumps(read)


@pytest.mark.parametrize(
    ("scenario", "ranks"), [("ddp_healthy", 4), ("lightning_healthy", 2), ("hf_healthy", 2)]
)
def test_healthy_job_raises_no_alarm_while_it_runs(scenario, ranks, request):
    """The live report of a healthy user's job counts its every rank and calls none stalled,
    waited for or a straggler."""
    ended = request.getfixturevalue(scenario)[True]
    assert (ended.live.ranks, ended.live.alarms) == (ranks, set()), ended.output
