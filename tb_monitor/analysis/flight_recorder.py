"""Per process group, the rank behind and the collectives the ranks disagree on, from every
rank's Flight Recorder dump (``tb-monitor import-fr``, the report's Flight Recorder section).

A dump is the dict torch writes (``_dump_fr_trace`` / ``_dump_nccl_trace``, pickled or as
JSON): ``version``, ``pg_config`` (each group's name, description and ranks), ``pg_status`` and
``entries`` (``record_id``, ``process_group`` [name, description], ``collective_seq_id``,
``profiling_name``, sizes, dtypes, ``state``, ...). Two answers per group:

- the rank behind: a member whose newest collective sequence number is below the group's
  newest, the one the others wait for in a hang;
- mismatches of type, size or dtype, found by torch's own matcher
  (``torch.distributed.flight_recorder.components.builder.build_db``, what ``fr_trace`` and the
  debug server run), not by a rewrite of it. Its state mismatches (one rank's copy completed,
  another's still running) are left out: that is the lag seen from the other side.

gloo leaves ``pg_config`` empty: a group's members are then the ranks whose entries name it.
Without torch the lag is still found; the mismatches say why they were not.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GroupVerdict", "Mismatch", "group_of", "group_verdicts", "memberships"]

#: torch's mismatch states we report, in our words.
_KINDS = {
    "COLLECTIVE_TYPE_MISMATCH": "type",
    "SIZE_OR_SYNTAX_MISMATCH": "size",
    "COLLECTIVE_DTYPE_MISMATCH": "dtype",
}
_Dumps = Mapping[int, Mapping[str, Any]]


@dataclass(frozen=True)
class Mismatch:
    """A collective the group's ranks disagree on, as torch's matcher found it."""

    seq: int  # the collective's sequence number in its group
    collective: str  # the first rank's ``profiling_name`` (``gloo:all_reduce``)
    kind: str  # "type", "size" or "dtype"
    ranks: tuple[int, ...]  # the ranks whose copy differs from the first rank's
    detail: str  # torch's words

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "collective": self.collective,
            "kind": self.kind,
            "ranks": list(self.ranks),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class GroupVerdict:
    """One process group: its members, each one's newest collective, who is behind."""

    group: str  # the group's name (``pg_name``)
    desc: str  # its description (``default_pg``, a user's ``group_desc``)
    ranks: tuple[int, ...]  # its members, global ranks
    newest: dict[int, int | None] = field(default_factory=dict)  # per member with a dump
    lagging: tuple[int, ...] = ()  # members behind the group's newest collective
    mismatches: tuple[Mismatch, ...] = ()
    no_dump: tuple[int, ...] = ()  # members whose dump is missing
    note: str | None = None  # why mismatches were not looked for

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "desc": self.desc,
            "ranks": list(self.ranks),
            "newest": {str(rank): seq for rank, seq in sorted(self.newest.items())},
            "lagging": list(self.lagging),
            "mismatches": [m.to_json() for m in self.mismatches],
            "no_dump": list(self.no_dump),
            "note": self.note,
        }


def memberships(dumps: _Dumps) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Per group name, its description and members: from the dumps' ``pg_config`` where it
    names them (NCCL's), else the ranks whose entries name the group (gloo's is empty)."""
    found: dict[str, tuple[str, set[int]]] = {}
    for dump in dumps.values():
        for name, config in (dump.get("pg_config") or {}).items():
            ranks = _ranks(config.get("ranks"))
            if name != "" and ranks:
                found.setdefault(str(name), (str(config.get("desc") or ""), set()))[1].update(ranks)
    configured = set(found)  # a group pg_config names is whole: entries add no member
    for rank, dump in dumps.items():
        for entry in dump.get("entries") or ():
            name, desc = group_of(entry)
            if name not in configured:
                found.setdefault(name, (desc, set()))[1].add(rank)
    return {name: (desc, tuple(sorted(ranks))) for name, (desc, ranks) in found.items()}


def group_verdicts(dumps: _Dumps) -> tuple[GroupVerdict, ...]:
    """Each group's verdict from every rank's dump (``{global rank: dump}``), groups by name."""
    groups = memberships(dumps)
    newest = _newest(dumps)
    mismatches, note = _mismatches(dumps, groups)
    out = []
    for name in sorted(groups, key=_natural):
        desc, ranks = groups[name]
        seen = {rank: newest.get((rank, name)) for rank in ranks if rank in dumps}
        top = max((seq for seq in seen.values() if seq is not None), default=None)
        lagging = tuple(r for r, seq in seen.items() if top is not None and (seq or 0) < top)
        out.append(
            GroupVerdict(
                group=name,
                desc=desc,
                ranks=ranks,
                newest=seen,
                lagging=lagging,
                mismatches=tuple(mismatches.get(name, ())),
                no_dump=tuple(r for r in ranks if r not in dumps),
                note=note,
            )
        )
    return tuple(out)


def _ranks(value: Any) -> list[int]:
    """A ``pg_config`` entry's ranks: a list, or its text (``"[0, 1]"``) as torch writes it."""
    if isinstance(value, str):
        value = value.strip("[] ").split(",") if value.strip("[] ") else []
    try:
        return [int(rank) for rank in value or ()]
    except (TypeError, ValueError):
        return []


