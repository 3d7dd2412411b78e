"""Flight Recorder dumps built by hand, in the dict format torch writes (``_dump_fr_trace``),
for the tests of the per-group verdicts, the import and the report."""

from __future__ import annotations

from typing import Any

START_NS = 1_700_000_000_000_000_000
GROUP_DESC = {"0": "default_pg", "1": "tp", "2": "pp"}


def entry(
    record_id: int,
    group: str,
    seq: int,
    *,
    name: str = "all_reduce",
    size: int = 4,
    dtype: str = "Float",
    state: str = "scheduled",
    backend: str = "gloo",
) -> dict[str, Any]:
    """One collective as the recorder holds it."""
    return {
        "record_id": record_id,
        "pg_id": int(group),
        "process_group": (group, GROUP_DESC[group]),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "is_p2p": False,
        "profiling_name": f"{backend}:{name}",
        "input_sizes": [[size]],
        "output_sizes": [[size]],
        "input_dtypes": [dtype],
        "output_dtypes": [dtype],
        "state": state,
        "time_created_ns": START_NS + record_id * 1_000_000,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "timeout_ms": 600_000,
        "thread_id": "1",
        "thread_name": "python",
    }


def dump(
    entries: list[dict[str, Any]],
    pg_config: dict[str, Any] | None = None,
    completed: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A rank's dump; gloo's ``pg_config`` is empty unless given; ``completed``: per group
    name (its uid too, here), the last collective ``pg_status`` counts completed."""
    status = {
        group: {
            "last_enqueued_collective": max(
                (e["collective_seq_id"] for e in entries if e["process_group"][0] == group),
                default=-1,
            ),
            "last_started_collective": -1,
            "last_completed_collective": done,
        }
        for group, done in (completed or {}).items()
    }
    return {
        "version": "2.10",
        "comm_lib_version": "",
        "pg_config": pg_config or {"": {"name": "", "desc": "", "ranks": "[]"}},
        "pg_status": status,
        "entries": entries,
    }


def two_groups_one_behind() -> dict[int, dict[str, Any]]:
    """Ranks 0-3: the default group in step; group 1 [0, 1] in step; group 2 [2, 3], rank 3
    one all_reduce behind rank 2."""
    dumps = {}
    for rank in range(4):
        group = "1" if rank < 2 else "2"
        entries = [entry(0, "0", 1), entry(1, group, 1), entry(2, group, 2)]
        if rank != 3:
            entries.append(entry(3, group, 3))
        dumps[rank] = dump(entries, completed={"0": 1, group: 2})
    return dumps
