"""``tb_monitor.init(logdir)``: one call that wires every tb_monitor API to its sinks.

    >>> import tb_monitor
    >>> from tb_monitor.elastic import metrics
    >>> with tb_monitor.init("runs/exp1", sinks=[my_sink]) as monitor:
    ...     metrics.put_metric("loss", 1, "train")

A ``Monitor`` holds a list of sinks (``tb_monitor.sinks.Sink``): the ``TensorboardSink`` first,
unless ``tensorboard=False``, then those given. ``init`` registers one handler per registry
(monitor events, the default metric handler for every group, the events destinations
``"tensorboard"`` and ``"dynamic_rendezvous"``, and with ``torch=True`` torch's own) that hands
each record to every sink (``sinks.fanout``). Inside a torchelastic worker the run directory is
``<run id>/rank-<RANK>`` under ``logdir``; elsewhere ``logdir`` itself. ``Monitor.close()``
undoes every registration that is still ours, restoring what was there before, and closes the
sinks.

One monitor is active at a time: calling ``init`` again (a notebook cell run twice) closes the
open monitor first and logs a warning saying so, so nothing is recorded twice. The exception is
the monitor ``tb-monitor run`` opens in each worker before the training script runs
(``init_automatic``): the script's own ``init`` adopts it silently (see ``init``).

``torch=True`` also installs the same handlers into the real torch APIs (``torch.monitor``,
``torch.distributed.elastic.metrics`` and ``.events``: ``tb_monitor.torch_bridge``). Inside
a torchelastic worker the worker's own start, exception and exit are recorded as well
(``tb_monitor.rank.worker``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, NamedTuple

from tb_monitor import _env, _stat, contract
from tb_monitor.elastic import events
from tb_monitor.logdir import fs
from tb_monitor.rank import worker
from tb_monitor.sinks import fanout
from tb_monitor.sinks.base import Sink
from tb_monitor.sinks.fanout import Fanout
from tb_monitor.sinks.prometheus import PROMETHEUS_ENV
from tb_monitor.sinks.tensorboard import TensorboardSink
from tb_monitor.sinks.writer import AsyncWriter

__all__ = ["DESTINATIONS", "Monitor", "active", "init", "init_automatic"]

#: torchelastic events destinations ``init`` sends to TensorBoard.
DESTINATIONS = ("tensorboard", "dynamic_rendezvous")

_log = logging.getLogger("tb_monitor")
_active_lock = threading.Lock()
_active: Monitor | None = None  # the monitor init() returned last, until it is closed


class Monitor:
    """What ``init`` set up: its sinks, and the undo of every registration it made."""

    def __init__(
        self,
        logdir: str | None,
        run_dir: str,
        sinks: Sequence[Sink],
        settings: dict[str, object] | None = None,
    ) -> None:
        self._logdir = logdir
        self._run_dir = run_dir
        self._fanout = Fanout(sinks)
        self._settings = settings or {}  # the TensorBoard writer's, as init was given them
        self._undo: list[Callable[[], None]] = []
        self._unwire: Callable[[], None] | None = None  # undoes the sinks' registrations
        self._torch = False
        self._closed = False
        self._automatic = False
        self._rank_health: Callable[[], None] | None = None  # its recorder's close, if recording

    @property
    def logdir(self) -> str | None:
        """The logdir given to ``init`` (TensorBoard's ``--logdir``)."""
        return self._logdir

    @property
    def run_dir(self) -> str:
        """The run directory this process writes to."""
        return self._run_dir

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """Where every record goes, in order (the ``TensorboardSink`` first, unless replaced)."""
        return self._fanout.sinks

    @property
    def writer(self) -> AsyncWriter | None:
        """The TensorBoard sink's writer (None when ``init(tensorboard=False)``)."""
        sink = next((s for s in self.sinks if isinstance(s, TensorboardSink)), None)
        return None if sink is None else sink.writer

    @property
    def automatic(self) -> bool:
        """Whether ``tb-monitor run`` opened it before the training script ran, and the script
        has not adopted it (with its own ``init``) since."""
        return self._automatic

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called (also by a later ``init``)."""
        return self._closed

    def drops(self, sink: Sink) -> int:
        """How many records ``sink`` raised on (and so lost)."""
        return self._fanout.drops(sink)

    def flush(self) -> None:
        """Hand everything recorded so far on (the TensorBoard sink writes it to disk)."""
        self._fanout.flush()

    def close(self) -> None:
        """End live Stats' windows, undo every registration (latest first), then close every
        sink. Idempotent.

        Each step runs even if an earlier one failed, and every sink is closed; the first error
        is raised afterwards (later ones are logged).
        """
        global _active
        if self._closed:
            return
        self._closed = True
        with _active_lock:
            if _active is self:
                _active = None
        # Stats made inside `with init(...)` usually outlive it: their pending windows belong to
        # this monitor, so end them while its handlers are still registered.
        _stat.end_windows()
        steps = [*reversed(self._undo), *(sink.close for sink in self.sinks)]
        self._undo.clear()
        error: BaseException | None = None
        for step in steps:
            try:
                step()
            except Exception as exc:
                if error is None:
                    error = exc
                else:
                    _log.exception("tb_monitor: closing %r: %r failed", self, step)
        if error is not None:
            raise error

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Monitor run_dir={self.run_dir!r}>"

    def _wire(self, torch: bool) -> None:
        """Register one handler per registry for all the sinks (torch's registries too)."""
        self._torch = torch
        self._unwire = self._install_handlers()
        self._undo.append(self._undo_wiring)

    def _install_handlers(self) -> Callable[[], None]:
        """Register the fanout's handlers with our registries and, with ``torch``, torch's
        (the torch bridge); return the undo of both, the bridge's first."""
        handlers = self._fanout.handlers()
        unwire_ours = fanout.install(handlers, DESTINATIONS)
        if not self._torch:
            return unwire_ours
        try:
            from tb_monitor import torch_bridge  # imports torch: only when asked

            bridge = torch_bridge.install(
                logging_handler=handlers.logging,
                metric_handler=handlers.metric,
                monitor_handler=handlers.event,
                destinations=DESTINATIONS,
            )
        except BaseException:
            unwire_ours()
            raise

        def unwire() -> None:
            try:
                bridge.close()
            finally:
                unwire_ours()

        return unwire

    def _undo_wiring(self) -> None:
        unwire, self._unwire = self._unwire, None
        if unwire is not None:
            unwire()

    def _add_sinks(self, sinks: Sequence[Sink]) -> None:
        """Wire ``sinks`` in after the ones there, in place of the current registrations."""
        if self._unwire is not None:
            self._unwire()
        self._fanout = Fanout([*self.sinks, *sinks])
        self._unwire = self._install_handlers()

    def _record_rank_health(self) -> None:
        from datetime import timedelta

        from tb_monitor.rank.health import RankHealth  # its install imports torch

        window = _env.seconds("TB_MONITOR_RANK_WINDOW_S", contract.RANK_WINDOW_S)
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

    def _adopt(self, request: _Request) -> Monitor:
        """Hand this automatic monitor to the script's ``init``, which asked for ``request``;
        add the sinks it asks for, and warn once about what it keeps as it is.

        Its rank health is not stopped for ``rank_health=False``: the script may hold
        ``torch.distributed`` functions wrapped before it ran, which must keep working.
        """
        settings = request.settings
        ignored = [name for name, value in settings.items() if self._settings.get(name) != value]
        if not fs.same_dir(request.run_dir, self.run_dir):
            ignored.insert(0, "logdir")
        if not request.tensorboard:
            ignored.append("tensorboard=False")
        if request.rank_health is False and self._rank_health is not None:
            ignored.append("rank_health=False")
        elif request.rank_health and self._rank_health is None:
            self._record_rank_health()
        sinks = list(request.sinks)
        if request.prometheus_port is not None:  # the environment's is there already
            sinks += _prometheus_sinks(request.prometheus_port)
        if sinks:
            self._add_sinks(sinks)
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


class _Request(NamedTuple):
    """What one ``init`` call asks for, checked."""

    logdir: str | None
    run_dir: str
    settings: dict[str, object]  # the TensorBoard writer's
    tensorboard: bool
    sinks: list[Sink]  # besides TensorBoard and Prometheus
    prometheus: bool  # a PrometheusSink: prometheus_port given, or $TB_MONITOR_PROMETHEUS set
    prometheus_port: int | None
    torch: bool
    rank_health: bool | None


def init(
    logdir: str | os.PathLike[str] | None = None,
    *,
    flush_secs: float = 2.0,
    max_queue: int = 65536,
    when_full: Literal["block", "drop"] = "block",
    torch: bool = False,
    rank_health: bool | None = None,
    sinks: Iterable[Sink] = (),
    tensorboard: bool = True,
    prometheus_port: int | None = None,
) -> Monitor:
    """Write every tb_monitor API to TensorBoard under ``logdir`` (default ``$TB_MONITOR_LOGDIR``),
    and to ``sinks``.

    ``flush_secs``, ``max_queue`` and ``when_full`` configure the TensorBoard sink's
    ``AsyncWriter``. Fails with an error naming ``logdir`` when it cannot be created or written.
    ``sinks`` (objects with the ``tb_monitor.sinks.Sink`` methods) get every record too, after
    TensorBoard; ``tensorboard=False`` leaves TensorBoard out, so ``sinks`` replace it (no
    logdir needed then). ``prometheus_port`` adds a ``PrometheusSink`` serving ``/metrics`` on
    that port (needs ``prometheus_client``: ``pip install 'tb-monitor[prometheus]'``). A sink
    that raises is isolated: one warning names it, ``Monitor.drops`` counts what it lost.

    ``torch=True`` wires the real torch APIs too (it imports torch) and records this rank's step
    and collective timing (``rank.health``; ``rank_health=False`` or
    ``$TB_MONITOR_RANK_HEALTH=0`` turns that off). A monitor still open from an earlier ``init``
    is closed first (with a warning): a notebook cell run twice records everything once.

    In a worker that ``tb-monitor run`` started, a monitor is already open (``init_automatic``,
    before the script ran): ``init`` adopts it silently and returns it, so a script that calls
    ``init`` itself records nothing twice. It keeps its run directory, writer settings and rank
    health, and adds ``sinks``; a different ``logdir``, ``flush_secs``, ``max_queue`` or
    ``when_full``, ``tensorboard=False`` or ``rank_health=False`` is ignored with a warning
    (``tb-monitor run --no-worker-init`` leaves opening the monitor to the script).
    """
    global _active
    settings = {"flush_secs": flush_secs, "max_queue": max_queue, "when_full": when_full}
    request = _request(logdir, settings, tensorboard, sinks, prometheus_port, torch, rank_health)
    with _active_lock:
        previous = _active
        automatic = previous is not None and previous._automatic
        if automatic:
            previous._automatic = False  # the script's own from now on
    if automatic:
        return previous._adopt(request)
    if previous is not None:
        _log.warning(
            "tb_monitor.init: closing the monitor already open (%s) before opening %s",
            previous.run_dir,
            request.run_dir,
        )
        try:
            previous.close()
        except Exception:  # its errors are its own; the new monitor can still work
            _log.exception("tb_monitor.init: closing the previous monitor failed")
    monitor = _open(request)
    with _active_lock:
        _active = monitor
    return monitor


def _request(
    logdir: str | os.PathLike[str] | None,
    settings: dict[str, object],
    tensorboard: object,
    sinks: Iterable[Sink],
    prometheus_port: int | None,
    torch: bool,
    rank_health: bool | None,
) -> _Request:
    """``init``'s arguments checked (a bad one is an error naming it), with its run directory."""
    if not isinstance(tensorboard, bool):
        raise TypeError(f"tb_monitor.init: tensorboard must be True or False, got {tensorboard!r}")
    if isinstance(sinks, (str, bytes)) or not isinstance(sinks, Iterable):
        raise TypeError(f"tb_monitor.init: sinks must be a list of sinks, got {sinks!r}")
    extra = list(sinks)
    for sink in extra:
        if not isinstance(sink, Sink):
            raise TypeError(
                f"tb_monitor.init: {sink!r} is not a sink: a sink has the methods window, "
                "metric, event, timeline, flush and close (tb_monitor.sinks.Sink)"
            )
    if prometheus_port is not None and (
        isinstance(prometheus_port, bool)
        or not isinstance(prometheus_port, int)
        or not 0 <= prometheus_port <= 65535
    ):
        raise ValueError(
            f"tb_monitor.init: prometheus_port must be a port number, got {prometheus_port!r}"
        )
    prometheus = prometheus_port is not None or bool(os.environ.get(PROMETHEUS_ENV))
    if logdir is None:
        logdir = os.environ.get(contract.LOGDIR_ENV)
        if not logdir and tensorboard:
            raise ValueError(
                f"tb_monitor.init needs a logdir: pass one, or set ${contract.LOGDIR_ENV}"
            )
    if not tensorboard and not extra and not prometheus:
        raise ValueError("tb_monitor.init(tensorboard=False) needs sinks to write to")
    logdir = os.fspath(logdir) if logdir else None
    run = contract.run_name_from_env()
    run_dir = (fs.join(logdir, run) if run else logdir) if logdir else ""
    return _Request(
        logdir,
        run_dir,
        settings,
        tensorboard,
        extra,
        prometheus,
        prometheus_port,
        torch,
        rank_health,
    )


def _prometheus_sinks(port: int | None) -> list[Sink]:
    """The Prometheus sink serving ``port``, or (None) the one ``tb-monitor run
    --prometheus-port`` asks its workers for through the environment, which is left out with a
    warning where prometheus_client is missing."""
    from tb_monitor.sinks.prometheus import PrometheusSink  # prometheus_client: only if asked

    try:
        return [PrometheusSink(port=port)]
    except ImportError as exc:
        if port is not None:
            raise
        _log.warning("tb_monitor: this process's Prometheus series are left out: %s", exc)
        return []


def _open(request: _Request) -> Monitor:
    """A new monitor for ``request``: its sinks opened and wired, rank health, worker hooks."""
    sinks = list(request.sinks)
    if request.prometheus:
        sinks += _prometheus_sinks(request.prometheus_port)
    if request.tensorboard:
        sinks.insert(0, TensorboardSink(request.run_dir, **request.settings))
    monitor = Monitor(request.logdir, request.run_dir, sinks, request.settings)
    try:
        monitor._wire(request.torch)
        if request.torch:
            rank_health = request.rank_health
            if rank_health is None:
                rank_health = _env.flag("TB_MONITOR_RANK_HEALTH", True)
            if rank_health:
                monitor._record_rank_health()
        if worker.in_worker():
            monitor._hook_worker()
    except BaseException:
        monitor.close()
        raise
    return monitor


def active() -> Monitor | None:
    """The monitor open in this process (the one ``init`` returned last), if any: an adapter
    uses it rather than opening a second, which would close ``tb-monitor run``'s."""
    return _active


def init_automatic() -> Monitor:
    """Open the monitor ``tb-monitor run`` gives each worker before its training script runs.

    ``init(torch=True)`` into ``$TB_MONITOR_LOGDIR``, marked automatic: the script's own
    ``init`` adopts it rather than opening a second one (``launcher.bootstrap`` calls this).
    """
    monitor = init(torch=True)
    monitor._automatic = True
    return monitor
