"""Ordered process-exit hooks: producers flush before sinks close, whatever ends the process.

A Stat's last window must be logged while the writer that receives it is still open, so exit
work runs in two phases: ``PRODUCERS`` (Stats closing their windows) then ``SINKS`` (writers
draining to disk). They run once, at normal interpreter exit (which also follows an uncaught
exception) and on a SIGTERM that kills the process.

A SIGTERM the process survives (the previous handler is a Python callable, e.g. a training loop
that checkpoints and stops, or ``SIG_IGN``) only runs the *flush* hooks (``on_flush``): every
pending window is logged and every writer made durable, but nothing is closed, so the program
keeps recording until it really exits. A SIGTERM arriving while the hooks run is held back until
they are done (a nested run would find producers already taken and lose their windows).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = [
    "PRODUCERS",
    "SINKS",
    "at_exit",
    "cancel",
    "install_sigterm_handler",
    "on_flush",
    "run_exit_hooks",
]

PRODUCERS = 0
SINKS = 1

Hook = Callable[[], Any]

_log = logging.getLogger(__name__)
_lock = threading.RLock()  # re-entrant: the SIGTERM handler runs on the main thread, maybe under it
_exit_hooks: tuple[list[Hook], list[Hook]] = ([], [])
_flush_hooks: tuple[list[Hook], list[Hook]] = ([], [])
_atexit_registered = False
_previous_sigterm: Any = None
_sigterm_installed = False
_running = False  # exit or flush hooks are running
_sigterm_pending = False  # a SIGTERM came while they ran


def _check_phase(phase: int) -> None:
    if phase not in (PRODUCERS, SINKS):
        raise ValueError(f"unknown exit phase {phase!r}; expected PRODUCERS or SINKS")


def at_exit(hook: Hook, phase: int) -> None:
    """Run ``hook`` once when the process ends, in ``phase`` (``PRODUCERS`` or ``SINKS``)."""
    _check_phase(phase)
    global _atexit_registered
    with _lock:
        _exit_hooks[phase].append(hook)
        if not _atexit_registered:
            atexit.register(run_exit_hooks)
            _atexit_registered = True


def on_flush(hook: Hook, phase: int) -> None:
    """Run ``hook`` on every SIGTERM the process survives, in ``phase``; registered once."""
    _check_phase(phase)
    with _lock:
        if hook not in _flush_hooks[phase]:  # bound methods compare by object and function
            _flush_hooks[phase].append(hook)


def cancel(hook: Hook) -> None:
    """Forget a hook, exit or flush (e.g. its owner was closed); unknown hooks are ignored."""
    with _lock:
        for hooks in (*_exit_hooks, *_flush_hooks):
            while hook in hooks:
                hooks.remove(hook)


def _run(registry: tuple[list[Hook], list[Hook]], forget: bool) -> bool:
    """Run the hooks of ``registry``, producers first; whether a SIGTERM came meanwhile."""
    global _running, _sigterm_pending
    with _lock:
        if _running:  # a hook called us back: the run in progress covers it
            return False
        _running = True
    try:
        for phase in (PRODUCERS, SINKS):
            with _lock:
                hooks = list(reversed(registry[phase]))  # last registered, first run (like atexit)
                if forget:
                    registry[phase].clear()
            for hook in hooks:
                try:
                    hook()
                except Exception:
                    _log.exception("tb_monitor exit hook %r failed", hook)
    finally:
        with _lock:
            _running = False
            pending, _sigterm_pending = _sigterm_pending, False
    return pending


def run_exit_hooks() -> None:
    """Run and forget every exit hook, producers first; a failing hook is logged, not fatal.

    A SIGTERM that arrived meanwhile takes effect afterwards, as it would have without us.
    """
    if _run(_exit_hooks, forget=True):
        _continue_sigterm(signal.SIGTERM, None)


def _survives(handler: Any) -> bool:
    """Whether the process outlives SIGTERM under ``handler`` (a callable or SIG_IGN)."""
    return callable(handler) or handler == signal.SIG_IGN


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _sigterm_pending
    with _lock:
        if _running:
            _sigterm_pending = True  # handled when the hooks in progress are done
            return
    if _survives(_previous_sigterm):
        pending = _run(_flush_hooks, forget=False)  # the process lives on: close nothing
    else:
        pending = _run(_exit_hooks, forget=True)
    _continue_sigterm(signum, frame)
    if pending and _survives(_previous_sigterm):
        _continue_sigterm(signum, None)  # the SIGTERM that came during the flush


def _continue_sigterm(signum: int, frame: FrameType | None) -> None:
    """Do what SIGTERM did before we were installed."""
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # SIG_DFL (or unknown): die by the signal, so the exit status is what it always was.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def install_sigterm_handler() -> bool:
    """Flush on SIGTERM, then continue with the handler that was there before.

    Only the main thread may install signal handlers; elsewhere this returns False and the
    process still flushes at normal exit.
    """
    global _previous_sigterm, _sigterm_installed
    with _lock:
        if _sigterm_installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        _previous_sigterm = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True
        return True
