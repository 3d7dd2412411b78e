"""A worker killed before training, on the host whose agent does not hold the c10d rendezvous
store: its agent ends, and the store's host goes on, its workers waiting in
``init_process_group`` for the dead rank (torchelastic's agent asks the store only for nodes
waiting). Plain torchrun does the same, which is why the fault campaign's ``rendezvous-kill``
truth lets the job run on (``tests/fault_injection.py``); the report must name the killed rank
and the ranks that wait for it while the job runs. One FSDP2 job under each launcher, at once.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import need
from fault_campaign import JOB_ENV
from users_jobs import SHARDED, UserJob, start_job

#: Held to no bound: in the timed tests' group only so that the two groups take about as long.
pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.beside_timed]

WATCH_S = 25.0  # the job that ends by itself does so within seconds here


def _kill_off_the_store(job: UserJob) -> tuple[int, list[int]]:
    """SIGKILL of the first rank on the host without the store, as soon as the workers exist:
    that rank, and the store host's ranks."""
    job.wait_for_workers(job.ranks)
    store = job.store_node()
    on_store = [r for r in range(job.ranks) if job.node_of(r) == store]
    rank = next(r for r in range(job.ranks) if r not in on_store)
    job.signal_rank(rank, signal.SIGKILL)
    return rank, on_store


@pytest.fixture(scope="module")
def left_running(tmp_path_factory) -> dict[bool, tuple]:
    """Per launcher (True: tb-monitor run): the job, the killed rank and the store host's ranks,
    what still ran after ``WATCH_S``, and (under tb-monitor run) the report read then."""
    need("torch")
    root = tmp_path_factory.mktemp("rdzv-kill")
    jobs = {
        monitored: start_job(
            root / str(monitored), SHARDED, "fsdp2", "60", env=JOB_ENV, monitored=monitored
        )
        for monitored in (False, True)
    }
    try:
        with ThreadPoolExecutor() as pool:  # each as soon as its own workers exist
            hits = {
                monitored: pool.submit(_kill_off_the_store, job) for monitored, job in jobs.items()
            }
        killed = {monitored: hit.result() for monitored, hit in hits.items()}
        time.sleep(WATCH_S)
        return {
            monitored: (job, killed[monitored], job.running(), job.report() if monitored else None)
            for monitored, job in jobs.items()
        }
    finally:
        for job in jobs.values():
            job.stop()


def test_plain_torchrun_leaves_the_store_hosts_workers_waiting(left_running):
    """Under plain torchrun the store's agent and its two workers still run: torch's behaviour
    (if this fails, torch now ends such a job, and the campaign's truth can ask that it ends)."""
    job, _, running, _ = left_running[False]
    assert len(running) == 3, job.output()


def test_report_names_the_killed_rank_while_the_job_runs(left_running):
    """Under tb-monitor run, the report read while the job runs names the killed rank."""
    _, (killed, _), running, report = left_running[True]
    cause = report["jobs"][-1]["attempts"][-1]["root_cause"]
    assert running and (cause["rank"], cause["signal"]) == (killed, "SIGKILL")


def test_report_names_the_ranks_still_waiting(left_running):
    """The report lists the store host's two ranks as waiting, not as stopped."""
    _, (_, on_store), _, report = left_running[True]
    assert report["jobs"][-1]["waiting_ranks"] == on_store
