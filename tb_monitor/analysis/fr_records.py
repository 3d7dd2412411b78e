"""Flight Recorder dumps a job wrote, read back, and their entries as our timeline records.

torch writes one file per rank, ``<prefix><rank>`` (``TORCH_FR_DUMP_TEMP_FILE``,
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), a pickled dict; its debug server's JSON is accepted too.
``load_dumps`` reads a directory or an object-store prefix (``s3://``, ``gs://``, through
``tb_monitor.logdir.fs`` like a logdir) with a pickle reader that makes plain values only: a
dump from a store is not trusted to run code. ``collective_records`` turns one rank's entries
into the payloads of ``contract.FR_COLLECTIVE`` records (each with its own end, so the Timeline
draws an interval); ``dumps_of_rows`` makes the dumps again from those records, for the
report's verdicts (``tb_monitor.analysis.flight_recorder``).
"""

from __future__ import annotations

import io
import json
import pickle
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.flight_recorder import group_of
from tb_monitor.logdir import fs

__all__ = ["collective_records", "dumps_of_rows", "load_dumps", "parse_dump"]

#: A dump's file name: torch's prefix, then the rank (torch's own loader's rule), an optional
#: extension (``.json``, ``.pkl``) after it.
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.(?:json|pkl|pickle))?$")
#: The entry fields a record keeps: what torch's matcher and the Timeline read.
_KEPT = (
    "record_id",
    "pg_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "is_p2p",
    "profiling_name",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "time_created_ns",
    "timeout_ms",
)
_PLAIN = {("builtins", name) for name in ("dict", "list", "tuple", "set", "frozenset")}


class _PlainUnpickler(pickle.Unpickler):
    """Plain values only: a dump names no class, and one that does is refused, not run."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a Flight Recorder dump names no class: {module}.{name}")


def parse_dump(data: bytes) -> dict[str, Any]:
    """One rank's dump from its bytes, pickled or JSON; a ValueError for anything else."""
    try:
        if data.lstrip()[:1] == b"{":
            dump = json.loads(data)
        else:
            dump = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # pickle and JSON raise many kinds for bad bytes
        raise ValueError(f"not a Flight Recorder dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise ValueError("not a Flight Recorder dump (no entries)")
    return dump


def load_dumps(source: str) -> dict[int, dict[str, Any]]:
    """Every rank's dump directly under ``source`` (a directory, or an ``s3://`` / ``gs://``
    prefix), by global rank. A ValueError names ``source`` when none is there, or two files
    claim one rank; files that are not dumps are skipped."""
    names = fs.listing(source)
    if not names and not fs.isdir(source):
        raise FileNotFoundError(f"no Flight Recorder dumps at {source}: it does not exist")
    dumps: dict[int, dict[str, Any]] = {}
    for name in sorted(names):
        found = _NAME.match(posixpath.basename(name))
        if found is None or not names[name]:
            continue
        try:
            dump = parse_dump(fs.read_bytes(fs.join(source, name)))
        except ValueError:
            continue
        rank = int(found["rank"])
        if rank in dumps:
            raise ValueError(f"two Flight Recorder dumps for rank {rank} in {source}")
        dumps[rank] = dump
    if not dumps:
        raise ValueError(f"no Flight Recorder dumps in {source} (files named <prefix><rank>)")
    return dumps


def collective_records(
    rank: int,
    dump: Mapping[str, Any],
    groups: Mapping[str, tuple[str, tuple[int, ...]]],
    now: float,
) -> list[tuple[float, dict[str, Any]]]:
    """``(wall time, payload)`` of one rank's ``FR_COLLECTIVE`` records, one per entry.

    An entry ends when NCCL saw it complete; gloo times no end, so a collective its group's
    ``pg_status`` counts completed ends when the rank's next entry began; one not completed
    is ``open``, drawn up to ``now`` (the newest entry of any rank)."""
    entries = sorted(dump.get("entries") or (), key=lambda e: int(e.get("record_id") or 0))
    completed = _last_completed(dump)
    out = []
    for at, entry in enumerate(entries):
        begin = int(entry.get("time_created_ns") or 0) / 1e9
        name, desc = group_of(entry)
        done_ns = entry.get("time_discovered_completed_ns")
        seq = int(entry.get("collective_seq_id") or 0)
        is_done = entry.get("state") == "completed" or bool(done_ns)
        is_done = is_done or (not entry.get("is_p2p") and seq <= completed.get(name, -1))
        if done_ns:
            end = int(done_ns) / 1e9
        elif is_done:
            later = entries[at + 1 : at + 2]
            end = int(later[0].get("time_created_ns") or 0) / 1e9 if later else begin
        else:
            end = now
        data = {key: entry.get(key) for key in _KEPT}
        data.update(
            rank=rank,
            group=name,
            desc=desc,
            group_ranks=list(groups.get(name, (desc, ()))[1]),
            state="completed" if is_done else entry.get("state"),
            recorded_state=entry.get("state"),
            version=str(dump.get("version", "")),
            end=max(begin, end),
            open=not is_done,
        )
        out.append((begin, data))
    return out


def dumps_of_rows(rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """The dumps again, from decoded ``FR_COLLECTIVE`` records (other records are skipped):
    per rank its entries, and each group it named in ``pg_config``."""
    dumps: dict[int, dict[str, Any]] = {}
    for row in rows:
        data = row.get("metadata") or {}
        if row.get("name") != contract.FR_COLLECTIVE or not isinstance(data.get("rank"), int):
            continue
        dump = dumps.setdefault(
            data["rank"], {"version": data.get("version") or "2.10", "pg_config": {}, "entries": []}
        )
        entry = {key: data.get(key) for key in _KEPT}
        entry["state"] = data.get("recorded_state", data.get("state"))
        entry["process_group"] = (str(data.get("group")), str(data.get("desc") or ""))
        dump["entries"].append(entry)
        ranks = data.get("group_ranks")
        if ranks:
            dump["pg_config"][str(data.get("group"))] = {
                "name": str(data.get("group")),
                "desc": str(data.get("desc") or ""),
                "ranks": str(list(ranks)),
            }
    for dump in dumps.values():
        dump["entries"].sort(key=lambda e: int(e.get("record_id") or 0))
    return dumps


def _last_completed(dump: Mapping[str, Any]) -> dict[str, int]:
    """Per group name, the last collective ``pg_status`` counts completed (keyed by uid there,
    the entries' ``pg_id``)."""
    names = {str(e.get("pg_id")): group_of(e)[0] for e in dump.get("entries") or ()}
    out = {}
    for uid, status in (dump.get("pg_status") or {}).items():
        try:
            done = int(status.get("last_completed_collective"))
        except (AttributeError, TypeError, ValueError):
            continue
        if str(uid) in names:
            out[names[str(uid)]] = done
    return out
