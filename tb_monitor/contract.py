"""The data contract between the writers and the readers (plugin, notebooks, exports).

Everything that decides how a record looks in a TensorBoard logdir lives here, so the writer side
and the reading side (``tb_plugin``, ``tb_monitor.readers``, ``tb_monitor.export``) can never drift
apart. See ``docs/DESIGN.md`` for the reasoning behind each rule.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "AGENT",
    "CONTENT_VERSION",
    "FIELDS",
    "KINDS",
    "LOGDIR_ENV",
    "MONITOR",
    "PLUGIN_NAME",
    "RENDEZVOUS",
    "STAT_EVENT",
    "TIMELINE_PREFIX",
    "WORKER",
    "agent_run_name",
    "decode_batch",
    "decode_record",
    "encode_batch",
    "record_columns",
    "record_events",
    "is_heartbeat",
    "kind_of_tag",
    "metric_tag",
    "plugin_content",
    "run_name_from_env",
    "stat_tag",
    "timeline_tag",
]

#: Name of the TensorBoard plugin that owns the timeline records (also its dashboard URL hash).
PLUGIN_NAME = "tb_monitor_timeline"
#: Version of the timeline record layout, stored in ``SummaryMetadata.plugin_data.content``.
#: Version 1: one event per record. Version 2: several events per record (``encode_batch``).
#: Readers tell them apart per record, by the tensor's rank (TensorBoard keeps a tag's first
#: metadata only, and a restarted writer may continue a version-1 run).
CONTENT_VERSION = 2

#: Name torch.monitor gives the event it logs when a Stat window closes.
STAT_EVENT = "torch.monitor.Stat"

#: Kinds of timeline record. Each kind is one tag per run: ``timeline/<kind>``.
RENDEZVOUS = "rendezvous"  # torchelastic RdzvEvent (dynamic_rendezvous)
AGENT = "agent"  # torchelastic Event with source AGENT
WORKER = "worker"  # torchelastic Event with source WORKER (agent-side or worker-side)
MONITOR = "monitor"  # a torch.monitor-style Event other than a Stat window
KINDS = (RENDEZVOUS, AGENT, WORKER, MONITOR)

#: Prefix of every timeline tag.
TIMELINE_PREFIX = "timeline/"

#: Environment variable through which `tb-monitor run` hands its logdir to the processes it starts.
LOGDIR_ENV = "TB_MONITOR_LOGDIR"


def timeline_tag(kind: str) -> str:
    """Tag of the timeline records of one kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown timeline kind {kind!r}; expected one of {KINDS}")
    return TIMELINE_PREFIX + kind


def kind_of_tag(tag: str) -> str | None:
    """The timeline kind a tag holds, or None when the tag is not a timeline tag."""
    if tag.startswith(TIMELINE_PREFIX):
        kind = tag[len(TIMELINE_PREFIX) :]
        if kind in KINDS:
            return kind
    return None


def plugin_content() -> bytes:
    """``plugin_data.content`` of every timeline record: the layout version, as JSON."""
    return json.dumps({"version": CONTENT_VERSION}).encode()


def _writable(tag: str, what: str, value: str) -> str:
    """``tag``, or a ValueError naming ``value`` when it is no valid Unicode (a lone surrogate
    cannot be written to an event file)."""
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} {value!r} cannot be written: it is not valid Unicode (a lone surrogate)"
        ) from None
    return tag


def stat_tag(stat_name: str, aggregation: str) -> str:
    """Scalar tag of one aggregation of a Stat window, named as torch.monitor names it."""
    return _writable(f"{stat_name}.{aggregation.lower()}", "Stat name", stat_name)


def metric_tag(group: str, name: str) -> str:
    """Scalar tag of a torchelastic metric: TensorBoard sections tags by the prefix."""
    return _writable(f"{group}/{name}", "metric", f"{group}/{name}")


# ---------------------------------------------------------------------------------------------
# Runs: one run directory per process role and rank.
# ---------------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: object) -> str:
    return _UNSAFE.sub("_", str(part)) or "_"


