"""The captures a job's agents took (``tb-monitor capture``): which ranks, what, where.

Each agent records one ``contract.RANK_CAPTURE`` per rank it captured (``launcher.capture``),
naming the files written below the logdir (``files``: the profile, a chrome trace; the stacks;
the Flight Recorder; the wait counters) and what could not be had (``errors``).
``captures(rows)`` puts one capture's records together, whichever agent wrote them: the report
lists them and the Ranks view links each rank's profile.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tb_monitor import contract

__all__ = ["Capture", "captures"]


@dataclass(frozen=True)
class Capture:
    """One capture of a job: its id, why, when, and each rank's files (paths in the logdir)."""

    job: str
    capture: str
    reason: str
    seconds: float
    at: float  # the first rank's record
    files: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # rank -> kind -> path
    errors: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # rank -> kind -> why

    def words(self) -> str:
        """``capture 2026...-ab12 (on request, 5 s of profile): ranks 0-3, 4 profiles``."""
        ranks = sorted(self.files)
        profiles = sum(1 for f in self.files.values() if "profile" in f)
        who = ", ".join(map(str, ranks)) or "none"
        return (
            f"capture {self.capture} ({self.reason}, {self.seconds:g} s of profile): "
            f"ranks {who}; {profiles} profile{'' if profiles == 1 else 's'}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "capture": self.capture,
            "reason": self.reason,
            "seconds": self.seconds,
            "at": self.at,
            "ranks": [
                {"rank": r, "files": dict(self.files[r]), "errors": dict(self.errors.get(r, {}))}
                for r in sorted(self.files)
            ],
        }


def _json_map(text: Any) -> dict[str, str]:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def captures(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Capture]]:
    """Per job (its run directory), its captures, oldest first."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        meta = row.get("metadata") or {}
        if row.get("name") != contract.RANK_CAPTURE or row.get("rank") is None:
            continue
        job = str(row["run"]).split("/", 1)[0]
        one = found.setdefault(
            (job, str(meta.get("capture"))),
            {"at": float(row["wall_time"]), "meta": meta, "files": {}, "errors": {}},
        )
        one["at"] = min(one["at"], float(row["wall_time"]))
        one["files"][int(row["rank"])] = _json_map(meta.get("files"))
        one["errors"][int(row["rank"])] = _json_map(meta.get("errors"))
    out: dict[str, list[Capture]] = {}
    for (job, capture_id), one in sorted(found.items(), key=lambda item: item[1]["at"]):
        meta = one["meta"]
        out.setdefault(job, []).append(
            Capture(
                job,
                capture_id,
                str(meta.get("reason") or "on request"),
                float(meta.get("seconds") or 0.0),
                one["at"],
                one["files"],
                one["errors"],
            )
        )
    return out
