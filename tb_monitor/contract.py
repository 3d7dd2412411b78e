"""The data contract between the writers and the readers (plugin, notebooks, exports).

Everything that decides how a record looks in a TensorBoard logdir lives here, so the writer side
and the reading side (``tb_plugin``, ``tb_monitor.readers``, ``tb_monitor.export``) can never drift
apart. See ``docs/DESIGN.md`` for the reasoning behind each rule.
"""

from __future__ import annotations

import array
import base64
import binascii
import json
import os
import re
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "AGENT",
    "CONTENT_VERSION",
    "FIELDS",
    "KINDS",
    "LOGDIR_ENV",
    "MONITOR",
    "PLUGIN_NAME",
    "RANK_BEATS",
    "RANK_COLLECTIVE",
    "RANK_PREFIX",
    "RANK_STEP",
    "RANK_WINDOW_S",
    "RENDEZVOUS",
    "STAT_EVENT",
    "TIMELINE_PREFIX",
    "WORKER",
    "agent_run_name",
    "DecodedRecords",
    "decode_record",
    "encode_batch",
    "decode_records",
    "record_events",
    "is_heartbeat",
    "kind_of_tag",
    "metric_tag",
    "plugin_content",
    "rank_of",
    "run_name_from_env",
    "stat_tag",
    "timeline_tag",
]

#: Name of the TensorBoard plugin that owns the timeline records (also its dashboard URL hash).
PLUGIN_NAME = "tb_monitor_timeline"
#: Version of the timeline record layout, stored in ``SummaryMetadata.plugin_data.content``.
#: Version 1: one event per record. Version 2: several events per record (``encode_batch``).
#: Version 3: the same, with the record's index in binary. Readers tell them apart per record,
#: by the tensor's rank and the index's keys (TensorBoard keeps a tag's first
#: metadata only, and a restarted writer may continue a version-1 run).
CONTENT_VERSION = 3

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


_RANK_RUN = re.compile(r"(?:^|/)(?:[\w.-]+-)?rank-(\d+)$")


def rank_of(run: str) -> int | None:
    """The rank a worker's run holds (``job/rank-3``, ``job/trainer-rank-3``), or None."""
    match = _RANK_RUN.search(run)
    return int(match.group(1)) if match else None


# Rank health (``integrations/rank_health.py`` writes, ``analysis/grid.py`` reads): Stats in each
# worker's run, their scalars tagged ``stat_tag(name, aggregation)``.
RANK_PREFIX = "rank/"
#: Seconds between step boundaries (COUNT, SUM, MIN, MAX) and inside collectives (COUNT, SUM,
#: MAX), one window every ``TB_MONITOR_RANK_WINDOW_S`` (default RANK_WINDOW_S).
RANK_STEP = RANK_PREFIX + "step_s"
RANK_COLLECTIVE = RANK_PREFIX + "collective_s"
RANK_WINDOW_S = 10.0
#: Heartbeat Stats ``rank/<name>`` (VALUE; the newest counts): steps so far, the collectives
#: entered and left, seconds in the current collective and since the last step, Flight Recorder.
RANK_BEATS = ("steps", "entered", "left", "in_collective_s", "since_step_s", "fr_seq")


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
# Content versions 2 and 3: several events per record.
#
# The record's tensor is a rank-1 string tensor ``[index, payload_0, ..., payload_m-1]``: each
# payload is one event's JSON exactly as torch serialized it, stored once however often it
# occurs, and ``index`` is a JSON object with ``t0``, the first event's wall time, and:
# - version 3: ``dt_le64``, each event's microseconds after t0 as little-endian int64, and
#   ``p_le32``, each event's payload position as little-endian uint32 (absent: all 0), both in
#   base64: a reader decodes a run of keep-alives with a few C calls instead of parsing numbers;
# - version 2: ``dt`` and ``p``, the same as JSON lists of integers.
# A version-1 record is a scalar tensor.
# ---------------------------------------------------------------------------------------------


def encode_batch(times: Sequence[float], payload_ids: Sequence[int]) -> str:
    """The index of a version-3 record: each event's wall time and payload position."""
    if not times or len(times) != len(payload_ids):
        raise ValueError(
            f"a batch needs one payload per time, got {len(times)} and {len(payload_ids)}"
        )
    t0 = times[0]
    index: dict[str, Any] = {
        "t0": t0,
        "dt_le64": _base64_le(array.array("q", [round((t - t0) * 1e6) for t in times])),
    }
    if any(payload_ids):
        index["p_le32"] = _base64_le(array.array("I", payload_ids))
    return json.dumps(index, separators=(",", ":"))


def _base64_le(values: array.array) -> str:
    return base64.b64encode(_bytes_le(values)).decode("ascii")


@dataclass
class DecodedRecords:
    """Many timeline records' events as numpy columns, one entry per event, in record order."""

    times: np.ndarray  # float64: the event's wall time
    record: np.ndarray  # int64: the position of its record in the input
    payload: np.ndarray  # int64: the position of its payload in ``payloads``
    payloads: list[str]  # every record's distinct payloads, record after record
    errors: list[tuple[int, str]]  # (position, why) of each record left out


