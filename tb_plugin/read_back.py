"""An event's JSON read back for the details panel, from where its record came.

The store keeps no event's JSON (a big job's distinct events' would cost more than all its
columns), so the details panel's event is read back: the TensorBoard record it came in, from
the event files (:class:`~tb_plugin.event_files.EventFiles` knows where each was) or from the
data provider, and its event there as the store kept them (``decoding.kept_events``).
"""

from __future__ import annotations

from typing import Any

from tensorboard.data import provider as tb_provider

from tb_monitor import contract
from tb_plugin.decoding import kept_events
from tb_plugin.event_files import EventFiles
from tb_plugin.records import Series, read_series

__all__ = ["EventReadBack", "UnknownEventError"]


class UnknownEventError(LookupError):
    """An event id that the store does not hold."""


class EventReadBack:
    """Reads one event's JSON back; the series read last is kept, so the details of a record's
    neighbouring events cost no read."""

    def __init__(
        self,
        data_provider: tb_provider.DataProvider,
        experiment_id: str,
        files: EventFiles | None,
    ) -> None:
        self._provider = data_provider
        self._eid = experiment_id
        self._files = files  # where records were read from (None: the data provider)
        # The series read last: (run, tag), step -> position, Series.
        self._recent: tuple[tuple[str, str], dict[int, int], Series | None] | None = None

    def raw(self, ctx: Any, run: str, kind: str, step: int, index: int) -> str:
        """The JSON of the ``index``-th kept event of ``run``'s record of ``kind`` at ``step``;
        an UnknownEventError when that record is no longer held."""
        tag = contract.timeline_tag(kind)
        recent = self._recent
        if recent is None or recent[0] != (run, tag) or step not in recent[1]:
            series = self._series(ctx, run, tag, step)
            steps = series.steps if series is not None else []
            positions = {found: position for position, found in enumerate(steps)}
            recent = self._recent = ((run, tag), positions, series)
        _, positions, series = recent
        position = positions.get(step)
        events = (
            []
            if series is None or position is None
            else kept_events(kind, series.records[position])
        )
        if not 0 <= index < len(events):
            held_by = (
                "its event files" if self._files else "TensorBoard's data provider (sampled out?)"
            )
            raise UnknownEventError(
                f"run {run!r}, tag {tag!r}: the record at step {step} is no longer held by "
                + held_by
            )
        return events[index]

    def _series(self, ctx: Any, run: str, tag: str, step: int) -> Series | None:
        """The series holding ``run``'s record at ``step`` under ``tag`` (None: none)."""
        if self._files is not None:
            return self._files.read_series(run, tag, step)
        found = read_series(self._provider, ctx, self._eid, contract.PLUGIN_NAME, [run], [tag])
        return found.get(run, {}).get(tag)
