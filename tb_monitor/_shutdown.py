"""Ordered process-exit hooks: producers flush before sinks close, whatever ends the process.

A Stat's last window must be logged while the writer that receives it is still open, so exit
work runs in two phases: ``PRODUCERS`` (Stats closing their windows) then ``SINKS`` (writers
draining to disk). They run once, at normal interpreter exit (which also follows an uncaught
exception) and on SIGTERM, after which the previous SIGTERM behaviour continues.
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

__all__ = ["PRODUCERS", "SINKS", "at_exit", "cancel", "install_sigterm_handler", "run_exit_hooks"]

PRODUCERS = 0
SINKS = 1

_log = logging.getLogger(__name__)
_lock = threading.RLock()
_hooks: tuple[list[Callable[[], Any]], list[Callable[[], Any]]] = ([], [])
_atexit_registered = False
_previous_sigterm: Any = None
_sigterm_installed = False


def at_exit(hook: Callable[[], Any], phase: int) -> None:
    """Run ``hook`` once when the process ends, in ``phase`` (``PRODUCERS`` or ``SINKS``)."""
    if phase not in (PRODUCERS, SINKS):
        raise ValueError(f"unknown exit phase {phase!r}; expected PRODUCERS or SINKS")
    global _atexit_registered
    with _lock:
        _hooks[phase].append(hook)
        if not _atexit_registered:
            atexit.register(run_exit_hooks)
            _atexit_registered = True


def cancel(hook: Callable[[], Any]) -> None:
    """Forget a hook (e.g. its owner was closed explicitly); unknown hooks are ignored."""
    with _lock:
        for hooks in _hooks:
            while hook in hooks:
                hooks.remove(hook)


def run_exit_hooks() -> None:
    """Run and forget every registered hook, producers first; a failing hook is logged, not fatal."""
    for phase in (PRODUCERS, SINKS):
        with _lock:
            hooks = list(reversed(_hooks[phase]))  # last registered, first run (like atexit)
            _hooks[phase].clear()
        for hook in hooks:
            try:
                hook()
            except Exception:
                _log.exception("tb_monitor exit hook %r failed", hook)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    run_exit_hooks()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL (or unknown): die by the signal, so the exit status is what it always was
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
