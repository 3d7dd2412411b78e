"""The timeline's swimlanes, interned: what lane a record is drawn on, by id.

A lane is ``tb_monitor.timeline.lane_of``'s, so the tab, the Perfetto export and the notebook
figure always agree. :class:`Lanes` gives each lane a dense id (the records' ``lane`` field),
remembers the run each was first seen in, looks a decoded record's lane up by the fields that
make it (making and hashing a ``Lane`` per record would cost a big read more than the rest of
its keeping), and makes what a payload says of each lane again only when lanes or runs were
added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tb_monitor import timeline
from tb_plugin.columns import LaneFields
from tb_plugin.interned import Interner
from tb_plugin.lane_labels import label_parts

__all__ = ["Lanes"]


class Lanes:
    """Every lane seen, each with a dense id and the first run it was seen in."""

    def __init__(self) -> None:
        self._interned = Interner()  # tb_monitor.timeline.Lane values
        #: The first run each lane was seen in, by lane id.
        self.runs: list[str] = []
        #: Each lane's label in pieces, ours and the records' in turn (``label_parts``), by id.
        self.label_parts: list[list[str]] = []
        self._by_fields: dict[tuple[Any, ...], int] = {}  # see of_row
        self._fields: tuple[tuple[int, int], LaneFields] | None = None  # see fields

    @property
    def values(self) -> list[timeline.Lane]:
        """The lanes, by id (append-only)."""
        return self._interned.values

    def __len__(self) -> int:
        return len(self._interned.values)

    def intern(self, lane: timeline.Lane, run: str) -> int:
        """The lane's id, interned with the first run it was seen in."""
        lane_id = self._interned(lane)
        if lane_id == len(self.runs):
            self.runs.append(run)
            # Made once per lane while reading, not again in the sort after it, nor whenever
            # the lanes' payload fields are made again.
            lane.sort_key()
            self.label_parts.append(label_parts(lane))
        return lane_id

    def of_row(self, row: Mapping[str, Any]) -> int:
        """The id of a decoded record's lane (``timeline.lane_of``), looked up by the fields
        that make it. The fields' types are in the key too: 1, 1.0 and True are equal keys,
        but a lane's label tells them apart."""
        values = (row["run_id"], row["hostname"], row["pid"], row["local_id"], row["rank"])
        key = (row["run"], row["kind"], *values, *map(type, values))
        try:
            found = self._by_fields.get(key)
        except TypeError:  # an unhashable field (a foreign record): made every time
            return self.intern(timeline.lane_of(row), row["run"])
        if found is None:
            found = self._by_fields[key] = self.intern(timeline.lane_of(row), row["run"])
        return found

    def job_copy(self, lane: timeline.Lane, from_id: int) -> int:
        """A job's copy of lane ``from_id`` (``lane``), seen in the same run."""
        return self.intern(lane, self.runs[from_id])

    def drawn_id(self, lane: timeline.Lane) -> int:
        """The lane's id; a lane of a job told apart from another of its run id
        (``<run id>@HH:MM:SS``, ``analysis.jobs``) is drawn on its run id's lane."""
        ids = self._interned.ids
        found = ids.get(lane)
        if found is None:
            found = ids[replace(lane, group=lane.group.split("@", 1)[0])]
        return found

    def fields(self, runs: Sequence[str]) -> LaneFields:
        """What a payload says of each lane, of ``runs``, made again only when lanes or runs
        were added (both only grow, so their counts say whether they changed)."""
        key = (len(self.values), len(runs))
        if self._fields is None or self._fields[0] != key:
            fields = LaneFields.of(self.values, self.runs, runs, self.label_parts)
            self._fields = (key, fields)
        return self._fields[1]
