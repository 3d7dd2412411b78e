"""What a torchelastic agent sees of its workers' processes: the watcher ``tb-monitor run`` adds.

A rank stopped with SIGSTOP, stuck in the kernel or holding the GIL in native code sends no
heartbeat: its own records cannot say why. Its agent can. Every ``interval_s`` a daemon thread
reads each worker's ``/proc/PID/stat`` state and the age of its pulse (``rank.stacks``:
the worker touches its pulse file while its Python threads run) and makes of it one view:

- ``stopped`` (state T or t: SIGSTOP, a debugger): it cannot dump its stacks until continued;
- ``uninterruptible sleep`` (state D: in the kernel, I/O or a driver);
- ``alive but silent`` (running or sleeping, but no pulse for ``silent_after_s``);
- responding (anything else): not recorded unless it ends a silent view.

A view seen twice in a row that differs from the last recorded one is recorded in the agent's
run as a timeline record (``contract.RANK_SEEN``, source WORKER, the rank's lane): changes only,
never a sample a second. A worker that turns silent is asked once for its stacks (the stacks
signal), and whatever a worker's file gains is recorded (``contract.RANK_STACKS``): when it
answers, when a stopped one is continued, and before the agent stops its workers, when every
worker still alive and not stopped is asked and waited for at most ``STOP_WAIT_S``.

A signal must never end a worker. Only a worker whose stacks file exists is signalled: a worker
exiting normally removes it, and its pulse file, before its handler goes (``stacks``); one
without a pulse file is never silent, and silence takes at least two looks' intervals. A worker
once seen gone is forgotten (its pid may be reused), and when torchelastic stops its workers
after they succeeded none is asked.

Once per stall of all its workers (``launcher.roll_call``) the agent records every worker's
stacks with ``roll_call``, ``method`` and the main thread's ``frames`` (JSON): read by py-spy
where it can (``launcher.stack_capture``: native frames, stopped processes), else dumped by
faulthandler; a worker seen silent is read by py-spy first too. While they are all stalled,
each look tells ``on_stall`` for how long (the agent's metric for operators' alert).

``install(destination)`` wires it into torch's ``LocalElasticAgent``, looking every
``$TB_MONITOR_HEARTBEAT_S`` (5 s), a worker silent after three looks without a pulse (at least
``$TB_MONITOR_SILENT_AFTER_S``, 5 s); ``RankWatch`` needs no torch. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tb_monitor import contract
from tb_monitor.analysis.roll_call import innermost
from tb_monitor.elastic.events.api import Event, EventSource
from tb_monitor.launcher import stack_capture, worker_server
from tb_monitor.launcher.hung import HungPolicy, HungVerdict
from tb_monitor.launcher.roll_call import StallTrigger
from tb_monitor.rank.stacks import (
    Progress,
    exited_path,
    pulse_path,
    read_pulse,
    stacks_path,
)

__all__ = [
    "SILENT",
    "ROLL_CALL_WAIT_S",
    "STOP_WAIT_S",
    "STOPPED",
    "UNINTERRUPTIBLE",
    "RankWatch",
    "Worker",
    "process_state",
    "view_of",
]

STOPPED, UNINTERRUPTIBLE, SILENT = (
    contract.SEEN_STOPPED,
    contract.SEEN_UNINTERRUPTIBLE,
    contract.SEEN_SILENT,
)
#: Before stopping its workers, the agent waits at most this long for their stacks.
STOP_WAIT_S = 0.5
#: In a roll-call without py-spy, the agent waits at most this long for faulthandler's dumps.
ROLL_CALL_WAIT_S = 2.0
#: A dump longer than this is cut (a timeline record is kept whole in memory by readers).
MAX_STACKS_CHARS = 64_000
_POLL_S = 0.01
_log = logging.getLogger("tb_monitor")
_MESSAGES = {
    STOPPED: "its process is stopped (state {state}: SIGSTOP or a debugger); it cannot dump "
    "its stacks until it is continued",
    UNINTERRUPTIBLE: "its process is in uninterruptible sleep (state D: in the kernel, I/O or "
    "a driver); it dumps its stacks once it leaves it",
    SILENT: "its process is alive (state {state}) but silent: no pulse for {age:.0f} s (native "
    "code holding the GIL, or a deadlock)",
    "": "its process is responding again (state {state})",
}


def process_state(pid: int, proc: str = "/proc") -> str | None:
    """The one-letter state ``/proc/PID/stat`` gives (R, S, D, T, t, Z, ...); None once gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (in parentheses) may hold spaces and parentheses: the state follows
    # the last ")".
    state = text[text.rfind(b")") + 2 : text.rfind(b")") + 3].decode("ascii", "replace")
    return state or None


