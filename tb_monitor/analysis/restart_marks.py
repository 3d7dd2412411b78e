"""The timeline's marks as every view draws them once the attempts are known.

A rank that went down because another rank failed is not a failure of its own: its attempt and
the records that ended it take the state ``STOPPED_BY_RESTART`` where a restart followed, and
``STOPPED_AT_END`` in the job's last attempt (it stopped when the job ended); the root cause's
attempt is labelled with its reason (each of a lost node's ranks). The Timeline tab, the
Perfetto export and the notebook figure apply this to ``tb_monitor.timeline.spans`` so they
draw the same thing.
"""

from __future__ import annotations

from tb_monitor import contract
from tb_monitor.analysis.attempts import Attempt
from tb_monitor.analysis.root_cause import RootCause
from tb_monitor.timeline import STOPPED_AT_END, STOPPED_BY_RESTART, Span

__all__ = ["STOPPED_AT_END", "STOPPED_BY_RESTART", "STOPPED_WORDS", "mark_restarts"]

#: How the report and the marks' labels say each collateral state.
STOPPED_WORDS = {
    STOPPED_BY_RESTART: "stopped by restart",
    STOPPED_AT_END: "stopped when the job ended",
}


def _ended(span: Span, cause: RootCause) -> bool:
    """Whether the cause's rank ended in ``span``: a lost node's ranks recorded no end, their
    last record still says RUNNING."""
    return span.state != "RUNNING" or cause.source == "vanished"


def mark_restarts(marks: list[Span], found: list[Attempt]) -> list[Span]:
    """The marks as the Timeline draws them: collateral ranks stopped by the restart, or when
    the job ended.

    A collateral rank's attempt interval, and its records that ended it (FAILED in a collective,
    TERMINATED by its agent), take the attempt's ``collateral_state``; the root cause's attempt
    is labelled with its one-line reason. Everything else is returned as it is.
    """
    collateral = {
        (a.job, a.attempt, rank): a.collateral_state for a in found for rank in a.collateral_ranks
    }
    ending = {id(row): a.collateral_state for a in found for row in a.collateral_records}
    causes = {
        (a.job, a.attempt, rank): a.root_cause
        for a in found
        if a.root_cause
        for rank in a.root_cause.ranks
    }
    out = []
    for span in marks:
        rank = span.lane.key[0] if span.lane.kind == contract.WORKER else None
        key = (span.lane.group, span.number, rank)
        if span.end is not None and key in collateral:
            state = collateral[key]
            span = span._replace(
                state=state, label=f"attempt {span.number}: {STOPPED_WORDS[state]}"
            )
        elif span.end is not None and key in causes and _ended(span, causes[key]):
            span = span._replace(label=f"attempt {span.number}: {causes[key].reason}")
        elif span.end is None and span.rows and id(span.rows[0]) in ending:
            span = span._replace(state=ending[id(span.rows[0])])
        out.append(span)
    return out
