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

A SIGTERM must never make the process outlive it. Python runs a signal handler on the main
thread only, between bytecodes: a main thread blocked in C++ (a DDP all_reduce waiting for a
stopped or hung peer) never runs it, and a process that ``SIG_DFL`` would have ended at once
lives on until torchrun's SIGKILL, 30 s later, at every restart. So a *watcher* thread handles
it too: ``signal.set_wakeup_fd`` makes Python's C-level handler write the signal's number to a
pipe the moment it arrives, the watcher wakes (the blocked thread released the GIL), gives the
main thread ``MAIN_FIRST_S`` to handle it as usual, and otherwise runs the ``on_sigterm`` and
exit hooks itself and ends the process by the signal, as ``SIG_DFL`` would. A wakeup fd already
set (asyncio's) is left alone, and so is a SIGTERM handler installed after ours (the watcher
then only flushes): in those cases the main thread's handler is all there is, as before.

A child that ``multiprocessing`` forks (a DataLoader worker with the fork start method) ends by
``os._exit``, which runs no ``atexit`` hook: its records would be lost. Such a child runs the exit
hooks as a ``multiprocessing`` finalizer instead, when its target returns, as it would at a
normal exit. A bare ``os.fork`` child that calls ``os._exit`` asked for no cleanup and gets none.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = [
    "MAIN_FIRST_S",
    "PRODUCERS",
    "SINKS",
    "at_exit",
    "cancel",
    "install_sigterm_handler",
    "on_flush",
    "on_sigterm",
    "run_exit_hooks",
]

PRODUCERS = 0
SINKS = 1
#: How long the watcher leaves a SIGTERM to the main thread's handler (seconds): a main thread
#: running Python handles it within microseconds; one blocked in C++ never does.
MAIN_FIRST_S = 0.02
#: How long a run of hooks waits for another thread's run to end (seconds); then it goes on.
_WAIT_S = 10.0

Hook = Callable[[], Any]

_log = logging.getLogger(__name__)
_lock = threading.RLock()  # re-entrant: the SIGTERM handler runs on the main thread, maybe under it
_changed = threading.Condition(_lock)  # a run of hooks ended, or a SIGTERM was claimed
_exit_hooks: tuple[list[Hook], list[Hook]] = ([], [])
_flush_hooks: tuple[list[Hook], list[Hook]] = ([], [])
_sigterm_hooks: list[Hook] = []
_atexit_registered = False
_previous_sigterm: Any = None
_sigterm_installed = False
_runner: int | None = None  # the thread running exit or flush hooks now
_sigterm_pending = False  # a SIGTERM came while they ran on the main thread
_handling = False  # a SIGTERM is being handled (by the main thread or the watcher)
_watcher_pid: int | None = None  # the process whose watcher thread reads the wakeup pipe
_setsig: Any = None  # PyOS_setsig, once the watcher runs


def _check_phase(phase: int) -> None:
    if phase not in (PRODUCERS, SINKS):
        raise ValueError(f"unknown exit phase {phase!r}; expected PRODUCERS or SINKS")


class _ForkedChildren:
    """Arms ``multiprocessing``'s forked children to run the exit hooks when they end."""

    armed = False

    def before_fork(self) -> None:
        """Before each fork: once ``multiprocessing`` is in use, have its children run the exit
        hooks (its fork start method clears the finalizers a child inherits, then calls these)."""
        if self.armed or "multiprocessing.util" not in sys.modules:
            return
        sys.modules["multiprocessing.util"].register_after_fork(self, _ForkedChildren._in_child)
        self.armed = True

    @staticmethod
    def _in_child(_: object) -> None:
        from multiprocessing import util

        util.Finalize(None, run_exit_hooks, exitpriority=0)


_forked_children = _ForkedChildren()
os.register_at_fork(before=_forked_children.before_fork)


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


def on_sigterm(hook: Hook) -> None:
    """Run ``hook`` first on every SIGTERM, before the flush or exit hooks (it records what
    happened; they write it out). It may run on the watcher thread."""
    with _lock:
        if hook not in _sigterm_hooks:
            _sigterm_hooks.append(hook)


def cancel(hook: Hook) -> None:
    """Forget a hook, exit, flush or SIGTERM (e.g. its owner was closed); unknown ones are
    ignored."""
    with _lock:
        for hooks in (*_exit_hooks, *_flush_hooks, _sigterm_hooks):
            while hook in hooks:
                hooks.remove(hook)


def _run(registry: tuple[list[Hook], list[Hook]], forget: bool) -> bool:
    """Run the hooks of ``registry``, producers first; whether a SIGTERM came meanwhile.

    Another thread's run in progress is waited for (``_WAIT_S`` at most), so that exit hooks
    never run beside a flush and nothing is closed under it.
    """
    global _runner, _sigterm_pending
    me = threading.get_ident()
    with _lock:
        if _runner == me:  # a hook called us back: the run in progress covers it
            return False
        _changed.wait_for(lambda: _runner is None, timeout=_WAIT_S)
        _runner = me
    try:
        for phase in (PRODUCERS, SINKS):
            with _lock:
                hooks = list(reversed(registry[phase]))  # last registered, first run (like atexit)
                if forget:
                    registry[phase].clear()
            _call(hooks)
    finally:
        with _lock:
            _runner = None
            pending, _sigterm_pending = _sigterm_pending, False
            _changed.notify_all()
    return pending


def _call(hooks: list[Hook]) -> None:
    for hook in hooks:
        try:
            hook()
        except Exception:
            _log.exception("tb_monitor exit hook %r failed", hook)


