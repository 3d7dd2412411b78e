"""A seeded fault campaign: users' scripts under ``tb-monitor run``, a fault injected from
outside at a random moment and rank, and ``tb-monitor report --json`` scored against the truth.

``plan(seed, count)`` draws the cases (the seed decides the script, rank and moment; the fault
kinds come round in a shuffled order, so a small sample still meets each kind); ``run_case`` runs
one as a real job (``tests/users_jobs.py``), hits it (``tests/fault_injection.py``), reads the
report while the job runs and once it has ended (or the campaign ended one its truth lets run
on), and answers with an ``Outcome``: right, wrong (and what was wrong), or missed, with the time
from the fault until the report named it.

Read while it runs, a report must never call a job stalled that no fault stopped (no rank
listed stalled in a healthy job, no rank wrongly called waited for); read at the end,
it must give the truth's status, exit code, root cause (rank and kind, dated after the fault),
and stragglers (and why, where the truth knows: a CPU quota starves), and list no stall. A job
its truth lets run on (a worker killed before training) is ended by the campaign once named;
its ranks still running then must have been named waiting for the failed rank. Used by
tests/integration/test_fault_campaign.py (a fixed sample in CI) and
benchmarks/bench_fault_campaign.py (any seed and count, with the table of results).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from busy_cpu import busy_neighbours
from fault_injection import FAULTS, HOOKS, Fault, Truth, cgroups_usable
from netns import netns_usable, two_hosts
from users_jobs import (
    ACCELERATE,
    DDP,
    HF,
    LIGHTNING,
    SHARDED,
    SHORT_WINDOWS,
    ReportFeed,
    UserJob,
    flagged_stragglers,
    stalled_ranks,
    user_job,
    waited_for,
)

__all__ = ["READING", "SCRIPTS", "Case", "Outcome", "Script", "plan", "run_case", "usable_faults"]


@dataclass(frozen=True)
class Script:
    """A users' script as the campaign runs it: its arguments, hosts, and what it prints once
    it trains."""

    path: Path
    args: tuple[str, ...]
    nodes: int
    training: str
    module: str  # the framework it imports
    can: frozenset[str] = frozenset()  # what noise it can make: "save" a snapshot, "eval"


SCRIPTS = {
    # a snapshot every 10 epochs (at 0, 10, 20); EVAL_EVERY makes it evaluate (fault_injection)
    "ddp": Script(DDP, ("25", "10"), 2, "Epoch 1 ", "torch", frozenset({"save", "eval"})),
    "lightning": Script(
        LIGHTNING, ("--num_nodes", "1"), 1, "All distributed processes registered", "lightning"
    ),
    "hf": Script(HF, (), 1, "'loss'", "transformers"),
    "accelerate": Script(ACCELERATE, (), 1, "step 20 loss", "accelerate"),
    "fsdp1": Script(SHARDED, ("fsdp1", "60"), 2, "step 10 loss", "torch"),
    "fsdp2": Script(SHARDED, ("fsdp2", "60"), 2, "step 10 loss", "torch"),
}
#: The jobs' environment: short rank windows, steps of 0.05 s, about 8 s of training, and the
#: hooks that let a worker be made to raise or to leak.
JOB_ENV = {
    **SHORT_WINDOWS,
    "STEP_SLEEP_S": "0.05",
    "TRAIN_SECONDS": "8",
    "TB_MONITOR_CAMPAIGN_HOOKS": "1",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")])),
}
#: The reading side's settings: none, so the stall rule's defaults are what a case measures
#: (``bench_fault_campaign.py --stall-floor``, ``--reader`` to measure others).
READING: dict[str, str] = {}
JOB_TIMEOUT_S = 150.0  # a job that has not ended by then is killed, and its case missed
RELEASE_AFTER_S = 40.0  # a stopped or throttled rank is let go after this, named or not
#: A job the truth lets run on (``Truth.ends_alone``) is ended this long after the report named
#: the fault: time enough for one that would end by itself to do so.
END_AFTER_NAMED_S = 20.0
READ_EVERY_S = 1.0


@dataclass(frozen=True)
class Case:
    """One job and the fault it meets."""

    number: int
    script: str
    fault: str
    rank: int
    after_s: float  # seconds after training began (after the workers exist, in rendezvous)

    def __str__(self) -> str:
        return f"#{self.number} {self.fault} on rank {self.rank} of {self.script}"


@dataclass
class Outcome:
    """How the report answered one case."""

    case: Case
    truth: Truth
    reading: dict[str, str]  # the reading side's environment (stall floor, which tb_monitor)
    wrong: list[str] = field(default_factory=list)  # what it got wrong, each in one line
    missed: bool = False  # it never named what the truth has to name
    ended_by_campaign: bool = False  # it ran on after the fault was named (``Truth.ends_alone``)
    left_running: frozenset[int] = frozenset()  # ranks whose workers ran when the campaign ended it
    waiting: frozenset[int] = frozenset()  # every rank named still waiting for a failed one
    named_s: float | None = None  # fault -> the first report that named it
    hit_wall: float = 0.0  # when the fault was injected (epoch seconds)
    flagged: frozenset[int] = frozenset()  # stragglers in the end
    waited_for: frozenset[int] = frozenset()  # every rank named waited for while it ran
    stalled: frozenset[int] = frozenset()  # every rank listed stalled while it ran
    agent_saw: set[str] = field(default_factory=set)  # what the stalled ranks' agents saw
    report: dict | None = None
    #: The first live report that called a rank waited for, or stalled, against the truth: kept
    #: whole, as what a wrong answer that comes and goes under load is diagnosed from.
    wrong_read: dict | None = None

    @property
    def verdict(self) -> str:
        return "missed" if self.missed else "wrong" if self.wrong else "right"


def usable_faults() -> dict[str, str]:
    """Each fault kind this machine cannot make, and why."""
    why_not = {}
    for name, fault in FAULTS.items():
        if fault.needs_cgroups and (reason := cgroups_usable()):
            why_not[name] = reason
        if fault.netns and (reason := netns_usable()):
            why_not[name] = reason
    return why_not


def plan(
    seed: int, count: int, scripts: Iterable[str] = SCRIPTS, faults: Iterable[str] = FAULTS
) -> list[Case]:
    """``count`` cases drawn with ``seed``: fault kinds in turn (their order shuffled), each on
    a script with hosts enough for it, at a random rank and moment."""
    rng = random.Random(seed)
    kinds = list(faults)
    rng.shuffle(kinds)
    names = list(scripts)
    cases = []
    kinds = [kind for kind in kinds if _fitting(FAULTS[kind], names)]
    for number in range(count):
        fault = FAULTS[kinds[number % len(kinds)]]
        script = rng.choice(_fitting(fault, names))
        ranks = 2 * SCRIPTS[script].nodes
        after = 0.0 if fault.during_rendezvous else round(rng.uniform(0.5, 4.0), 1)
        cases.append(Case(number, script, fault.name, rng.randrange(ranks), after))
    return cases


def _fitting(fault: Fault, names: list[str]) -> list[str]:
    """The scripts among ``names`` with hosts enough for ``fault`` and that make its noise."""
    return [
        name
        for name in names
        if SCRIPTS[name].nodes >= fault.nodes
        and (not fault.needs or fault.needs in SCRIPTS[name].can)
    ]


def run_case(case: Case, workdir: Path, reading: dict[str, str] | None = None) -> Outcome:
    """Run ``case`` as a real job in ``workdir`` and score the report against its truth, read
    with ``reading`` as the reading side's environment (default ``READING``)."""
    fault, script = FAULTS[case.fault], SCRIPTS[case.script]
    neighbours = busy_neighbours() if fault.busy else contextlib.nullcontext()
    linked = two_hosts() if fault.netns else contextlib.nullcontext()
    with (
        neighbours,
        linked as hosts,
        user_job(
            workdir,
            script.path,
            *script.args,
            env=JOB_ENV,
            nodes=script.nodes,
            node_env=fault.node_env,
            hosts=hosts,
        ) as job,
    ):
        _wait_to_hit(job, script, fault, case.after_s)
        truth = fault.truth(job, case.rank)
        outcome = Outcome(case, truth, dict(READING if reading is None else reading))
        hit_at, outcome.hit_wall = time.monotonic(), time.time()
        release = _Release(fault.hit(job, case.rank))
        try:
            with job.followed(outcome.reading, READ_EVERY_S) as reports:
                _follow(job, outcome, hit_at, release, reports)
        finally:
            release()
    _score_end(outcome, job)
    return outcome