def view_of(state: str | None, pulse_age_s: float | None, silent_after_s: float) -> str | None:
    """What the agent makes of a worker: STOPPED, UNINTERRUPTIBLE, SILENT, ``""`` (responding),
    or None when the process has ended (its agent's own records say how)."""
    if state in (None, "Z", "X", "x"):
        return None
    if state in contract.HELD_STATES:
        return contract.HELD_STATES[state]
    if pulse_age_s is not None and pulse_age_s > silent_after_s:
        return SILENT
    return ""


@dataclass
class Worker:
    """One watched worker process, and what the watcher last made of it."""

    pid: int
    rank: int
    local_rank: int
    restart_count: int = 0
    recorded: str = ""  # the view last recorded ("": responding)
    candidate: str | None = None  # a view seen once, recorded when seen again
    state: str | None = None
    asked: bool = False  # sent the stacks signal, its dump not yet recorded
    offset: int = 0  # the stacks file's bytes already recorded
    size_seen: int = 0  # its size at the last look: a dump is recorded once it stopped growing
    gone: bool = False  # seen ended: its pid may belong to another process now
    progress: Progress | None = None  # the newest its pulse carried
    frames: tuple = ()  # its main thread's frames at the last roll-call
    counters: bytes | None = None  # its torch wait counters at the last look in a stall


