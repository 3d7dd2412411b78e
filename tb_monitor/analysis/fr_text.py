"""The words of the report's Flight Recorder section: per process group, the rank behind and
the collectives its ranks disagree on (``tb_monitor.analysis.flight_recorder``), as
``tb-monitor report`` and ``tb-monitor import-fr`` print them."""

from __future__ import annotations

from collections.abc import Sequence

from tb_monitor.analysis.flight_recorder import GroupVerdict
from tb_monitor.analysis.report_text import visible
from tb_monitor.analysis.root_cause import ranks_words

__all__ = ["fr_lines"]


def fr_lines(verdicts: Sequence[GroupVerdict]) -> list[str]:
    """The section's lines; none without verdicts."""
    if not verdicts:
        return []
    lines = ["", "Flight Recorder, per process group:"]
    for v in verdicts:
        lines.append(f"  {_group(v)}: {_lag(v)}")
        lines.extend(
            f"    mismatch at collective {m.seq} ({visible(m.collective)}): "
            f"{ranks_words(m.ranks)}'s {m.kind} differs: {visible(m.detail)}"
            for m in v.mismatches
        )
        if v.no_dump:
            lines.append(f"    no dump from {ranks_words(v.no_dump)}")
    notes = sorted({v.note for v in verdicts if v.note})
    lines.extend(f"  ({visible(note)})" for note in notes)
    return lines


def _group(v: GroupVerdict) -> str:
    desc = f" ({visible(v.desc)})" if v.desc and v.desc != "undefined" else ""
    return f"group {visible(v.group)}{desc}, {ranks_words(v.ranks)}"


def _lag(v: GroupVerdict) -> str:
    newest = max((seq for seq in v.newest.values() if seq is not None), default=None)
    if newest is None:
        return "no collective recorded"
    if not v.lagging:
        return f"in step at collective {newest}"
    behind = ", ".join(f"rank {r} at {v.newest.get(r) or 0}" for r in v.lagging)
    return f"{ranks_words(v.lagging)} behind: {behind}, the others at {newest}"
