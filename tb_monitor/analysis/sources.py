"""What an analysis reads: a logdir (a path or an ``s3://`` / ``gs://`` URL) or a DataFrame.

Every analysis takes either, so a notebook can pass what ``tb_monitor.read_events`` returned
and the command line a path; this module turns both into the same decoded timeline records
(``readers.decode_timeline``'s dicts), each in its own job (``tb_monitor.analysis.jobs``:
two jobs that share a run id are told apart by their start), and rejects anything else at the
door, naming it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.jobs import separate_jobs
from tb_monitor.logdir import readers

__all__ = ["check_source", "is_frame", "timeline_rows"]


def is_frame(source: Any) -> bool:
    """Whether ``source`` is a pandas DataFrame (without importing pandas when it is not)."""
    pandas_module = sys.modules.get("pandas")
    return pandas_module is not None and isinstance(source, pandas_module.DataFrame)


def check_source(source: Any, caller: str) -> None:
    """TypeError naming ``source`` unless it is a logdir or a DataFrame."""
    if isinstance(source, (str, os.PathLike)) or is_frame(source):
        return
    raise TypeError(
        f"{caller}() takes a logdir (a path or an s3:// / gs:// URL) or the DataFrame "
        f"read_events returns, not {type(source).__name__}: {source!r:.100}"
    )


def _clean(value: Any) -> Any:
    """A frame cell as the decoder gives it: NaN is None, a whole float is an int."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    return value


def timeline_rows(source: Any, caller: str = "timeline_rows") -> list[Mapping[str, Any]]:
    """Decoded timeline records of ``source``: a logdir (path or URL), or ``read_events``' frame,
    jobs that share a run id told apart (``jobs.separate_jobs``).

    Raises TypeError at once, naming the value, for anything else; a frame without the
    ``read_events`` columns is a ValueError naming the ones missing.
    """
    check_source(source, caller)
    if not is_frame(source):
        return separate_jobs(readers.iter_timeline_rows(source))
    missing = [c for c in ("run", "wall_time", "kind") if c not in source.columns]
    if missing:
        raise ValueError(
            f"{caller}(): the DataFrame lacks the columns {missing} that read_events gives"
        )
    rows = []
    for record in source.to_dict("records"):
        row: dict[str, Any] = dict.fromkeys(contract.FIELDS)
        row.update({k: _clean(v) for k, v in record.items()})
        row["wall_time"] = float(record["wall_time"])
        if not isinstance(row.get("metadata"), Mapping):
            row["metadata"] = {}
        rows.append(row)
    return separate_jobs(rows)
