"""How ``tb-monitor run`` hooks torch's ``LocalElasticAgent``: each attempt's workers handed to
the ``RankWatch``, and the agent's stop (its workers' stacks first, and the moment it began).

torch offers no hook for either, so ``_start_workers`` and ``_shutdown`` are wrapped, and the
wrapping undone at the end. Whatever the watch does, torchelastic runs as it would without it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from tb_monitor import _env, contract
from tb_monitor.launcher import stack_capture
from tb_monitor.launcher.capture import CapturePoller
from tb_monitor.launcher.hung import GIVE_UP, HungPolicy, HungVerdict
from tb_monitor.launcher.rank_watch import RankWatch, Worker
from tb_monitor.launcher.roll_call import StallTrigger, stall_floor_s
from tb_monitor.launcher.straggler_capture import StragglerCapture
from tb_monitor.rank.stacks import stack_signal

__all__ = ["RESTART_HUNG_ENV", "gave_up", "install", "stop_began", "stop_keep_alives"]

#: Seconds a stall may hold before the agent ends the attempt (``--restart-hung-after``).
RESTART_HUNG_ENV = "TB_MONITOR_RESTART_HUNG_AFTER_S"
#: How long ``stop_keep_alives`` waits for a keep-alive in flight (seconds): a store that
#: answers does within milliseconds; one that does not keeps its own timeout, and the agent exits
#: as plain torchrun would.
KEEP_ALIVE_WAIT_S = 1.0

_log = logging.getLogger("tb_monitor")


def install(destination: str, logdir: str | None = None) -> Callable[[], None]:
    """Watch the workers of torch's ``LocalElasticAgent`` in this process, recording to the
    torchelastic events ``destination``; take the capture requests of ``logdir``; return the
    undo.

    Exports ``$TB_MONITOR_STACKS_DIR`` (a fresh temporary directory) for the workers to come;
    learns each attempt's workers from ``_start_workers`` and asks for their stacks in
    ``_shutdown``, before torch stops them (``_hook_agent``). With ``$RESTART_HUNG_ENV`` the
    watch ends a hung attempt (``launcher.hung``); the agent of rank 0 asks for a capture when a
    straggler is first flagged (``launcher.straggler_capture``). While its workers are stalled
    the agent puts the metric ``contract.NODE_STALLED`` at each look.
    """
    from torch.distributed.elastic import events

    try:
        signum = stack_signal()
    except ValueError as exc:
        _log.warning("tb_monitor: the workers' stacks cannot be asked for: %s", exc)
        signum = None
    directory = tempfile.mkdtemp(prefix="tb-monitor-stacks-")
    os.environ[contract.STACKS_DIR_ENV] = directory
    interval = _env.seconds("TB_MONITOR_HEARTBEAT_S", 5.0)
    global _agents
    agents: list[Any] = []  # the agent, once it starts workers: the one to stop restarting
    _agents = agents
    watch = RankWatch(
        lambda event: events.record(event, destination),
        directory,
        signum=signum,
        interval_s=interval,
        silent_after_s=max(3 * interval, _env.seconds("TB_MONITOR_SILENT_AFTER_S", 5.0)),
        trigger=StallTrigger(stall_floor_s()),
        py_spy=stack_capture.py_spy_path(),
        hung=HungPolicy(after) if (after := _env.seconds(RESTART_HUNG_ENV, 0.0)) > 0 else None,
        on_hung=lambda verdict: _hung(verdict, agents),
        on_stall=_put_stalled,
    ).start()
    poller = stragglers = None
    if logdir is not None:

        def record(pid: int, **fields: Any) -> None:
            watch.record_worker(pid, contract.RANK_CAPTURE, "CAPTURE", **fields)

        poller = CapturePoller(
            logdir, directory, watch.workers, record, lambda: watch.run_id, py_spy=watch.py_spy
        ).start()
        if StragglerCapture.enabled():
            leads = lambda: any(rank == 0 for _, rank, _ in watch.workers())  # noqa: E731
            stragglers = StragglerCapture(logdir, lambda: watch.run_id, leads).start()
    unhook = _hook_agent(watch, agents)

    def undo() -> None:
        watch.close()
        for thread in (poller, stragglers):
            if thread is not None:
                thread.close()
        unhook()
        if os.environ.get(contract.STACKS_DIR_ENV) == directory:
            del os.environ[contract.STACKS_DIR_ENV]
        shutil.rmtree(directory, ignore_errors=True)

    return undo


#: This process's agents, once they start workers (``install``'s).
_agents: list[Any] = []
#: When this process's agent began stopping its workers (its first ``_shutdown``).
_stop_began: float | None = None
#: This process's agent gave up on a job that hung at the same place again.
_gave_up = False


def gave_up() -> bool:
    """Whether the agent ended a job that hung where its previous attempt hung (no restart)."""
    return _gave_up


def _hung(verdict: HungVerdict, agents: list[Any]) -> None:
    """Before the watch kills a hung attempt's workers: on "give up", let torchelastic restart
    no more (the failure it sees then ends the run)."""
    global _gave_up
    if verdict.action == GIVE_UP:
        _gave_up = True
        for agent in agents:
            agent._remaining_restarts = 0


def _put_stalled(seconds: float) -> None:
    """The node's stall as a torchelastic metric (``contract.NODE_STALLED``): to TensorBoard
    and Prometheus as the agent's other metrics go."""
    from torch.distributed.elastic.metrics import put_metric

    put_metric(contract.NODE_STALLED, seconds, contract.NODE_STALLED_GROUP)