class RankWatch:
    """Watches the workers ``watch`` names; records through ``record`` (a torchelastic Event)."""

    def __init__(
        self,
        record: Callable[[Event], Any],
        directory: str,
        *,
        signum: int | None,
        interval_s: float,
        silent_after_s: float,
        run_id: str = "",
        role: str = "default",
        proc: str = "/proc",
        clock: Callable[[], float] = time.time,
        trigger: StallTrigger | None = None,
        py_spy: str | None = None,
        hung: HungPolicy | None = None,
        on_hung: Callable[[HungVerdict], Any] | None = None,
        on_stall: Callable[[float], Any] | None = None,
    ) -> None:
        self.directory = directory
        self._record, self._signum, self._clock, self._proc = record, signum, clock, proc
        self._trigger, self._py_spy = trigger, py_spy
        self._hung, self._on_hung = hung, on_hung
        self._on_stall, self._stall_told = on_stall, False
        # A pulse late by a look or two is a busy worker, not a silent one.
        self.interval_s, self.silent_after_s = interval_s, max(silent_after_s, 2 * interval_s)
        self._base = {
            "run_id": run_id,
            "role": role,
            "hostname": socket.getfqdn(socket.gethostname()),
        }
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, workers: Iterable[Worker], run_id: str | None = None) -> None:
        """Watch these workers from now on (a new attempt's), in place of the previous ones."""
        with self._lock:
            self._workers = list(workers)
            if run_id:
                self._base["run_id"] = run_id

    def look(self) -> None:
        """One look at every worker: record a changed view, ask a silent one for its stacks,
        record the stacks a worker wrote."""
        with self._lock:
            now = self._clock()
            for worker in self._workers:
                self._look_at(worker, now)
            self._roll_call(now)
            self._tell_stall(now)
            self._judge_hung(now)

    @property
    def py_spy(self) -> str | None:
        """The py-spy executable the watch reads stacks with (None: faulthandler only)."""
        return self._py_spy

    @property
    def run_id(self) -> str:
        """The run id of the workers watched (torchelastic's)."""
        return str(self._base["run_id"])

    def workers(self) -> list[tuple[int, int, str | None]]:
        """``(pid, rank, /proc state)`` of the workers alive now."""
        with self._lock:
            return [(w.pid, w.rank, w.state) for w in self._workers if not w.gone]

    def record_worker(self, pid: int, name: str, state: str, **fields: Any) -> None:
        """Record ``name`` for the watched worker ``pid`` (its rank's lane)."""
        with self._lock:
            worker = next((w for w in self._workers if w.pid == pid), None)
        if worker is not None:
            self._emit(worker, name, state, **fields)

    def stopping(self) -> None:
        """Record that the agent began stopping its workers (``contract.AGENT_STOPPING``): what
        they do from now on, a SIGTERM handler that hangs included, is the stop's doing."""
        metadata = {**self._base, "state": "STOPPING"}
        when = int(self._clock() * 1000)
        self._record(Event(contract.AGENT_STOPPING, EventSource.AGENT, when, metadata))

    def stacks_before_stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Ask every worker alive and not stopped for its stacks; record what they write
        within ``wait_s`` (the agent is about to stop them: nothing could dump after)."""
        with self._lock:
            alive = [(w, process_state(w.pid, self._proc)) for w in self._workers if not w.gone]
            asked = [
                w for w, state in alive if view_of(state, None, 0.0) == "" and self._ask(w, state)
            ]
            self._wait_for(asked, wait_s, "before the agent stopped it")

    def _wait_for(
        self, asked: list[Worker], wait_s: float, reason: str, call: dict | None = None
    ) -> None:
        """Record the dumps of the workers ``asked`` as they come, for at most ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while asked and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            asked = [w for w in asked if not self._take_stacks(w, reason, call)]

    def _roll_call(self, now: float) -> None:
        """Every worker's stacks, once per stall of them all (``roll_call.StallTrigger``): by
        py-spy where it reads them, else by faulthandler."""
        alive = [w for w in self._workers if not w.gone]
        progress = {w.pid: w.progress for w in alive}
        if self._trigger is None or not self._trigger.due(progress, now):
            return
        since = self._trigger.stalled_since(progress)
        call = {"roll_call": f"{self._base['hostname']}@{now:.3f}", "stalled_since": since}
        missing = self._spied(alive, "for the roll-call", call)
        asked = [w for w in missing if self._ask(w, w.state)]
        self._wait_for(asked, ROLL_CALL_WAIT_S, "for the roll-call", call)

    def _tell_stall(self, now: float) -> None:
        """Tell ``on_stall`` how long the workers have been stalled (``StallTrigger.
        stalled_for``): at every look while they are, and 0 once when they no longer are."""
        if self._on_stall is None or self._trigger is None:
            return
        progress = {w.pid: w.progress for w in self._workers if not w.gone}
        seconds = self._trigger.stalled_for(progress, now)
        if seconds or self._stall_told:
            self._on_stall(seconds)
        self._stall_told = seconds > 0

    def _spied(self, workers: list[Worker], reason: str, call: dict | None = None) -> list[Worker]:
        """Record the stacks py-spy reads of ``workers``; those it could not read."""
        dumps = stack_capture.capture(((w.pid, w.state) for w in workers), self._py_spy)
        for worker in workers:
            dump = dumps.get(worker.pid)
            if dump is not None:
                self._emit_stacks(worker, dump, f"read by {dump.method} {reason}", call)
        return [w for w in workers if w.pid not in dumps]

    def _emit_stacks(self, worker: Worker, dump: Any, reason: str, call: dict | None) -> None:
        if call is not None:
            worker.frames = tuple(dump.frames)
        text = dump.text
        if len(text) > MAX_STACKS_CHARS:
            text = text[:MAX_STACKS_CHARS] + "\n... (cut)"
        self._emit(
            worker,
            contract.RANK_STACKS,
            "STACKS",
            stacks=text,
            seen=worker.recorded or "responding",
            message=f"every thread's stack, {reason}",
            method=dump.method,
            frames=json.dumps(dump.frames),
            **(call or {}),
        )

    def _judge_hung(self, now: float) -> None:
        """End the attempt when its stall held for the policy's time (``launcher.hung``)."""
        if self._hung is None or self._trigger is None:
            return
        alive = [w for w in self._workers if not w.gone]
        stall = self._trigger.held({w.pid: w.progress for w in alive})
        since = self._trigger.stalled_since({w.pid: w.progress for w in alive}) if stall else None
        where = tuple(
            "{} at {}".format(*innermost(w.frames)) for w in sorted(alive, key=lambda w: w.rank)
        )
        busy = stall is not None and self._counters_moved(alive)
        verdict = self._hung.decide(stall, since, where, now, busy)
        if verdict is None:
            return
        metadata = {
            **self._base,
            "state": "HUNG",
            "action": verdict.action,
            "stalled_since": verdict.stalled_since,
            "held_s": verdict.held_s,
            "after_s": self._hung.after_s,
            "ranks": json.dumps(sorted(w.rank for w in alive)),
            "where": json.dumps(verdict.where),
            "restart_count": max((w.restart_count for w in alive), default=0),
        }
        when = int(now * 1000)
        self._record(Event(contract.AGENT_HUNG, EventSource.AGENT, when, metadata))
        if self._on_hung is not None:
            self._on_hung(verdict)
        for worker in alive:  # torchelastic sees them fail and restarts (or, given up, ends)
            with contextlib.suppress(OSError):
                os.kill(worker.pid, signal.SIGKILL)

    def _counters_moved(self, workers: list[Worker]) -> bool:
        """Whether a worker's torch wait counters changed since the last look (progress that
        is not a step); the store's own counters aside, which its keep-alives move."""
        moved = False
        for worker in workers:
            path = worker_server.socket_path(self.directory, worker.pid)
            try:
                values = json.loads(worker_server.ask(path, "wait_counter_values", 2.0))
            except (OSError, ValueError):
                continue
            ours = {k: v for k, v in values.items() if "TCPStore" not in k}
            now = json.dumps(ours, sort_keys=True).encode()
            moved = moved or (worker.counters is not None and now != worker.counters)
            worker.counters = now
        return moved

    def start(self) -> RankWatch:
        self._thread = threading.Thread(target=self._run, name="tb_monitor-rank-watch", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.look()
            except Exception:  # never let watching break the agent; say it once
                _log.warning("tb_monitor: the rank watcher stopped", exc_info=True)
                return

    def _look_at(self, worker: Worker, now: float) -> None:
        reason = "after it went silent" if worker.asked else "on request"
        if worker.gone:  # only what it dumped before it ended; its pid may be another's now
            self._take_stacks(worker, reason)
            return
        worker.state = process_state(worker.pid, self._proc)
        worker.gone = worker.state is None
        pulse = pulse_path(self.directory, worker.pid)
        try:
            pulse_age = now - os.stat(pulse).st_mtime
        except OSError:  # not installed (yet): its silence cannot be told
            pulse_age = None
        worker.progress = read_pulse(pulse) or worker.progress
        view = view_of(worker.state, pulse_age, self.silent_after_s)
        if view is not None and view != worker.recorded:
            if view == worker.candidate:
                self._seen(worker, view, pulse_age or 0.0)
            worker.candidate = view
        else:
            worker.candidate = None
        self._take_stacks(worker, reason)

    def _seen(self, worker: Worker, view: str, pulse_age: float) -> None:
        worker.recorded, worker.candidate = view, None
        message = _MESSAGES[view].format(state=worker.state, age=pulse_age)
        state = "SILENT" if view else "RESPONDING"
        self._emit(worker, contract.RANK_SEEN, state, seen=view or "responding", message=message)
        if view and not worker.asked and self._spied([worker], "after it went silent"):
            worker.asked = self._ask(worker, worker.state)  # once a spell, till its stacks came

    def _ask(self, worker: Worker, state: str | None) -> bool:
        """Send the stacks signal where the worker registered for it; whether it was sent. A
        stopped process takes it once continued, one in the kernel once it leaves."""
        if self._signum is None or view_of(state, None, 0.0) is None:
            return False
        if not os.path.exists(stacks_path(self.directory, worker.pid)):
            return False  # no handler yet, or withdrawn at exit: it would not answer
        try:
            os.kill(worker.pid, self._signum)
        except OSError:
            return False
        return True

    def _take_stacks(self, worker: Worker, reason: str, call: dict | None = None) -> bool:
        """Record what the worker's stacks file gained once it stopped growing; whether it did
        (in a roll-call ``call``, with its main thread's frames)."""
        path = stacks_path(self.directory, worker.pid)
        try:
            size = os.path.getsize(path)
        except OSError:  # withdrawn at exit: a dump it held was moved aside
            path = exited_path(self.directory, worker.pid)
            try:
                size = os.path.getsize(path)
            except OSError:
                return False
        if size <= worker.offset or size != worker.size_seen:
            worker.size_seen = size
            return False
        with open(path, "rb") as dumps:
            dumps.seek(worker.offset)
            text = dumps.read(size - worker.offset).decode("utf-8", "replace")
        worker.offset, worker.asked = size, False
        threads = stack_capture.parse_faulthandler(text)
        dump = stack_capture.Dump("faulthandler", text, stack_capture.main_frames(threads))
        self._emit_stacks(worker, dump, f"dumped by faulthandler {reason}", call)
        return True

    def _emit(self, worker: Worker, name: str, state: str, **fields: Any) -> None:
        metadata = {
            **self._base,
            "global_rank": worker.rank,
            "local_rank": worker.local_rank,
            "restart_count": worker.restart_count,
            "pid": worker.pid,
            "process_state": worker.state,
            "state": state,
            **fields,
        }
        event = Event(name, EventSource.WORKER, int(self._clock() * 1000), metadata)
        self._record(event)