def run_exit_hooks() -> None:
    """Run and forget every exit hook, producers first; a failing hook is logged, not fatal.

    A SIGTERM that arrived meanwhile takes effect afterwards, as it would have without us.
    """
    if _run(_exit_hooks, forget=True):
        _continue_sigterm(signal.SIGTERM, None)


def _survives(handler: Any) -> bool:
    """Whether the process outlives SIGTERM under ``handler`` (a callable or SIG_IGN)."""
    return callable(handler) or handler == signal.SIG_IGN


def _claim() -> bool:
    """Take this SIGTERM for the calling thread; False if another thread handles it."""
    global _handling
    with _lock:
        if _handling:
            return False
        _handling = True
        _changed.notify_all()
        return True


def _handle(signum: int) -> bool:
    """Record, then flush (a SIGTERM survived) or run the exit hooks (a fatal one); whether
    another SIGTERM came meanwhile. Called by the thread that claimed the signal."""
    global _handling
    with _lock:
        hooks = list(_sigterm_hooks)
    _call(hooks)
    survives = _survives(_previous_sigterm)
    pending = _run(_flush_hooks if survives else _exit_hooks, forget=not survives)
    if survives:
        with _lock:
            _handling = False  # the next SIGTERM is handled again
    return pending


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _sigterm_pending, _handling
    if signal.getsignal(signal.SIGTERM) != _on_sigterm:
        _chained(signum, frame)
        return
    with _lock:
        if _runner == threading.get_ident():  # hooks run on this thread, under this handler
            _sigterm_pending = _handling = True  # handled when the hooks in progress are done
            _changed.notify_all()
            return
    if not _claim():  # the watcher has it: it ends the process, or flushes for a survivor
        if callable(_previous_sigterm):
            _previous_sigterm(signum, frame)  # a user's handler runs on the main thread
        return
    pending = _handle(signum)
    _continue_sigterm(signum, frame)
    if pending and _survives(_previous_sigterm):
        _continue_sigterm(signum, None)  # the SIGTERM that came during the flush


def _chained(signum: int, frame: FrameType | None) -> None:
    """Called by a handler installed after ours, as the one before it (Lightning's calls every
    callable one): do what the handler we replaced would have done for it. SIG_DFL and SIG_IGN
    are not callable, so it would have called nothing: the process lives on, as its handler
    decided, with its records made durable."""
    _run(_flush_hooks, forget=False)
    if callable(_previous_sigterm):
        _previous_sigterm(signum, frame)


def _continue_sigterm(signum: int, frame: FrameType | None) -> None:
    """Do what SIGTERM did before we were installed."""
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # SIG_DFL (or unknown): die by the signal, so the exit status is what it always was.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _die_by(signum: int) -> None:
    """End the process by ``signum``'s default action, from any thread (``signal.signal`` is
    for the main thread only; CPython's own ``PyOS_setsig`` is not)."""
    if _setsig is not None:
        _setsig(signum, None)  # SIG_DFL
        os.kill(os.getpid(), signum)


def _c_setsig() -> Any:
    """CPython's ``PyOS_setsig``, ready to call (imported when the watcher starts, not at
    death: ``import tb_monitor`` stays light)."""
    import ctypes

    setsig = ctypes.pythonapi.PyOS_setsig
    setsig.argtypes, setsig.restype = (ctypes.c_int, ctypes.c_void_p), ctypes.c_void_p
    return setsig


def _sigterm_arrived() -> None:
    """The watcher read a SIGTERM from the wakeup pipe: handle it unless the main thread does."""
    if signal.getsignal(signal.SIGTERM) != _on_sigterm:
        _run(_flush_hooks, forget=False)  # a handler installed after ours decides what follows
        return
    with _lock:
        _changed.wait_for(lambda: _handling, timeout=MAIN_FIRST_S)
    if not _claim():
        return
    _handle(signal.SIGTERM)
    if not _survives(_previous_sigterm):
        _die_by(signal.SIGTERM)  # a survivor's own handler runs on the main thread


def _watch(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 256)  # blocks without the GIL
        except OSError:
            return
        if not data or os.getpid() != _watcher_pid:
            return
        if signal.SIGTERM in data:
            try:
                _sigterm_arrived()
            except Exception:  # the main thread's handler is still there
                _log.exception("tb_monitor: handling SIGTERM off the main thread failed")


def _start_watcher() -> None:
    """Have the C-level signal handler wake a thread of ours; not if a wakeup fd is set."""
    global _watcher_pid, _setsig
    _setsig = _c_setsig()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous != -1:  # someone's (asyncio's): theirs stays, we rely on the handler alone
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    _watcher_pid = os.getpid()
    threading.Thread(target=_watch, args=(read_fd,), name="tb_monitor-sigterm", daemon=True).start()

    def forget_in_child() -> None:  # a fork's copy of the pipe must not wake our watcher
        global _watcher_pid
        _watcher_pid = None
        try:
            current = signal.set_wakeup_fd(-1)
            if current not in (write_fd, -1):  # set by someone since: theirs stays
                signal.set_wakeup_fd(current)
        except ValueError:  # forked from a thread other than the main one
            pass
        for fd in (read_fd, write_fd):
            os.close(fd)

    os.register_at_fork(after_in_child=forget_in_child)


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
        try:
            _start_watcher()
        except (OSError, ValueError, RuntimeError) as exc:  # the handler alone, as before
            _log.warning("tb_monitor: no SIGTERM watcher thread (%s)", exc)
        return True