def stop_began() -> float | None:
    """When the agent began stopping its workers, as epoch seconds (None before it did). On a
    signal to the agent (a preemption) that is the signal's moment: torchelastic's handler
    raises in the agent's loop and its ``run`` stops the workers at once; what they record
    after it, a failure too, follows from the stop."""
    return _stop_began


def stop_keep_alives(handlers: list[Any] | None = None, wait_s: float = KEEP_ALIVE_WAIT_S) -> bool:
    """Stop the rendezvous keep-alives of ``handlers`` (default: this process's agents') before
    the agent exits on a signal; whether none is still in flight after ``wait_s`` seconds.

    On a signal, torchrun leaves its rendezvous handler open, and with it the handler's
    keep-alive thread, a daemon. One caught inside a store call when the interpreter finalizes
    dies in C++ ("terminate called without an active exception"), and the agent exits by
    SIGABRT instead of with torchrun's exit code. Stopping the thread first (the handler's own
    ``_stop_heartbeats``, all of ``shutdown`` but closing the rendezvous) ends that race;
    the wait is bounded, so a store that does not answer delays nothing.
    """
    if handlers is None:
        handlers = [h for h in map(_rendezvous_handler, _agents) if h is not None]
    stops = [stop for h in handlers if (stop := getattr(h, "_stop_heartbeats", None))]
    if not stops:
        return True

    def stop_all() -> None:
        for stop in stops:
            try:
                stop()
            except Exception:  # the exit goes on as torchrun's would
                _log.warning("tb_monitor: could not stop a rendezvous keep-alive", exc_info=True)

    stopper = threading.Thread(target=stop_all, name="tb_monitor-keep-alive-stop", daemon=True)
    stopper.start()
    stopper.join(wait_s)
    return not stopper.is_alive()


def _rendezvous_handler(agent: Any) -> Any:
    """The rendezvous handler of a torchelastic agent's worker group (None if it has none)."""
    spec = getattr(getattr(agent, "_worker_group", None), "spec", None)
    return getattr(spec, "rdzv_handler", None)


def _hook_agent(watch: RankWatch, agents: list[Any]) -> Callable[[], None]:
    """Wrap ``LocalElasticAgent._start_workers`` (each attempt's pids to ``watch``, the agent
    to ``agents``) and ``_shutdown`` (their stacks first); return the undo. torch offers no
    hook for either."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    start, shutdown = LocalElasticAgent._start_workers, LocalElasticAgent._shutdown

    def _start_workers(self: Any, worker_group: Any) -> Any:
        pids = start(self, worker_group)
        if self not in agents:
            agents.append(self)
        try:
            spec = worker_group.spec
            restarts = spec.max_restarts - getattr(self, "_remaining_restarts", spec.max_restarts)
            watch.watch(
                (
                    Worker(pids[w.local_rank], w.global_rank, w.local_rank, restarts)
                    for w in worker_group.workers
                    if w.local_rank in pids
                ),
                run_id=spec.rdzv_handler.get_run_id(),
            )
        except Exception:  # never let watching change how torchelastic runs
            _log.warning("tb_monitor: the rank watcher cannot watch these workers", exc_info=True)
        return pids

    def _shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _stop_began
        if _stop_began is None:
            _stop_began = time.time()
        try:
            if _succeeded(self):  # they all exited 0: nothing to ask, and none to signal
                watch.watch(())
            else:
                watch.stopping()
                watch.stacks_before_stop()
        except Exception:
            _log.warning("tb_monitor: could not take the workers' stacks", exc_info=True)
        return shutdown(self, *args, **kwargs)

    LocalElasticAgent._start_workers = _start_workers
    LocalElasticAgent._shutdown = _shutdown

    def undo() -> None:
        if LocalElasticAgent.__dict__.get("_start_workers") is _start_workers:
            LocalElasticAgent._start_workers = start
        if LocalElasticAgent.__dict__.get("_shutdown") is _shutdown:
            LocalElasticAgent._shutdown = shutdown

    return undo


def _succeeded(agent: Any) -> bool:
    """Whether the agent's workers all exited 0 (torchelastic's ``WorkerState.SUCCEEDED``):
    its ``run`` calls ``_shutdown`` after success too."""
    group = getattr(agent, "_worker_group", None)
    return getattr(getattr(group, "state", None), "name", None) == "SUCCEEDED"
