"""The newest collective torch's Flight Recorder holds: what a stalled rank reports so that the
rank the job waits for is named even when its collectives never pass through Python (DDP's
gradient buckets, FSDP's shards).

torch records every collective of every process group, gloo's and NCCL's, in a ring buffer
(``TORCH_FR_BUFFER_SIZE``, 2,000 by default), with its group and sequence number within it,
and exposes it as ``_dump_fr_trace_json`` (2.13 does; where it does not, nothing is read).
Reading it means dumping the buffer as JSON with the GIL held, costly for a full buffer
(``bench_rank_health.py`` times it), so ``RankHealth`` reads it only while a rank makes no step.
"""

from __future__ import annotations

import json

from tb_monitor.rank._cuda_capture import thread_local_capture_mode

__all__ = ["last_collective_seq"]

#: The default process group in the Flight Recorder's ``process_group`` field: [name, description].
_DEFAULT_GROUP = ("0", "default_pg")


def last_collective_seq() -> int | None:
    """The sequence number of the newest collective of the default process group that this
    process has entered, or None: no Flight Recorder (a torch without it, or an empty buffer), or
    no collective of that group in it."""
    try:
        import torch
        from torch._C._distributed_c10d import _dump_fr_trace_json

        # NCCL's entries are brought up to date by querying their CUDA events: from this thread
        # only in thread-local capture mode, or a graph being captured would be invalidated.
        if torch.cuda.is_initialized() and not thread_local_capture_mode():
            return None
        entries = json.loads(_dump_fr_trace_json(includeCollectives=True)).get("entries") or []
    except Exception:  # not built, not exposed, or a dump that failed: nothing to say
        return None
    seqs = [
        int(entry.get("collective_seq_id") or 0)
        for entry in entries
        if not entry.get("is_p2p") and _in_default_group(entry.get("process_group"))
    ]
    return max(seqs) if seqs else None


def _in_default_group(group: object) -> bool:
    return isinstance(group, list) and any(name in _DEFAULT_GROUP for name in group[:2])