def decode_records(records: Iterable[tuple[Sequence[str | bytes], float, bool]]) -> DecodedRecords:
    """The events of many timeline records of any version, as whole columns.

    Each record is ``(values, wall_time, batched)``: its tensor's strings, its own wall time (a
    version-1 event's time) and whether the tensor has a dimension (versions 2 and 3). A long
    job's store decodes millions of events, so a record costs a few C calls and the events'
    times and positions are computed for all records at once. A record whose index does not
    describe its payloads is left out and named in ``errors``.
    """
    import numpy as np  # tensorboard's dependency; imported here to keep writers' imports light

    t0s: list[float] = []
    counts: list[int] = []
    bases: list[int] = []  # per record: its first payload's position in ``payloads``
    used: list[int] = []  # per record kept: its position in the input
    offsets: list[bytes] = []  # per record: its events' int64 microseconds, little-endian
    positions: list[bytes] = []  # per record: its events' uint32 payload positions
    payloads: list[str] = []
    errors: list[tuple[int, str]] = []
    for where, (values, wall_time, batched) in enumerate(records):
        strings = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]
        try:
            if batched:
                t0, dt, ids = _batch_index(strings)
                strings = strings[1:]
            elif strings:
                t0, dt, ids, strings = wall_time, _ONE_OFFSET, _ONE_POSITION, strings[:1]
            else:
                raise ValueError("a timeline record without a payload")
        except ValueError as exc:
            errors.append((where, str(exc)))
            continue
        t0s.append(t0)
        counts.append(len(dt) // 8)
        bases.append(len(payloads))
        used.append(where)
        offsets.append(dt)
        positions.append(ids)
        payloads.extend(strings)
    n = np.array(counts, dtype=np.int64)
    # The same doubles as t0 + d * 1e-6 in Python: each number converts exactly, then one
    # multiply and one add, each rounded as IEEE 754 prescribes.
    times = np.repeat(np.array(t0s, dtype=np.float64), n)
    times += np.frombuffer(b"".join(offsets), dtype="<i8") * 1e-6
    payload = np.frombuffer(b"".join(positions), dtype="<u4").astype(np.int64)
    payload += np.repeat(np.array(bases, dtype=np.int64), n)
    record = np.repeat(np.array(used, dtype=np.int64), n)
    return DecodedRecords(times, record, payload, payloads, errors)


_ONE_OFFSET = bytes(8)  # a version-1 record: one event at the record's time
_ONE_POSITION = bytes(4)


def _batch_index(values: list[str]) -> tuple[float, bytes, bytes]:
    """A version-2 or -3 record's ``t0`` and its events' offsets (int64 µs) and positions
    (uint32) as little-endian bytes, checked to describe its payloads (``values[1:]``)."""
    if len(values) < 2:
        raise ValueError(
            f"a batched timeline record needs an index and a payload, got {len(values)} values"
        )
    raw = values[0]
    try:
        index = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"batch index is not JSON ({exc}): {raw!r:.200}") from None
    if not isinstance(index, dict):
        raise ValueError(f"batch index is not a JSON object: {raw!r:.200}")
    payloads = len(values) - 1
    t0 = index.get("t0")
    try:
        if type(t0) not in (int, float) or not abs(t0) < 2**62:  # NaN and inf fail too
            raise ValueError("t0 is not a number of seconds")
        if "dt_le64" in index:
            dt, ids = _binary_index(index, payloads)
        else:
            dt, ids = _list_index(index, payloads)
    except (ValueError, TypeError, OverflowError, binascii.Error) as exc:
        raise ValueError(
            f"batch index does not describe its {payloads} payloads ({exc}): {raw!r:.200}"
        ) from None
    return t0, dt, ids


def _binary_index(index: dict[str, Any], payloads: int) -> tuple[bytes, bytes]:
    """Version 3: base64 of little-endian int64 offsets and uint32 positions."""
    dt = base64.b64decode(index["dt_le64"], validate=True)
    events = len(dt) // 8
    if not events or len(dt) % 8:
        raise ValueError("dt_le64 is not a whole number of int64 offsets")
    if "p_le32" not in index:
        return dt, bytes(4 * events)  # every event is payload 0
    ids = base64.b64decode(index["p_le32"], validate=True)
    if len(ids) != 4 * events:
        raise ValueError("p_le32 does not hold one uint32 position per offset")
    if max(_from_le(array.array("I"), ids)) >= payloads:
        raise ValueError("positions out of range")
    return dt, ids


def _list_index(index: dict[str, Any], payloads: int) -> tuple[bytes, bytes]:
    """Version 2: JSON lists of integers."""
    dt, ids = index.get("dt"), index.get("p")
    if type(dt) is not list or type(ids) is not list or not ids or len(dt) != len(ids):
        raise ValueError("dt and p are not lists of equal, non-zero length")
    if set(map(type, dt)) != {int} or set(map(type, ids)) != {int}:
        raise ValueError("offsets or positions are not integers")
    if min(ids) < 0 or max(ids) >= payloads:
        raise ValueError("positions out of range")
    return _bytes_le(array.array("q", dt)), _bytes_le(array.array("I", ids))


def _from_le(values: array.array, data: bytes) -> array.array:
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _bytes_le(values: array.array) -> bytes:
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def record_events(
    values: Sequence[str | bytes], wall_time: float, batched: bool
) -> list[tuple[float, str]]:
    """``(wall time, payload)`` of every event of one timeline record (see ``decode_records``);
    raises ValueError naming what is wrong with a batched record's index."""
    decoded = decode_records([(values, wall_time, batched)])
    if decoded.errors:
        raise ValueError(decoded.errors[0][1])
    payloads = decoded.payloads
    return [
        (t, payloads[i])
        for t, i in zip(decoded.times.tolist(), decoded.payload.tolist(), strict=True)
    ]
