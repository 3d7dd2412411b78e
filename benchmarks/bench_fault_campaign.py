"""The fault campaign: how often ``tb-monitor report`` is right about users' jobs under faults.

Each case is a real job of an unmodified users' script (DDP in pytorch/examples' style, a Lightning
``Trainer``, a Hugging Face ``Trainer``; one or two hosts of 2 workers on 127.0.0.1, gloo on CPU)
under ``tb-monitor run``, hit from outside by one fault at a rank and moment the seed draws
(``tests/fault_campaign.py``; the faults: ``tests/fault_injection.py``), or by noise that is no
fault. Prints one line per case, the table (fault kind x script: right / wrong / missed, and the
time from the fault until the report named it, p50 / p90), and a one-line summary: root causes
right, false stalls and stragglers, straggler and stall precision and recall.

    python benchmarks/bench_fault_campaign.py --seed 7 --count 40 [--script ddp hf] [--fault sigkill ...]
        [--stall-floor S] [--reader PATH]

``--stall-floor`` sets the reading side's ``TB_MONITOR_STALL_FLOOR_S`` (default: none, the rule's
own floors); ``--reader`` reads the reports with the tb_monitor checkout at PATH (say main's, for
the stall rule as it was: a logdir's new heartbeat fields are ignored there). False stalls: the
healthy jobs in which a rank was listed stalled, or one called waited for, while it ran.

Control-group faults need root, and so does ``partition`` (``--fault partition``: the two hosts
talk over a switch of their own in network namespaces, ``tests/netns.py``, cut at the random
moment); a kind this machine cannot make is left out and said so. The CI sample is
tests/integration/test_fault_campaign.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fault_campaign import (  # noqa: E402
    READING,
    SCRIPTS,
    Outcome,
    plan,
    run_case,
    usable_faults,
)
from fault_injection import FAULTS  # noqa: E402


def _quantile(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


def table(outcomes: list[Outcome]) -> str:
    """Fault kind x script: right / wrong / missed, and the seconds until named (p50 / p90)."""
    cells: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        cells[outcome.case.fault, outcome.case.script].append(outcome)
    lines = [
        f"{'fault':<16} {'script':<10} {'right':>5} {'wrong':>5} {'missed':>6} "
        f"{'named p50':>9} {'p90':>5}"
    ]
    for (fault, script), group in sorted(cells.items()):
        verdicts = [o.verdict for o in group]
        named = [o.named_s for o in group if o.named_s is not None]
        lines.append(
            f"{fault:<16} {script:<10} {verdicts.count('right'):>5} {verdicts.count('wrong'):>5} "
            f"{verdicts.count('missed'):>6} {_quantile(named, 0.5):>9} {_quantile(named, 0.9):>5}"
        )
    return "\n".join(lines)


def _ratio(hits: int, total: int) -> str:
    return f"{hits / total:.3f}" if total else "-"


def summary(outcomes: list[Outcome]) -> str:
    """One line: root causes right, false alarms, precision and recall, time to name."""
    faults = [o for o in outcomes if o.truth.cause_ranks or o.truth.status == "terminated"]
    causes_right = sum(
        1
        for o in faults
        if not any(w.startswith(("root cause", "no root", "status")) for w in o.wrong)
    )
    healthy = [
        o
        for o in outcomes
        if o.truth.status == "succeeded" and not o.truth.stragglers and not o.truth.waited_for
    ]
    false_stalls = sum(1 for o in healthy if o.waited_for or o.stalled)
    false_stragglers = sum(len(o.flagged - o.truth.stragglers) for o in outcomes)
    s_true = sum(len(o.flagged & o.truth.stragglers) for o in outcomes)
    s_truth = sum(len(o.truth.stragglers) for o in outcomes)
    w_true = sum(len(o.waited_for & o.truth.waited_for) for o in outcomes)
    w_named = sum(len(o.waited_for - o.truth.cause_ranks) for o in outcomes)
    w_truth = sum(len(o.truth.waited_for) for o in outcomes)
    stall_named = [o.named_s for o in outcomes if o.truth.waited_for and o.named_s is not None]
    right = sum(1 for o in outcomes if o.verdict == "right")
    return (
        f"{right}/{len(outcomes)} cases right; root causes right {causes_right}/{len(faults)}; "
        f"healthy runs {len(healthy)}, false stalls {false_stalls}, false stragglers "
        f"{false_stragglers}; stragglers precision {_ratio(s_true, s_true + false_stragglers)} "
        f"recall {_ratio(s_true, s_truth)}; waited-for precision {_ratio(w_true, w_named)} "
        f"recall {_ratio(w_true, w_truth)}; stall named p50 {_quantile(stall_named, 0.5)} s "
        f"p90 {_quantile(stall_named, 0.9)} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=14)
    parser.add_argument("--script", nargs="+", choices=sorted(SCRIPTS), default=list(SCRIPTS))
    parser.add_argument("--fault", nargs="+", choices=sorted(FAULTS), default=None)
    parser.add_argument("--stall-floor", type=float, help="the stall rule's floor, seconds")
    parser.add_argument("--reader", help="the tb_monitor checkout that reads the reports")
    args = parser.parse_args()
    left_out = usable_faults()
    for name, why in left_out.items():
        print(f"left out: {name} ({why})")
    kinds = [f for f in (args.fault or FAULTS) if f not in left_out]
    cases = plan(args.seed, args.count, args.script, kinds)
    reading = dict(READING)
    if args.stall_floor is not None:
        reading["TB_MONITOR_STALL_FLOOR_S"] = str(args.stall_floor)
    if args.reader:
        reading["PYTHONPATH"] = args.reader
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            start = time.monotonic()
            outcome = run_case(case, Path(tmp) / str(case.number), reading)
            outcomes.append(outcome)
            named = "-" if outcome.named_s is None else f"{outcome.named_s:.1f} s"
            ended = ", ended by the campaign" if outcome.ended_by_campaign else ""
            print(
                f"{case}: {outcome.verdict} (named after {named}; case took "
                f"{time.monotonic() - start:.0f} s{ended}) {'; '.join(outcome.wrong)}",
                flush=True,
            )
    print()
    print(table(outcomes))
    print()
    print(summary(outcomes))
    times = [o.named_s for o in outcomes if o.named_s is not None]
    if times:
        print(f"time to name, all kinds: median {statistics.median(times):.1f} s")


if __name__ == "__main__":
    main()
