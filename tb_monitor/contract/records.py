"""Reading timeline records back: one flat dict per record, the same for readers and the plugin."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from tb_monitor.contract.tags import MONITOR, RENDEZVOUS

__all__ = ["FIELDS", "decode_record", "is_heartbeat", "read_keys"]

FIELDS = (
    "name",
    "source",
    "state",
    "hostname",
    "pid",
    "rank",
    "local_id",
    "run_id",
    "message",
    "error_trace",
    "metadata",
)


def _unwrap(value: Any) -> Any:
    # torchelastic stores some worker fields as 1-tuples, which JSON turns into 1-lists.
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def _interned(key: Any) -> Any:
    return sys.intern(key) if type(key) is str else key


def _decode_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    # Keys interned: JSON makes each record's own copies of the same few names, and a store
    # keeps the decoded metadata of every distinct worker event: one copy of each key will do.
    out = {_interned(key): value for key, value in metadata.items()}
    nested = out.pop("metadata", None)
    if isinstance(nested, str):
        try:
            nested = json.loads(nested)
        except ValueError:
            out["metadata"] = nested
            nested = None
    if isinstance(nested, Mapping):
        for key, value in nested.items():
            out.setdefault(_interned(key), _unwrap(value))
    return out


def _mapping_field(kind: str, data: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    """``data[field]`` when it is a JSON object ({} when absent), else a ValueError naming it."""
    value = data.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"timeline record of kind {kind!r}: field {field!r} must be a JSON object, "
            f"got {value!r:.200}"
        )
    return value


#: The payload keys ``decode_record`` reads, per kind (any other: ``_OTHER_KEYS``).
_READ_KEYS = {
    RENDEZVOUS: (
        "name",
        "run_id",
        "message",
        "hostname",
        "pid",
        "node_state",
        "master_endpoint",
        "rank",
        "local_id",
        "error_trace",
    ),
    MONITOR: ("name", "data"),
}
_OTHER_KEYS = ("name", "source", "metadata")


def read_keys(kind: str) -> tuple[str, ...]:
    """The top-level keys of a ``kind`` payload that ``decode_record`` reads: two payloads alike
    in these decode alike (a worker event's ``timestamp`` is not one of them)."""
    return _READ_KEYS.get(kind, _OTHER_KEYS)


def decode_record(kind: str, payload: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """Flatten one timeline record (torch's JSON) into the fields readers and the plugin show.

    ``payload`` is the JSON text, or the object it already parsed into (so a caller that had to
    parse it does not pay twice). Returns a dict with the keys of ``FIELDS``; absent fields are
    None (``metadata`` is a dict). Agent metadata's nested JSON string is decoded and merged
    into ``metadata``.
    """
    data = payload if isinstance(payload, Mapping) else json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError(f"timeline record of kind {kind!r} is not a JSON object: {payload!r:.200}")
    row: dict[str, Any] = dict.fromkeys(FIELDS)
    row["name"] = data.get("name")
    if kind == RENDEZVOUS:
        for key in ("run_id", "message", "hostname", "pid", "rank", "local_id", "error_trace"):
            row[key] = data.get(key)
        row["state"] = data.get("node_state")
        row["source"] = "RENDEZVOUS"
        row["metadata"] = {"master_endpoint": data.get("master_endpoint", "")}
    elif kind == MONITOR:
        row["source"] = "MONITOR"
        row["metadata"] = dict(_mapping_field(kind, data, "data"))
    else:
        metadata = _decode_metadata(_mapping_field(kind, data, "metadata"))
        row["source"] = data.get("source")
        row["state"] = metadata.get("state")
        row["hostname"] = metadata.get("hostname")
        row["pid"] = metadata.get("worker_pid", metadata.get("pid"))
        row["rank"] = metadata.get("global_rank", metadata.get("rank"))
        row["local_id"] = metadata.get("local_rank")
        row["run_id"] = metadata.get("run_id")
        row["message"] = metadata.get("message")
        row["error_trace"] = metadata.get("raw_error") or metadata.get("error_trace")
        row["metadata"] = metadata
    return row


def is_heartbeat(row: Mapping[str, Any]) -> bool:
    """Whether a decoded record is a rendezvous keep-alive: most of a long job's records, all
    alike but for their time (``RdzvEvent`` carries none), so they are stored as runs."""
    name = row.get("name")
    return (
        row.get("source") == "RENDEZVOUS"
        and row.get("state") == "RUNNING"
        and isinstance(name, str)
        and name.endswith("._keep_alive")
    )
