"""This process's Flight Recorder, every process group: what a stalled rank reports so that the
rank the job waits for is named even when its collectives never pass through Python (DDP's
gradient buckets, FSDP's shards).

torch keeps two recorders (ring buffers, ``TORCH_FR_BUFFER_SIZE`` entries): NCCL's
(``FlightRecorder<CUDAEvent>``, read by ``_dump_nccl_trace_json``, in CUDA builds only) and
the generic one (``_dump_fr_trace_json``), which holds gloo's collectives. ``read_trace``
reads both where they exist and merges them: each entry names its group and its sequence
number within it, so ``newest_by_group`` gives every group's newest (tensor-, pipeline-,
data-parallel subgroups alike) and ``last_collective_seq`` the default group's. A build
without a recorder, or a dump that fails, reads as nothing. Reading dumps the buffers as JSON
with the GIL held, costly for a full buffer (``bench_rank_health.py`` times it), so
``RankHealth`` reads it only while a rank makes no step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tb_monitor.rank._cuda_capture import thread_local_capture_mode

__all__ = ["DUMPERS", "last_collective_seq", "newest_by_group", "read_trace"]

#: The default process group in the Flight Recorder's ``process_group`` field: [name, description].
_DEFAULT_GROUP = ("0", "default_pg")
#: torch's JSON dumps, NCCL's first: the names in ``torch._C._distributed_c10d``.
DUMPERS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")


def read_trace() -> dict[str, Any] | None:
    """Both recorders' entries (``version``, ``pg_config``, ``pg_status``, ``entries``) as one
    dump, or None: no recorder in this torch, nothing recorded, or a dump that failed."""
    try:
        import torch
        from torch._C import _distributed_c10d as c10d

        # NCCL's entries are brought up to date by querying their CUDA events: from this thread
        # only in thread-local capture mode, or a graph being captured would be invalidated.
        if torch.cuda.is_initialized() and not thread_local_capture_mode():
            return None
    except Exception:  # torch without distributed: nothing to read
        return None
    dumps = [d for d in (_dump(getattr(c10d, name, None)) for name in DUMPERS) if d is not None]
    if not dumps:
        return None
    merged: dict[str, Any] = {"version": dumps[0].get("version"), "pg_config": {}}
    merged["pg_status"], merged["entries"] = {}, []
    for dump in reversed(dumps):  # NCCL's config and status win where both name a group
        merged["pg_config"].update(dump.get("pg_config") or {})
        merged["pg_status"].update(dump.get("pg_status") or {})
        merged["entries"].extend(dump.get("entries") or ())
    return merged


def _dump(dumper: Any) -> dict[str, Any] | None:
    """One recorder's dump, parsed; None where the build lacks it or it fails."""
    if dumper is None:
        return None
    try:
        found = json.loads(dumper(includeCollectives=True))
    except Exception:  # not built, not exposed, or a dump that failed: nothing to say
        return None
    return found if isinstance(found, dict) else None


def newest_by_group(trace: Mapping[str, Any] | None) -> dict[tuple[str, str], int]:
    """Per group (its name and description), the newest collective sequence number entered
    (point-to-point operations left out)."""
    newest: dict[tuple[str, str], int] = {}
    for entry in (trace or {}).get("entries") or ():
        group = entry.get("process_group")
        if entry.get("is_p2p") or not isinstance(group, (list, tuple)) or len(group) < 2:
            continue
        key = (str(group[0]), str(group[1]))
        seq = int(entry.get("collective_seq_id") or 0)
        newest[key] = max(newest.get(key, seq), seq)
    return newest


def last_collective_seq() -> int | None:
    """The sequence number of the newest collective of the default process group that this
    process has entered, or None: no Flight Recorder (a torch without it, or an empty buffer), or
    no collective of that group in it."""
    seqs = [
        seq
        for (name, desc), seq in newest_by_group(read_trace()).items()
        if name in _DEFAULT_GROUP or desc in _DEFAULT_GROUP
    ]
    return max(seqs) if seqs else None
