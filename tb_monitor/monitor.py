"""``tb_monitor.init(logdir)``: one call that wires every tb_monitor API to one TensorBoard writer.

    >>> import tb_monitor
    >>> from tb_monitor.elastic import metrics
    >>> with tb_monitor.init("runs/exp1") as monitor:
    ...     metrics.put_metric("loss", 1, "train")

Monitor events, the default metric handler for every group, and the events destinations
``"tensorboard"`` and ``"dynamic_rendezvous"`` all go to one ``AsyncWriter``. Inside a torchelastic
worker the run directory is ``<run id>/rank-<RANK>`` under ``logdir``; elsewhere ``logdir`` itself.
``Monitor.close()`` undoes every registration that is still ours, restoring what was there before.

One monitor is active at a time: calling ``init`` again (a notebook cell run twice) closes the
open monitor first and logs a warning saying so, so nothing is recorded twice. The exception is
the monitor ``tb-monitor run`` opens in each worker before the training script runs
(``init_automatic``): the script's own ``init`` adopts it silently (see ``init``).

``torch=True`` also installs the same sinks into the real torch APIs (``torch.monitor``,
``torch.distributed.elastic.metrics`` and ``.events``: ``tb_monitor.integrations.torch``). Inside
a torchelastic worker the worker's own start, exception and exit are recorded as well
(``tb_monitor.integrations.worker``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Literal

from tb_monitor import _env, _event, _stat, contract
from tb_monitor.elastic import events
from tb_monitor.elastic.metrics import api as metrics
from tb_monitor.integrations import worker
from tb_monitor.logdir import fs
from tb_monitor.sinks import (
    AsyncWriter,
    TensorboardEventHandler,
    TensorboardLoggingHandler,
    TensorboardMetricHandler,
)

__all__ = ["DESTINATIONS", "Monitor", "init", "init_automatic"]

#: torchelastic events destinations ``init`` sends to TensorBoard.
DESTINATIONS = ("tensorboard", "dynamic_rendezvous")

_log = logging.getLogger("tb_monitor")
_active_lock = threading.Lock()
_active: Monitor | None = None  # the monitor init() returned last, until it is closed


class Monitor:
    """What ``init`` set up: its writer, and the undo of every registration it made."""

    def __init__(
        self, logdir: str, writer: AsyncWriter, settings: dict[str, object] | None = None
    ) -> None:
        self._logdir = logdir
        self._writer = writer
        self._settings = settings or {}  # the writer's, as init was given them
        self._undo: list[Callable[[], None]] = []
        self._closed = False
        self._automatic = False
        self._rank_health: Callable[[], None] | None = None  # its recorder's close, if recording

    @property
    def logdir(self) -> str:
        """The logdir given to ``init`` (TensorBoard's ``--logdir``)."""
        return self._logdir

    @property
    def run_dir(self) -> str:
        """The run directory this process writes to."""
        return self._writer.run_dir

    @property
    def writer(self) -> AsyncWriter:
        """The writer every API is wired to."""
        return self._writer

    @property
    def automatic(self) -> bool:
        """Whether ``tb-monitor run`` opened it before the training script ran, and the script
        has not adopted it (with its own ``init``) since."""
        return self._automatic

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (also by a later ``init``)."""
        return self._closed

    def flush(self) -> None:
        """Write everything recorded so far to disk (see ``AsyncWriter.flush``)."""
        self._writer.flush()

    def close(self) -> None:
        """End live Stats' windows, undo every registration (latest first), then flush and close
        the writer. Idempotent.

        Each step runs even if an earlier one failed, and the writer is always closed; the
        first error is raised afterwards (later ones are logged).
        """
        global _active
        if self._closed:
            return
        self._closed = True
        with _active_lock:
            if _active is self:
                _active = None
        error: BaseException | None = None
        # Stats made inside `with init(...)` usually outlive it: their pending windows belong to
        # this monitor, so end them while its handler is still registered.
        _stat.end_windows()
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:
                if error is None:
                    error = exc
                else:
                    _log.exception("tb_monitor: closing %r: undoing %r failed", self, undo)
        try:
            self._writer.close()
        except Exception as exc:
            if error is None:
                error = exc
            else:
                _log.exception("tb_monitor: closing %r: closing the writer failed", self)
        if error is not None:
            raise error

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Monitor run_dir={self.run_dir!r}>"

    def _register_event_handler(self, handler: TensorboardEventHandler) -> None:
        handle = _event.register_event_handler(handler)
        self._undo.append(lambda: _event.unregister_event_handler(handle))

    def _configure_metrics(self, handler: TensorboardMetricHandler) -> None:
        previous = metrics.default_handler()
        metrics.configure(handler)

        def undo() -> None:
            if metrics.default_handler() is handler:  # not replaced since
                metrics.configure(previous)

        self._undo.append(undo)

    def _register_destination(self, name: str, handler: TensorboardLoggingHandler) -> None:
        try:
            previous: logging.Handler | None = events.get_logging_handler(name)
        except events.UnknownDestinationError:
            previous = None
        events.register_destination(name, handler)

        def undo() -> None:
            try:
                if events.get_logging_handler(name) is not handler:
                    return  # replaced (or removed) since: not ours to undo
            except events.UnknownDestinationError:
                return
            if previous is None:
                events.unregister_destination(name)
            else:
                events.register_destination(name, previous)

        self._undo.append(undo)

    def _bridge_torch(
        self,
        event_handler: TensorboardEventHandler,
        metric_handler: TensorboardMetricHandler,
        logging_handler: TensorboardLoggingHandler,
    ) -> None:
        from tb_monitor.integrations import torch as torch_bridge  # imports torch: only if asked

        bridge = torch_bridge.install(
            logging_handler=logging_handler,
            metric_handler=metric_handler,
            monitor_handler=event_handler,
            destinations=DESTINATIONS,
        )
        self._undo.append(bridge.close)

    def _record_rank_health(self) -> None:
        from datetime import timedelta

        from tb_monitor.integrations.rank_health import RankHealth  # its install imports torch

        window = _env.seconds("TB_MONITOR_RANK_WINDOW_S", 10.0)
        heartbeat = _env.seconds("TB_MONITOR_HEARTBEAT_S", 5.0)
        recorder = RankHealth(
            window=timedelta(seconds=window),
            heartbeat_s=heartbeat,
            flight_recorder_after_s=_env.seconds("TB_MONITOR_FR_AFTER_S", 10.0),
        )
        self._rank_health = recorder.install().close
        self._undo.append(self._rank_health)

    def _hook_worker(self) -> None:
        hooks = worker.install(lambda event: events.record(event, "tensorboard"), self.flush)
        self._undo.append(hooks.close)

    def _adopt(
        self, run_dir: str, settings: dict[str, object], rank_health: bool | None
    ) -> Monitor:
        """Hand this automatic monitor to the script's ``init``, which asked for ``run_dir``,
        ``settings`` and ``rank_health``; warn once about what it keeps as it is.

        Its rank health is not stopped for ``rank_health=False``: the script may hold
        ``torch.distributed`` functions wrapped before it ran, which must keep working.
        """
        ignored = [name for name, value in settings.items() if self._settings.get(name) != value]
        if not _same_dir(run_dir, self.run_dir):
            ignored.insert(0, "logdir")
        if rank_health is False and self._rank_health is not None:
            ignored.append("rank_health=False")
        elif rank_health and self._rank_health is None:
            self._record_rank_health()
        if ignored:
            _log.warning(
                "tb_monitor.init: ignoring %s: tb-monitor run opened this worker's monitor before "
                "the script ran, and it goes on writing to %s as it is (tb-monitor run "
                "--no-worker-init leaves opening it to the script; TB_MONITOR_RANK_HEALTH=0 turns "
                "rank health off)",
                ", ".join(ignored),
                self.run_dir,
            )
        return self


def init(
    logdir: str | os.PathLike[str] | None = None,
    *,
    flush_secs: float = 2.0,
    max_queue: int = 65536,
    when_full: Literal["block", "drop"] = "block",
    torch: bool = False,
    rank_health: bool | None = None,
) -> Monitor:
    """Write every tb_monitor API to TensorBoard under ``logdir`` (default ``$TB_MONITOR_LOGDIR``).

    ``flush_secs``, ``max_queue`` and ``when_full`` configure the ``AsyncWriter``. Fails with an
    error naming ``logdir`` when it cannot be created or written. ``torch=True`` wires the real
    torch APIs too (it imports torch), and records this rank's step and collective timing for
    straggler and hang detection (``integrations.rank_health``; ``rank_health=False`` or
    ``$TB_MONITOR_RANK_HEALTH=0`` turns that part off). A monitor still open from an earlier ``init`` is closed
    first (with a warning), so re-running a notebook cell records everything once.

    In a worker that ``tb-monitor run`` started, a monitor is already open (``init_automatic``,
    before the script ran): ``init`` adopts it silently and returns it, so a script that calls
    ``init`` itself records nothing twice. It keeps its run directory, writer settings and rank
    health; a different ``logdir``, ``flush_secs``, ``max_queue`` or ``when_full``, or
    ``rank_health=False``, is ignored with a warning (``tb-monitor run --no-worker-init`` leaves
    opening the monitor to the script).
    """
    global _active
    if logdir is None:
        logdir = os.environ.get(contract.LOGDIR_ENV)
        if not logdir:
            raise ValueError(
                f"tb_monitor.init needs a logdir: pass one, or set ${contract.LOGDIR_ENV}"
            )
    logdir = os.fspath(logdir)
    run = contract.run_name_from_env()
    run_dir = fs.join(logdir, run) if run else logdir
    settings: dict[str, object] = {
        "flush_secs": flush_secs,
        "max_queue": max_queue,
        "when_full": when_full,
    }
    with _active_lock:
        previous = _active
        automatic = previous is not None and previous._automatic
        if automatic:
            previous._automatic = False  # the script's own from now on
    if automatic:
        return previous._adopt(run_dir, settings, rank_health)
    if previous is not None:
        _log.warning(
            "tb_monitor.init: closing the monitor already open (%s) before opening %s",
            previous.run_dir,
            run_dir,
        )
        try:
            previous.close()
        except Exception:  # its errors are its own; the new monitor can still work
            _log.exception("tb_monitor.init: closing the previous monitor failed")
    writer = AsyncWriter(run_dir, flush_secs=flush_secs, max_queue=max_queue, when_full=when_full)
    monitor = Monitor(logdir, writer, settings)
    try:
        event_handler = TensorboardEventHandler(writer)
        monitor._register_event_handler(event_handler)
        metric_handler = TensorboardMetricHandler(writer)
        monitor._configure_metrics(metric_handler)
        logging_handler = TensorboardLoggingHandler(writer)
        for name in DESTINATIONS:
            monitor._register_destination(name, logging_handler)
        if torch:
            monitor._bridge_torch(event_handler, metric_handler, logging_handler)
            if rank_health is None:
                rank_health = _env.flag("TB_MONITOR_RANK_HEALTH", True)
            if rank_health:
                monitor._record_rank_health()
        if worker.in_worker():
            monitor._hook_worker()
    except BaseException:
        monitor.close()
        raise
    with _active_lock:
        _active = monitor
    return monitor


def init_automatic() -> Monitor:
    """Open the monitor ``tb-monitor run`` gives each worker before its training script runs.

    ``init(torch=True)`` into ``$TB_MONITOR_LOGDIR``, marked automatic: the script's own
    ``init`` adopts it rather than opening a second one (``integrations.bootstrap`` calls this).
    """
    monitor = init(torch=True)
    monitor._automatic = True
    return monitor


def _same_dir(a: str, b: str) -> bool:
    if fs.is_remote(a) or fs.is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)
