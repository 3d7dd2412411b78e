"""A lane's label in pieces, ours and the records', so the page isolates each recorded piece.

A label mixes our text with text the records hold (``tb_monitor.timeline.lane_of``): a node's
rendezvous lane reads ``<host> (pid <pid>)``. A host name holding a bidi override (U+202E)
would reorder everything after it on the line, turning ``(pid 4242)`` into ``(2424 dip)``, so
the page shows each recorded piece isolated on its own (a ``<bdi>``, or FSI ... PDI in a
string) and ours as it is. A piece is ours when we wrote it: the words of the label, and the
numbers we formatted; strings from a record or a run's directory are the records'.
"""

from __future__ import annotations

from typing import Any

from tb_monitor import contract, timeline

__all__ = ["label_parts"]

#: A label's pieces: (text, whether it came from a record).
_Pieces = list[tuple[str, bool]]


def label_parts(lane: timeline.Lane) -> list[str]:
    """``lane.label`` as pieces that alternate, ours first: ``[ours, theirs, ours, ...]``
    (their join is the label; an empty piece where two of a kind meet). A label this does not
    know how to cut is the records' whole."""
    pieces = _pieces(lane)
    if pieces is None or "".join(text for text, _ in pieces) != lane.label:
        pieces = [(lane.label, True)]
    parts = [""]
    for text, theirs in pieces:
        if theirs != (len(parts) % 2 == 0):  # a piece of the other kind: start a new part
            parts.append("")
        parts[-1] += text
    return parts


def _pieces(lane: timeline.Lane) -> _Pieces | None:
    """The label's pieces as ``timeline.lane_of`` makes it, from the lane's key; None when
    the kind of lane makes no pieces of its own."""
    label, key = lane.label, lane.key
    if lane.kind == contract.RENDEZVOUS and len(key) == 3:
        host, pid, local = key  # ``local`` is the record's local id, or 0 for none
        pieces = [_recorded(host), (" (pid ", False), _recorded(pid)]
        if local != 0 or type(local) is not int:
            pieces += [(", id ", False), _recorded(local)]
        return [*pieces, (")", False)]
    if lane.kind == contract.WORKER and len(key) == 1 and label.startswith("rank "):
        return [("rank ", False), _recorded(key[0])]
    if lane.kind == contract.AGENT and label.startswith("agent ") and label != str(key[0]):
        return [("agent ", False), (label[len("agent ") :], True)]
    return None


def _recorded(value: Any) -> tuple[str, bool]:
    """A value from a record as the label shows it: a number we formatted is ours."""
    return f"{value}", not isinstance(value, (int, float))
