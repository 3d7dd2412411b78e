"""``tb-monitor import-fr``: Flight Recorder dumps a job already wrote, into a logdir.

Each rank's dump (``tb_monitor.analysis.fr_records.load_dumps``: a directory or an object-store
prefix) becomes one run, ``<run>/rank-<N>``, of ``contract.FR_COLLECTIVE`` timeline records,
one per collective, each an interval on that rank's lane of the Timeline. The records keep what
torch's matcher reads, so ``tb-monitor report`` on the logdir works out each group's verdict
(the rank behind, mismatched collectives) from them, as it works out everything else: when
asked, from the records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tb_monitor import contract
from tb_monitor.analysis.flight_recorder import GroupVerdict, group_verdicts, memberships
from tb_monitor.analysis.fr_records import collective_records, load_dumps
from tb_monitor.logdir import fs
from tb_monitor.sinks.writer import AsyncWriter

__all__ = ["DEFAULT_RUN", "Imported", "import_dumps"]

#: The run the ranks' records go under, unless the caller names another.
DEFAULT_RUN = "flight_recorder"


@dataclass(frozen=True)
class Imported:
    """What an import wrote: per rank its run and how many collectives, and the verdicts."""

    runs: dict[int, str]
    collectives: dict[int, int]
    verdicts: tuple[GroupVerdict, ...]


def import_dumps(source: str, logdir: str, run: str = DEFAULT_RUN) -> Imported:
    """Write every rank's dump under ``source`` into ``logdir`` (paths or URLs), one run per
    rank under ``run``. Raises what ``load_dumps`` raises (nothing there, unreadable) and
    OSError when the logdir cannot be written."""
    dumps = load_dumps(source)
    groups = memberships(dumps)
    now = max(
        (int(e.get("time_created_ns") or 0) / 1e9 for d in dumps.values() for e in d["entries"]),
        default=0.0,
    )
    runs, counts = {}, {}
    for rank in sorted(dumps):
        runs[rank] = f"{run}/rank-{rank}"
        writer = AsyncWriter(fs.join(logdir, run, f"rank-{rank}"))
        try:
            records = collective_records(rank, dumps[rank], groups, now)
            for wall_time, data in records:
                payload = {"name": contract.FR_COLLECTIVE, "timestamp": wall_time, "data": data}
                writer.add_timeline(contract.MONITOR, json.dumps(payload), wall_time)
            counts[rank] = len(records)
        finally:
            writer.close()
    return Imported(runs, counts, group_verdicts(dumps))