def run_name_from_env(environ: Mapping[str, str] | None = None) -> str:
    """Run (relative directory) for this process, from torchelastic's worker environment.

    A torchelastic worker writes to ``<run id>/rank-<RANK>`` (``<run id>/<role>-rank-<RANK>`` for
    a role other than ``default``); any other process writes to the logdir itself (``""``).
    A restarted worker keeps its run: the writer continues each tag's steps from what the run
    already holds (see ``docs/DESIGN.md``), so attempts follow each other on one curve.
    """
    env = os.environ if environ is None else environ
    run_id, rank = env.get("TORCHELASTIC_RUN_ID"), env.get("RANK")
    if not run_id or rank is None:
        return ""
    role = env.get("ROLE_NAME", "default")
    worker = f"rank-{_safe(rank)}" if role == "default" else f"{_safe(role)}-rank-{_safe(rank)}"
    return f"{_safe(run_id)}/{worker}"


def agent_run_name(run_id: str, hostname: str | None = None, pid: int | None = None) -> str:
    """Run of a torchelastic agent: ``<run id>/agent-<host>-<pid>``.

    The agent is named by host and pid, not group rank: its group rank is only known after the
    first rendezvous and may change at every restart, while the process lives for the whole job.
    """
    host = hostname or socket.gethostname()
    return f"{_safe(run_id)}/agent-{_safe(host)}-{os.getpid() if pid is None else pid}"


# ---------------------------------------------------------------------------------------------
# Reading timeline records back: one flat dict per record, the same for readers and the plugin.
# ---------------------------------------------------------------------------------------------

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


def _decode_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(metadata)
    nested = out.pop("metadata", None)
    if isinstance(nested, str):
        try:
            nested = json.loads(nested)
        except ValueError:
            out["metadata"] = nested
            nested = None
    if isinstance(nested, Mapping):
        for key, value in nested.items():
            out.setdefault(key, _unwrap(value))
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


# ---------------------------------------------------------------------------------------------
# Content version 2: several events per record.
#
# The record's tensor is a rank-1 string tensor ``[index, payload_0, ..., payload_m-1]``: each
# payload is one event's JSON exactly as torch serialized it, stored once however often it
# occurs, and ``index`` is the JSON object ``{"t0": first wall time, "dt": [microseconds after
# t0, per event], "p": [payload position, per event]}``. A version-1 record is a scalar tensor.
# ---------------------------------------------------------------------------------------------


def encode_batch(times: Sequence[float], payload_ids: Sequence[int]) -> str:
    """The index of a version-2 record: each event's wall time and payload position."""
    if not times or len(times) != len(payload_ids):
        raise ValueError(
            f"a batch needs one payload per time, got {len(times)} and {len(payload_ids)}"
        )
    t0 = times[0]
    return json.dumps(
        {"t0": t0, "dt": [round((t - t0) * 1e6) for t in times], "p": list(payload_ids)},
        separators=(",", ":"),
    )


def decode_batch(values: Sequence[str | bytes]) -> tuple[list[float], list[int], list[str]]:
    """A version-2 record's events: (wall times, payload position per event, payloads).

    Raises ValueError naming what is wrong when the index does not describe the payloads.
    """
    if len(values) < 2:
        raise ValueError(
            f"a batched timeline record needs an index and a payload, got {len(values)} values"
        )
    raw = values[0]
    index = json.loads(raw)
    if not isinstance(index, dict):
        raise ValueError(f"batch index is not a JSON object: {raw!r:.200}")
    t0, dt, ids = index.get("t0"), index.get("dt"), index.get("p")
    payloads = [
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values[1:]
    ]
    try:
        if len(dt) != len(ids) or min(ids) < 0 or max(ids) >= len(payloads):
            raise ValueError("positions out of range")
        times = [t0 + d * 1e-6 for d in dt]
        if {type(i) for i in ids} != {int}:
            raise ValueError("positions are not integers")
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"batch index does not describe its {len(payloads)} payloads ({exc}): {raw!r:.200}"
        ) from None
    return times, ids, payloads


def record_columns(
    values: Sequence[str | bytes], wall_time: float, batched: bool
) -> tuple[list[float], list[int], list[str]]:
    """One timeline record of either version as ``decode_batch``'s columns: ``values`` are its
    tensor's strings, ``batched`` whether the tensor has a dimension (version 2), ``wall_time``
    the record's own (a version-1 event's time)."""
    if batched:
        return decode_batch(values)
    raw = values[0]
    return [wall_time], [0], [raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw]


def record_events(
    values: Sequence[str | bytes], wall_time: float, batched: bool
) -> list[tuple[float, str]]:
    """``(wall time, payload)`` of every event of one timeline record (see ``record_columns``)."""
    times, ids, payloads = record_columns(values, wall_time, batched)
    return [(t, payloads[i]) for t, i in zip(times, ids, strict=True)]
