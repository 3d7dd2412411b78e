"""Reading a logdir back with TensorBoard's own loader, for comparing two writers' output."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from tb_monitor.logdir import readers


def events_by_run(logdir: Path) -> dict[str, list[bytes]]:
    """Every Event of every event file under ``logdir``, serialized without its wall time and
    the writer's name (``source_metadata``), by run directory (relative to ``logdir``), in the
    order written."""
    runs: dict[str, list[bytes]] = {}
    for path in sorted(logdir.rglob("*tfevents*")):
        run = str(path.parent.relative_to(logdir))
        for event in EventFileLoader(str(path)).Load():
            event.wall_time = 0
            event.ClearField("source_metadata")
            runs.setdefault(run, []).append(event.SerializeToString())
    return runs


def summaries(logdir: Path) -> list[tuple[str, int]]:
    """(tag, step) of every summary value under ``logdir``, for messages."""
    found = []
    for path in sorted(logdir.rglob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            found += [(value.tag, event.step) for value in event.summary.value]
    return found


def raw_events_by_run(logdir: str | Path) -> dict[str, list[bytes]]:
    """As ``events_by_run``, read with tb_monitor's readers (any logdir, ``s3://`` too), and
    without the loader's upgrade of ``simple_value`` scalars to tensors."""
    runs: dict[str, list[bytes]] = {}
    for run, event in readers.iter_events(logdir):
        event.wall_time = 0
        event.ClearField("source_metadata")
        runs.setdefault(run, []).append(event.SerializeToString())
    return runs
