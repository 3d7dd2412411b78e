"""The fault campaign's CI sample: one fixed seed's cases, 12 faults (every fault kind once but
those whose answer other acceptance tests read from real jobs already), each a real job of a users'
script under ``tb-monitor run`` hit from outside; the report must be right about each. Among the
faults: a network partition between two hosts (network namespaces, healed once named) and a rank
stopped from outside 60 ms of every 100 ms (slow but stepping: the one straggler, never stalled).

It replaces the scenario tests it covers: a rank held to a CPU quota is the one straggler, starved
of CPU (FSDP2); a rank stopped for part of each step is the one straggler (FSDP1); a lost node's
root cause names all its ranks, dated after the kill, in a job that ended; a worker killed in
rendezvous is named while the store's host waits on. Left out, as read elsewhere from real jobs
(``NOT_SAMPLED``): a worker that raises, one SIGKILLed or SIGSEGVed (``test_restarts_torchrun``,
with a restart), a preempted job (``test_shutdown_torchrun``, beside plain torchrun). The noise
that is no fault (busy neighbours, a host's clock ahead, a slow checkpoint, a long evaluation, GC
pauses, slow data loading: a job each, run to its end) runs in the benchmark; the rules it holds to
have their own tests (tests/analysis/test_stall_rules.py, test_starved.py, test_clock_skew.py), and
the healthy jobs of tests/integration/test_users_jobs.py are followed live, no alarm allowed.

The cases and their scoring are ``tests/fault_campaign.py``; the full campaign, with its table and
rates, is ``benchmarks/bench_fault_campaign.py``. A wrong answer the campaign finds gets a test of
its own (tests/analysis/) before it is fixed; this sample keeps the fixed ones fixed.
"""

from __future__ import annotations

import json

import pytest
from conftest import IN_CI, need
from fault_campaign import SCRIPTS, plan, run_case, usable_faults
from fault_injection import FAILURES, STALLS

#: Not ``timed``: nothing here is held to a wall-clock bound, and the report must be right however
#: busy the machine is; so the sample runs in the serial group, beside the timed tests' jobs.
pytestmark = [pytest.mark.slow, pytest.mark.torch]

SEED = 20261201
#: The fault kinds, on four scripts (a Lightning job's imports cost half a minute here; the
#: benchmark runs it, and tests/integration/test_users_jobs.py runs it healthy). Kinds added later
#: are drawn on their own, so that the first kinds' cases stay as they were.
LATER_FAILURES = ["save-kill", "save-raise"]
LATER_STALLS = ["stop-start"]
LATER_PARTITIONS = ["partition"]
KINDS = [kind for kind in (*FAILURES, *STALLS) if kind not in LATER_FAILURES + LATER_STALLS]
#: Drawn with the others (the draw stays as it was) but not run: where their answer is read from
#: a real job already (the benchmark runs every kind). Twelve faults remain, the issue's floor.
NOT_SAMPLED = {
    "raise": "test_restarts_torchrun (an exception, with a restart)",
    "sigkill": "test_restarts_torchrun (a signal, with a restart)",
    "sigsegv": "a worker ended by a signal, as sigkill: test_restarts_torchrun",
    "preempt": "test_shutdown_torchrun (SIGTERM to every agent, beside plain torchrun)",
}
_SCRIPTS = ("ddp", "hf", "fsdp2", "accelerate")
DRAWN = [
    *plan(SEED, len(KINDS), scripts=_SCRIPTS, faults=KINDS),
    *plan(SEED, len(LATER_FAILURES), scripts=_SCRIPTS, faults=LATER_FAILURES),
    # on four ranks: beside one other rank, the median it is held to is the mean of the two
    # (half its slowdown counts), and on a busy machine that hid it once (hf: 1.195x)
    *plan(SEED, len(LATER_STALLS), scripts=("fsdp1",), faults=LATER_STALLS),
    *plan(SEED, len(LATER_PARTITIONS), scripts=("ddp",), faults=LATER_PARTITIONS),
]
SAMPLE = [case for case in DRAWN if case.fault not in NOT_SAMPLED]
#: Wrong answers the campaign found and that are not fixed yet: each still a case of its own,
#: expected to fail (not run: it waits out the campaign's 150-s limit), until it is fixed.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


def _marked(case):
    why = KNOWN_WRONG.get((case.fault, case.script))
    marks = [pytest.mark.xfail(reason=why, run=False, strict=True)] if why else []
    return pytest.param(case, marks=marks, id=str(case))


@pytest.mark.parametrize("case", [_marked(case) for case in SAMPLE])
def test_report_is_right_about_the_fault(case, tmp_path):
    """The report gives the case's status, exit code, root cause, stragglers and stalls."""
    need(SCRIPTS[case.script].module)
    why_not = usable_faults().get(case.fault)
    if why_not is not None:
        if IN_CI:
            pytest.fail(f"{case.fault} is required when CI=true: {why_not}")
        pytest.skip(why_not)
    outcome = run_case(case, tmp_path)
    ranks = (outcome.wrong_read or {}).get("ranks") or {}
    wrong_read = {key: ranks.get(key) for key in ("waited_for", "stalls")}
    assert outcome.verdict == "right", (
        f"{case}: {'; '.join(outcome.wrong)}\n{json.dumps(outcome.report, indent=1)[:4000]}"
        f"\nthe first live read that named a rank wrongly:\n"
        f"{json.dumps(wrong_read, indent=1)[:6000]}"
    )