def _wait_to_hit(job: UserJob, script: Script, fault: Fault, after_s: float) -> None:
    if not fault.during_rendezvous:
        job.wait_for_output(script.training)
    job.wait_for_workers(job.ranks)
    time.sleep(after_s)


class _Release:
    """A fault's undo, done once (a rank stopped or throttled let go), whoever asks first."""

    def __init__(self, undo: Callable[[], None] | None) -> None:
        self._undo = undo

    def __call__(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            with contextlib.suppress(ProcessLookupError):  # the process has ended meanwhile
                undo()


def _follow(
    job: UserJob, outcome: Outcome, hit_at: float, release: _Release, reports: ReportFeed
) -> None:
    """Read the report while the job runs (each refresh of ``report --follow``): when it first
    names the fault, what it says is stalled, and (for a fault that holds a rank) let the rank
    go once named."""
    truth = outcome.truth
    while job.running():
        if time.monotonic() - hit_at > JOB_TIMEOUT_S:
            outcome.missed = True
            outcome.wrong.append(f"the job still ran {JOB_TIMEOUT_S:.0f} s after the fault")
            return
        # Once the report finds the job finished (a failed one may still have ranks waiting),
        # a report of its own per read.
        ended = reports.ended
        report = _report(job, outcome) if ended else reports.next()
        waited = waited_for(report)
        outcome.waited_for |= waited
        outcome.stalled |= frozenset(stalled_ranks(report))
        if outcome.wrong_read is None and _wrongly_named(report, truth):
            outcome.wrong_read = report
        outcome.waiting |= frozenset(
            r for j in report.get("jobs") or [] for r in j["waiting_ranks"]
        )
        outcome.agent_saw |= _agent_views(report, truth.waited_for)
        if outcome.named_s is None and _names(report, truth):
            outcome.named_s = time.monotonic() - hit_at
        if _done_holding(outcome, time.monotonic() - hit_at):
            release()
        if _may_end(outcome, time.monotonic() - hit_at):
            outcome.ended_by_campaign = True
            outcome.left_running = frozenset(_running_ranks(job))
            return  # run_case's user_job ends it
        if ended:
            time.sleep(READ_EVERY_S)


def _wrongly_named(report: dict, truth: Truth) -> bool:
    """A live report names a rank the truth does not: waited for, or stalled where no rank
    is held or only waits."""
    stalled = frozenset(stalled_ranks(report))
    return bool(_false_waits(waited_for(report), truth) or _false_stalls(stalled, truth))


def _false_waits(waited: frozenset[int], truth: Truth) -> frozenset[int]:
    """The ranks of ``waited`` the truth has nobody wait for."""
    return waited - truth.waited_for - truth.cause_ranks


def _false_stalls(stalled: frozenset[int], truth: Truth) -> frozenset[int]:
    """The ranks of ``stalled`` that only waited, or all of them in a job no fault held."""
    return stalled if _healthy(truth) else stalled & truth.collateral


def _healthy(truth: Truth) -> bool:
    return truth.status == "succeeded" and not (truth.waited_for or truth.stragglers)


def _done_holding(outcome: Outcome, since_hit_s: float) -> bool:
    """A rank held by the fault can be let go: the report named it, and its agent's view (where
    the truth has one) is in, or the wait is over."""
    truth = outcome.truth
    if not (truth.waited_for or truth.stragglers):
        return False
    seen = truth.agent_sees is None or truth.agent_sees in outcome.agent_saw
    return (outcome.named_s is not None and seen) or since_hit_s > RELEASE_AFTER_S


def _may_end(outcome: Outcome, since_hit_s: float) -> bool:
    """The campaign may end the job: its truth lets it run on, and the report named the fault
    ``END_AFTER_NAMED_S`` ago."""
    named = outcome.named_s
    return (
        not outcome.truth.ends_alone
        and named is not None
        and since_hit_s - named > END_AFTER_NAMED_S
    )


def _running_ranks(job: UserJob) -> list[int]:
    """The ranks whose worker process still exists."""
    running = []
    for rank in range(job.ranks):
        with contextlib.suppress(LookupError):
            job.worker_pid(rank)
            running.append(rank)
    return running


def _score_waiting(outcome: Outcome) -> None:
    """A job left running had its running ranks named waiting while it ran; no failed rank was."""
    unnamed = outcome.left_running - outcome.waiting
    if unnamed:
        outcome.wrong.append(f"ranks {sorted(unnamed)} ran on, never named waiting")
    if outcome.waiting & outcome.truth.cause_ranks:
        outcome.wrong.append(f"the failed rank named waiting: {sorted(outcome.waiting)}")


def _score_end(outcome: Outcome, job: UserJob) -> None:
    """What the report of the ended job says, against the truth."""
    truth = outcome.truth
    report = outcome.report = _report(job, outcome)
    wrong = outcome.wrong
    if report["status"] != truth.status:
        wrong.append(f"status {report['status']!r}, not {truth.status!r}")
    expected_exit = 0 if truth.status == "succeeded" else 1
    if report["exit_code"] != expected_exit:
        wrong.append(f"report's exit code {report['exit_code']}, not {expected_exit}")
    if report["ranks"] and report["ranks"]["stalled"]:
        wrong.append(f"an ended job still lists stalls: {stalled_ranks(report)}")
    if _healthy(truth) and outcome.stalled:
        wrong.append(f"ranks {sorted(outcome.stalled)} called stalled in a healthy job")
    if outcome.stalled & truth.collateral:
        wrong.append(
            f"ranks {sorted(outcome.stalled & truth.collateral)} that only waited called stalled"
        )
    false_waits = _false_waits(outcome.waited_for, truth)
    if false_waits:
        wrong.append(f"ranks {sorted(false_waits)} called waited for, wrongly")
    if truth.waited_for and not truth.waited_for <= outcome.waited_for:
        outcome.missed = True
        wrong.append(f"rank {sorted(truth.waited_for)} never named as waited for")
    if truth.agent_sees and truth.agent_sees not in outcome.agent_saw:
        wrong.append(f"its agent saw {sorted(outcome.agent_saw)}, not {truth.agent_sees!r}")
    outcome.flagged = flagged_stragglers(report)
    if outcome.flagged != truth.stragglers:
        wrong.append(f"stragglers {sorted(outcome.flagged)}, not {sorted(truth.stragglers)}")
    causes = _straggler_causes(report)
    if truth.straggler_cause and causes != {truth.straggler_cause}:
        wrong.append(f"stragglers' cause {sorted(causes)}, not {truth.straggler_cause!r}")
    _score_dated(outcome, report)
    _score_waiting(outcome)
    _score_cause(outcome, report)


def _score_cause(outcome: Outcome, report: dict) -> None:
    truth, cause = outcome.truth, _root_cause(report)
    if not truth.cause_ranks:
        if cause is not None:
            outcome.wrong.append(f"a root cause where there is none: {cause['reason']}")
        return
    if cause is None:
        outcome.missed = True
        outcome.wrong.append("no root cause")
        return
    named = frozenset(cause.get("ranks") or [cause["rank"]])
    ranks_right = (
        named == truth.cause_ranks
        if truth.cause_kind in ("node lost", "cut off")
        else (cause["rank"] in truth.cause_ranks)
    )
    if not ranks_right or cause_kind(cause) != truth.cause_kind:
        outcome.wrong.append(
            f"root cause rank {sorted(named)} ({cause_kind(cause)}: {cause['reason']}), "
            f"not {sorted(truth.cause_ranks)} ({truth.cause_kind})"
        )


def _score_dated(outcome: Outcome, report: dict) -> None:
    """The root cause is dated by what was seen after the fault, never before it (a lost node:
    not at its ranks' last flushed records)."""
    cause = _root_cause(report)
    if outcome.truth.cause_ranks and cause is not None and cause["time"] < outcome.hit_wall:
        early = outcome.hit_wall - cause["time"]
        outcome.wrong.append(f"root cause dated {early:.1f} s before the fault: {cause['reason']}")


def cause_kind(cause: dict) -> str:
    """What kind of failure a report's root cause names, in the truth's words."""
    if cause.get("source") == "vanished" or cause.get("node_lost"):
        return "node lost"
    if cause.get("source") == "cut_off":
        return "cut off"
    if cause.get("exception"):
        return "exception"
    return cause.get("signal") or f"exit code {cause.get('exit_code')}"


def _names(report: dict, truth: Truth) -> bool:
    """The report names what the truth says happened."""
    if truth.waited_for:
        return truth.waited_for <= waited_for(report)
    if truth.stragglers:
        return truth.stragglers <= flagged_stragglers(report)
    if truth.cause_ranks:
        cause = _root_cause(report)
        return cause is not None and cause["rank"] in truth.cause_ranks
    return report["status"] == truth.status and truth.status != "succeeded"


def _report(job: UserJob, outcome: Outcome) -> dict:
    return job.report(outcome.reading)


def _root_cause(report: dict) -> dict | None:
    jobs = report.get("jobs") or []
    if not jobs or not jobs[-1]["attempts"]:
        return None
    return jobs[-1]["attempts"][-1]["root_cause"]


def _agent_views(report: dict, ranks: frozenset[int]) -> set[str]:
    """What the agents of ``ranks`` see of their stalled processes, as the report says."""
    stalls = (report.get("ranks") or {}).get("stalls") or []
    return {
        s["agent"]["seen"]
        for s in stalls
        if s["rank"] in ranks and (s.get("agent") or {}).get("seen")
    }


def _straggler_causes(report: dict) -> set[str]:
    ranks = report.get("ranks") or {}
    return {s["cause"] for s in ranks.get("stragglers") or [] if s.get("flagged")}
