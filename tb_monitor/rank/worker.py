"""A torchelastic worker's own events: it started, it raised, it was terminated, it exited.

torchelastic's agent records a worker START, and a final SUCCEEDED/FAILED only when the whole
group ends; a worker failure that leads to a restart leaves no event at all. So the worker
reports on itself: ``tb_monitor.init()`` installs these hooks when it runs inside a torchelastic
worker, and every attempt of every rank shows on the timeline with its outcome. A failure's
record (with the traceback) is flushed before the process dies, since the agent restarts the
group right after.

Events are torchelastic ``Event``s with source WORKER, named ``tb_monitor.worker.status.<STATE>``
(RUNNING, FAILED, TERMINATED, SUCCEEDED), with torchelastic's metadata keys where they exist
(``run_id``, ``global_rank``, ``local_rank``, ``group_rank``, ``role``, ``hostname``, ``state``,
``raw_error``, ``exit_code``) plus ``restart_count``, ``pid``, ``message`` and ``signal``.

What a worker can and cannot know about its own end:

- an uncaught exception: FAILED with its traceback (``sys.excepthook``, or the monitor closing in
  a ``with``/``finally`` while it propagates);
- ``sys.exit(n)``: Python runs no excepthook for ``SystemExit``, and an exit hook cannot read the
  exit status, so ``sys.exit`` is wrapped while the hooks are installed: when the main thread's
  last call had a non-zero (or message) code, the exit is recorded as FAILED with ``exit_code``
  and the stack that called it; 0 or None as SUCCEEDED. (A program that catches that
  ``SystemExit`` and then ends normally, without another ``sys.exit``, still reads as FAILED.)
- SIGTERM (its agent stopping it): TERMINATED, ``signal`` SIGTERM, also while the main thread
  is blocked in C++ (``tb_monitor._shutdown``'s watcher thread records it, and the process still
  dies by the signal at once); SIGINT arrives as ``KeyboardInterrupt`` (FAILED);
- what no process can record about itself: SIGKILL (the OOM killer, ``kill -9``), a crash in
  native code (SIGSEGV, SIGABRT), ``os._exit(n)``, ``raise SystemExit(n)`` bypassing ``sys.exit``,
  or ``sys.exit(n)`` after the monitor was closed. For those the agent's record is the truth:
  ``tb-monitor run`` makes the agent record every failed attempt's workers
  (``torchelastic.worker.status.FAILED`` with ``exit_code``, negative for a signal), which
  ``tb_monitor.analysis.restarts`` reads as the root cause.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from tb_monitor import _shutdown
from tb_monitor.elastic.events.api import Event, EventSource
from tb_monitor.rank import stacks

__all__ = ["WorkerHooks", "in_worker", "install"]

_ENV_INT = {
    "global_rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "group_rank": "GROUP_RANK",
    "restart_count": "TORCHELASTIC_RESTART_COUNT",
}


def in_worker(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a worker started by a torchelastic agent (torchrun)."""
    env = os.environ if environ is None else environ
    return bool(env.get("TORCHELASTIC_RUN_ID")) and "RANK" in env


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class WorkerHooks:
    """Records this worker's life through ``record`` (an ``Event`` sink), then ``flush``es it.

    Use ``install``. The first outcome wins: an uncaught exception (FAILED), ``sys.exit(n)``
    with a non-zero code (FAILED, ``exit_code`` n), SIGTERM (TERMINATED), ``close()`` or
    interpreter exit (SUCCEEDED). See the module docstring for what only the agent can know.
    """

    def __init__(
        self,
        record: Callable[[Event], Any],
        flush: Callable[[], Any],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self._record, self._flush = record, flush
        # Same hostname as the agent's events, so both land on one node.
        self._base: dict[str, Any] = {
            "run_id": env.get("TORCHELASTIC_RUN_ID"),
            "role": env.get("ROLE_NAME", "default"),
            "hostname": socket.getfqdn(socket.gethostname()),
            "pid": os.getpid(),
        }
        self._base.update({key: _int_or_none(env.get(var)) for key, var in _ENV_INT.items()})
        self._lock = threading.Lock()
        self._final_state: str | None = None
        self._previous_excepthook: Any = None
        self._previous_exit: Any = None
        self._exit_request: tuple[Any, str] | None = None  # sys.exit's code and the caller's stack

    def install(self) -> WorkerHooks:
        """Record RUNNING now; hook uncaught exceptions, sys.exit, SIGTERM and interpreter exit."""
        self._emit("RUNNING", message="worker process started")
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._previous_exit = sys.exit
        sys.exit = self._exit
        # tb_monitor's SIGTERM handling records this first, then flushes the writers: on the
        # main thread, or on its watcher thread while the main one is blocked in C++.
        _shutdown.on_sigterm(self._on_sigterm)
        _shutdown.install_sigterm_handler()
        _shutdown.at_exit(self._on_exit, _shutdown.PRODUCERS)
        return self

    def close(self) -> None:
        """Record the outcome so far, then take the hooks out again.

        Called when the worker's ``Monitor`` closes, while its writer is still open: an
        exception on its way out (a ``with`` block or ``finally`` closing the monitor) is
        recorded as FAILED, anything else as SUCCEEDED.
        """
        exc = sys.exc_info()[1]
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
            self._finish("SUCCEEDED", message="worker closed its monitor")
        elif isinstance(exc, SystemExit):
            self._finish_exit(exc.code, "".join(traceback.format_tb(exc.__traceback__)))
        else:
            self._finish_failed(type(exc), exc, exc.__traceback__)
        _shutdown.cancel(self._on_exit)
        _shutdown.cancel(self._on_sigterm)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_excepthook
        if sys.exit == self._exit:
            sys.exit = self._previous_exit

    def _emit(self, state: str, **fields: Any) -> None:
        metadata = {**self._base, "state": state, **fields}
        self._record(
            Event(
                f"tb_monitor.worker.status.{state}",
                source=EventSource.WORKER,
                timestamp=int(time.time() * 1000),
                metadata=metadata,
            )
        )

    def _finish(self, state: str, **fields: Any) -> bool:
        """Record the final state once: the first of exception, SIGTERM or exit wins."""
        with self._lock:
            if self._final_state is not None:
                return False
            self._final_state = state
        self._emit(state, **fields)
        return True

    def _finish_failed(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> bool:
        trace = "".join(traceback.format_exception(exc_type, exc, tb))
        return self._finish("FAILED", message=f"{exc_type.__name__}: {exc}", raw_error=trace)

    def _finish_exit(self, code: Any, stack: str) -> bool:
        """``sys.exit(code)`` with a non-zero code: FAILED, with the exit code and the caller."""
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else 1
        trace = f"Traceback (most recent call last):\n{stack}SystemExit: {code}"
        return self._finish(
            "FAILED", message=f"SystemExit: {code}", raw_error=trace, exit_code=exit_code
        )

    def _exit(self, code: Any = None) -> None:
        """``sys.exit``: remember the code and where it was called, then exit as it would."""
        # In another thread, SystemExit ends only that thread. The latest call counts: a program
        # that catches one SystemExit and exits later with another code ends with that one.
        if threading.current_thread() is threading.main_thread():
            failing = code not in (0, None)
            stack = "".join(traceback.format_stack()[:-1]) if failing else ""
            self._exit_request = (code, stack) if failing else None
        self._previous_exit(code)

    def _excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        try:
            if self._finish_failed(exc_type, exc, tb):
                self._flush()  # the agent restarts the group as soon as this process is gone
        finally:
            self._previous_excepthook(exc_type, exc, tb)

    def _on_sigterm(self) -> None:
        name = signal.Signals.SIGTERM.name
        self._finish("TERMINATED", message=f"received {name}", signal=name)

    def _on_exit(self) -> None:
        request = self._exit_request
        if request is not None:  # the main thread's sys.exit(n) is ending the interpreter
            self._finish_exit(*request)
        self._finish("SUCCEEDED", message="worker process exited")


def install(
    record: Callable[[Event], Any],
    flush: Callable[[], Any],
    environ: Mapping[str, str] | None = None,
) -> WorkerHooks:
    """Install the worker hooks: record RUNNING now, and the worker's outcome when it comes."""
    stacks.install(environ)  # every thread's stack when its agent asks (tb-monitor run)
    return WorkerHooks(record, flush, environ).install()
