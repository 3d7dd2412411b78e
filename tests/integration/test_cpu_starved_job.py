"""A real DDP job with one rank held to 10% of a CPU from outside (a cgroup): the report names
that rank, and only it, as starved of CPU, though its compute reads about normal (issue 46,
item 6). The job is ``test_users_jobs``' DDP script (2 agents x 2 workers, gloo), with short
steps so that the quota bites; rank 1 is moved into the cgroup once training runs."""

from __future__ import annotations

import json

import pytest
from cgroups import cpu_limited
from conftest import need, need_cpu_limit
from users_jobs import DDP, JOB_TIMEOUT, SHORT_WINDOWS, user_job

pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.timed]

STARVED_RANK = 1
#: Steps of 10 ms of sleep: rank 1's own CPU work then needs more than its 10% of a CPU.
ENV = {**SHORT_WINDOWS, "STEP_SLEEP_S": "0.01"}
ARGS = ("100", "1000")  # epochs, and no snapshot in between


@pytest.fixture(scope="module")
def starved(tmp_path_factory) -> tuple[list[int | None], dict]:
    """The job's exit codes and ``report --json`` once it ended, rank 1 held to 10% of a CPU
    from its third epoch on."""
    need("torch")
    need_cpu_limit()
    with user_job(tmp_path_factory.mktemp("starved"), DDP, *ARGS, env=ENV) as job:
        job.wait_for_output("Epoch 2 ")
        with cpu_limited(job.worker_pid(STARVED_RANK), quota_us=10_000, period_us=100_000):
            job.wait(JOB_TIMEOUT)
        return job.returncodes, job.report()


def test_the_starved_rank_is_the_only_straggler(starved):
    """The rank held to 10% of a CPU is flagged, and no other rank."""
    returncodes, report = starved
    ranks = report["ranks"]
    assert returncodes == [0, 0]
    assert [s["rank"] for s in ranks["stragglers"]] == [STARVED_RANK], json.dumps(ranks)


def test_the_report_says_it_was_starved_of_cpu(starved):
    """Its reason is the CPU it waited for, not its compute."""
    flagged = starved[1]["ranks"]["stragglers"][0]
    assert flagged["cause"] == "cpu", json.dumps(flagged)
    assert flagged["reason"].startswith("starved of CPU: "), json.dumps(flagged)
