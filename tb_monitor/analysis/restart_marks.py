"""The timeline's marks as every view draws them once the attempts are known.

A rank that went down because another rank failed is not a failure of its own: its attempt and
the records that ended it take the state ``STOPPED_BY_RESTART``, and the root cause's attempt is
labelled with its reason. The Timeline tab, the Perfetto export and the notebook figure apply
this to ``tb_monitor.timeline.spans`` so they draw the same thing.
"""

from __future__ import annotations

from dataclasses import replace

from tb_monitor import contract
from tb_monitor.analysis.attempts import Attempt
from tb_monitor.timeline import Span

__all__ = ["STOPPED_BY_RESTART", "mark_restarts"]

#: The state of a rank that went down because another rank failed (``tb_monitor.timeline.STATES``).
STOPPED_BY_RESTART = "STOPPED_BY_RESTART"


def mark_restarts(marks: list[Span], found: list[Attempt]) -> list[Span]:
    """The marks as the Timeline draws them: collateral ranks stopped by the restart.

    A collateral rank's attempt interval, and its records that ended it (FAILED in a collective,
    TERMINATED by its agent), take the state ``STOPPED_BY_RESTART``; the root cause's attempt is
    labelled with its one-line reason. Everything else is returned as it is.
    """
    collateral = {(a.job, a.attempt, rank) for a in found for rank in a.collateral_ranks}
    ending = {id(row) for a in found for row in a.collateral_records}
    causes = {(a.job, a.attempt, a.root_cause.rank): a.root_cause for a in found if a.root_cause}
    out = []
    for span in marks:
        rank = span.lane.key[0] if span.lane.kind == contract.WORKER else None
        key = (span.lane.group, span.number, rank)
        if span.end is not None and key in collateral:
            label = f"attempt {span.number}: stopped by restart"
            span = replace(span, state=STOPPED_BY_RESTART, label=label)
        elif span.end is not None and key in causes and span.state != "RUNNING":
            span = replace(span, label=f"attempt {span.number}: {causes[key].reason}")
        elif span.end is None and span.rows and id(span.rows[0]) in ending:
            span = replace(span, state=STOPPED_BY_RESTART)
        out.append(span)
    return out