def group_of(entry: Mapping[str, Any]) -> tuple[str, str]:
    """An entry's group: its name and description (``process_group``)."""
    group = entry.get("process_group") or ("", "")
    return str(group[0]), str(group[1]) if len(group) > 1 else ""


def _natural(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdecimal() else (1, name)


def _newest(dumps: _Dumps) -> dict[tuple[int, str], int]:
    """Per (rank, group) the newest collective sequence number the rank entered: its entries'
    (not point-to-point), or its ``pg_status``' last enqueued where that is newer (a ring
    buffer that wrapped keeps only the newest entries)."""
    out: dict[tuple[int, str], int] = {}
    for rank, dump in dumps.items():
        names: dict[str, str] = {}  # the group's uid in pg_status -> its name
        for entry in dump.get("entries") or ():
            name, _ = group_of(entry)
            names[str(entry.get("pg_id"))] = name
            if not entry.get("is_p2p"):
                seq = int(entry.get("collective_seq_id") or 0)
                out[(rank, name)] = max(out.get((rank, name), seq), seq)
        for uid, status in (dump.get("pg_status") or {}).items():
            name = names.get(str(uid))
            enqueued = _int(status.get("last_enqueued_collective")) if name else None
            if name is not None and enqueued is not None and enqueued > out.get((rank, name), -1):
                out[(rank, name)] = enqueued
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _mismatches(
    dumps: _Dumps, groups: Mapping[str, tuple[str, tuple[int, ...]]]
) -> tuple[dict[str, list[Mismatch]], str | None]:
    """Per group name, the mismatches torch's matcher finds; or why it could not run."""
    try:
        # Its logger sets its own level when first made: made first, then quietened, so the
        # builder's import (a warning when tabulate is missing) and its findings stay silent.
        from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

        FlightRecorderLogger()
        with _quiet("Flight Recorder"):
            from torch.distributed.flight_recorder.components.builder import build_db
            from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except ImportError:
        return {}, "mismatches not checked: torch's Flight Recorder analysis is not installed"
    args = JobConfig().parse_args([])
    args.allow_incomplete_ranks = True  # a rank whose dump is missing is named, not fatal
    details = {f"rank{rank}": _detail(rank, dump, groups) for rank, dump in dumps.items()}
    version = str(next(iter(details.values()))["version"]) if details else "2.10"
    try:
        with _quiet("Flight Recorder"):
            db = build_db(details, args, version)
    except Exception as exc:  # torch's matcher asserts on what it does not expect
        return {}, f"mismatches not checked: torch's matcher failed ({type(exc).__name__}: {exc})"
    found: dict[str, list[Mismatch]] = {}
    for collective in db.collectives:
        for rank, theirs in sorted((collective.mismatch_collectives or {}).items()):
            match = theirs.type_of_mismatch
            kind = None if match is None else _KINDS.get(match.state.name)
            if kind is None:
                continue
            found.setdefault(str(collective.group_id), []).append(
                Mismatch(
                    seq=int(collective.collective_seq_id),
                    collective=str(collective.collective_name),
                    kind=kind,
                    ranks=(int(rank),),
                    detail=str(match.culprit or kind),
                )
            )
    return found, None


def _detail(
    rank: int, dump: Mapping[str, Any], groups: Mapping[str, tuple[str, tuple[int, ...]]]
) -> dict[str, Any]:
    """One rank's dump as torch's builder takes it: its own copy (the builder consumes the
    entries), every group it has entries of in its ``pg_config``."""
    entries = copy.deepcopy(list(dump.get("entries") or ()))
    names = {group_of(entry)[0] for entry in entries}
    pg_config = {
        name: {"name": name, "desc": groups[name][0], "ranks": str(list(groups[name][1]))}
        for name in names
        if name in groups
    }
    return {
        "rank": rank,
        "host_name": f"rank{rank}",
        "entries": entries,
        "version": dump.get("version", "2.10"),
        "pg_config": pg_config,
    }


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """torch's matcher logs each finding at INFO on its own stream handler: silenced here,
    where the findings are returned instead."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)
