"""A worker's Python stacks on request, even while its main thread is stuck in C++.

A rank deadlocked in a collective or blocked in native code never returns to the interpreter,
so no Python-level handler can say where it is (pytorch issue 122694). ``faulthandler`` can: its
C signal handler writes every thread's Python stack straight to a file descriptor, GIL or not.
Under ``tb-monitor run`` the agent exports ``$TB_MONITOR_STACKS_DIR``; each worker then
registers that handler on ``$TB_MONITOR_STACKS_SIGNAL`` writing to ``<dir>/<pid>.stacks``, and
touches ``<dir>/<pid>.pulse`` every ``$TB_MONITOR_HEARTBEAT_S`` from a daemon thread: its
modification time tells the agent (``launcher.rank_watch``) that the worker's Python threads
still run (a dump, written from C, says nothing of that). Each beat rewrites the pulse with the
rank's step progress where its rank health runs (``progress_from``; ``read_pulse`` reads it):
steps so far, the last step's wall time and the typical step, so that the agent can tell a
stall of all its workers on its own (``launcher.roll_call``). The worker also names its agent
as a permitted tracer (Yama's ``PR_SET_PTRACER``), so that py-spy, run by the agent, may read it. The agent signals a worker that went
silent, and every worker still alive before it stops them, and records what they wrote.

Telemetry must never end a job, so the default signal is ``SIGURG``, whose default action is to
be ignored: a signal that arrives before the handler is registered or after it is gone (at
interpreter shutdown) does nothing. SIGUSR1/2 and the real-time signals would end the process
(SIGUSR1 is also Lightning's SLURM requeue signal); SIGWINCH, also ignored by default, reaches
every process of a terminal's foreground group on each resize (a dump per resize) and is
handled by curses/readline/rich. Nothing in Python or torch uses SIGURG (out-of-band socket
data, only for an owner set with ``F_SETOWN``; Go's runtime preempts with it, so an existing
handler is chained). Another signal can be configured (``SIGRTMIN+3``, ``SIGUSR2``, a number)
at the risk that one sent in those windows kills the worker; ``off`` disables the dumps.

Both sides narrow those windows anyway: the file appears under its final name only once the
handler is registered, and a worker exiting normally withdraws (an ``atexit`` hook removes its
stacks and pulse files) before finalization unregisters the handler; the agent signals only
workers whose stacks file exists and reads a worker without a pulse file as responding.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tb_monitor import _env, contract

__all__ = [
    "DEFAULT_SIGNAL",
    "Progress",
    "StackDumps",
    "ends_by_default",
    "exited_path",
    "install",
    "progress_from",
    "pulse_path",
    "read_pulse",
    "stack_signal",
    "stacks_path",
]

#: The signal a worker dumps its stacks on unless ``$TB_MONITOR_STACKS_SIGNAL`` names another:
#: its default action is to be ignored, so one that comes when no handler is there is harmless.
DEFAULT_SIGNAL = "SIGURG"
#: The signals whose default action is to ignore them (signal(7)).
_IGNORED_BY_DEFAULT = frozenset(
    getattr(signal, name)
    for name in ("SIGURG", "SIGWINCH", "SIGCHLD", "SIGCONT")
    if hasattr(signal, name)
)
_OFF = {"", "0", "off", "none", "no", "false"}
_log = logging.getLogger("tb_monitor")
_installed: StackDumps | None = None
#: Where the pulse thread reads the rank's step progress (``RankHealth.progress``), if anywhere.
_progress: Callable[[], Progress] | None = None
_PR_SET_PTRACER = 0x59616D61  # prctl(2): Yama's "this process may trace me"


@dataclass(frozen=True)
class Progress:
    """A rank's step progress as its pulse carries it: what the agent's stall rule reads."""

    steps: int  # step boundaries so far
    last_step: float  # wall time of the last one (of the install, before the first)
    typical_s: float  # the typical step's seconds (0: none yet)
    #: Wall time of its last progress of any kind (a batch, a collective left, a step; the
    #: present while it saves a checkpoint: ``rank.progress_marks``). None: not known.
    last_progress: float | None = None
    #: Wall time it entered the collective it is inside (None: in none, or not known): before
    #: the first step, what tells a rank waiting for a hung one from a slow start.
    in_collective_since: float | None = None

    def to_bytes(self) -> bytes:
        values = {
            "steps": self.steps,
            "last_step": self.last_step,
            "typical_s": self.typical_s,
            "last_progress": self.last_progress,
            "in_collective_since": self.in_collective_since,
        }
        return json.dumps(values).encode()


def progress_from(source: Callable[[], Progress] | None) -> None:
    """Let the pulse carry the progress ``source`` gives (None: no more progress)."""
    global _progress
    _progress = source


def read_pulse(path: str) -> Progress | None:
    """The progress a worker's pulse file holds; None when it holds none (no rank health, or
    read while rewritten: the next look reads it)."""
    try:
        with open(path, "rb") as pulse:
            values = json.loads(pulse.read(4096))
        last, inside = values.get("last_progress"), values.get("in_collective_since")
        return Progress(
            int(values["steps"]),
            float(values["last_step"]),
            float(values["typical_s"]),
            None if last is None else float(last),
            None if inside is None else float(inside),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stack_signal(environ: Mapping[str, str] | None = None) -> int | None:
    """The signal number ``$TB_MONITOR_STACKS_SIGNAL`` names (``SIGRTMIN+3``, ``SIGUSR2``,
    ``USR2``, ``40``), None when it says ``off``; a name that is no signal is a ValueError."""
    env = os.environ if environ is None else environ
    text = env.get(contract.STACKS_SIGNAL_ENV, DEFAULT_SIGNAL).strip()
    if text.lower() in _OFF:
        return None
    name = text.upper()
    name = name if name.startswith("SIG") or name.isdecimal() else "SIG" + name
    base, _, offset = name.partition("+")
    try:
        number = int(name) if name.isdecimal() else int(getattr(signal, base)) + int(offset or 0)
    except (AttributeError, TypeError, ValueError):
        number = 0
    if not 0 < number < signal.NSIG or number in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError(
            f"${contract.STACKS_SIGNAL_ENV}={text!r} names no signal; "
            f"expected e.g. {DEFAULT_SIGNAL}, SIGUSR2, a number, or off"
        )
    return number


def ends_by_default(signum: int) -> bool:
    """Whether ``signum``'s default action ends (or stops) the process: such a signal, sent
    when no handler is registered, would kill the worker."""
    return signum not in _IGNORED_BY_DEFAULT


def stacks_path(directory: str, pid: int) -> str:
    """Where the worker with ``pid`` dumps its stacks."""
    return os.path.join(directory, f"{pid}.stacks")


def exited_path(directory: str, pid: int) -> str:
    """Where the worker with ``pid``, exiting, leaves the stacks it dumped (not yet recorded,
    maybe): the agent reads it, and signals only a worker whose ``stacks_path`` exists."""
    return stacks_path(directory, pid) + ".exited"


def pulse_path(directory: str, pid: int) -> str:
    """The file the worker with ``pid`` touches while its Python threads run."""
    return os.path.join(directory, f"{pid}.pulse")


class StackDumps:
    """faulthandler on ``signum`` into ``stacks_path(directory, pid)``, and the pulse thread."""

    def __init__(self, directory: str, signum: int, pulse_s: float) -> None:
        self._pid = os.getpid()
        self.path = stacks_path(directory, self._pid)
        self.pulse = pulse_path(directory, self._pid)
        self.signum = signum
        self._pulse_s = pulse_s
        self._stop = threading.Event()
        self._file = self._pulse_fd = None

    def install(self) -> StackDumps:
        """Register the handler, then show the file under its name; start the pulse."""
        self._pulse_fd = os.open(self.pulse, os.O_WRONLY | os.O_CREAT, 0o600)
        staging = self.path + ".new"
        self._file = open(staging, "ab", buffering=0)  # noqa: SIM115 - faulthandler keeps its fd
        previous = signal.getsignal(self.signum)
        # chain=True re-raises into the previous disposition: a handler (Python's, or a C one,
        # which getsignal gives as None) keeps working, and SIG_IGN or an ignoring SIG_DFL
        # does nothing; a SIG_DFL that ends the process must not follow.
        chain = previous != signal.SIG_DFL or not ends_by_default(self.signum)
        faulthandler.register(self.signum, file=self._file, all_threads=True, chain=chain)
        os.replace(staging, self.path)
        # atexit runs before finalization unregisters the handler: withdraw while it is there.
        atexit.register(self.withdraw)
        threading.Thread(target=self._pulse, name="tb_monitor-stacks-pulse", daemon=True).start()
        return self

    def withdraw(self) -> None:
        """Leave the agent's watch: stop the pulse, move the stacks file aside (the agent signals
        only a worker whose stacks file exists, and still records a dump it holds), remove the
        pulse (a worker without one is not silent). Called at normal exit, while the handler is
        still there (finalization removes it)."""
        self._stop.set()
        if os.getpid() != self._pid:  # a fork's copy of the hook: the files are its parent's
            return
        with contextlib.suppress(OSError):  # gone already, or with its agent's directory
            if os.path.getsize(self.path):
                os.replace(self.path, exited_path(os.path.dirname(self.path), self._pid))
            else:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.unlink(self.pulse)

    def _pulse(self) -> None:
        while not self._stop.wait(self._pulse_s):
            try:
                self._beat(_progress)
            except (OSError, ValueError):  # the directory went with its agent: nothing to tell
                return

    def _beat(self, source: Callable[[], Progress] | None) -> None:
        """Rewrite the pulse with the progress (the write dates it), or touch it without."""
        try:
            content = None if source is None else source().to_bytes()
        except Exception:  # the rank health closing meanwhile: a pulse without progress
            content = None
        if content is None:
            os.utime(self._pulse_fd)
            return
        os.pwrite(self._pulse_fd, content, 0)
        os.ftruncate(self._pulse_fd, len(content))

    def close(self) -> None:
        """Withdraw from the watch, then unregister the handler."""
        self.withdraw()
        atexit.unregister(self.withdraw)
        faulthandler.unregister(self.signum)
        if self._file is not None:
            self._file.close()
            os.close(self._pulse_fd)


def install(environ: Mapping[str, str] | None = None) -> StackDumps | None:
    """Dump this worker's stacks on request when ``tb-monitor run`` asks for it (its agent set
    ``$TB_MONITOR_STACKS_DIR``); once per process. Never raises: a failure is one warning."""
    global _installed
    env = os.environ if environ is None else environ
    directory = env.get(contract.STACKS_DIR_ENV)
    if _installed is not None or not directory:
        return _installed
    try:
        signum = stack_signal(env)
        if signum is None:
            return None
        pulse_s = _env.seconds("TB_MONITOR_HEARTBEAT_S", 5.0)
        _installed = StackDumps(directory, signum, pulse_s).install()
        _permit_agent_tracing()
    except (OSError, ValueError, RuntimeError) as exc:
        _log.warning("tb_monitor: this worker cannot dump its stacks on request: %s", exc)
    return _installed


def _permit_agent_tracing() -> None:
    """Name the agent (this worker's parent) a permitted tracer, so that py-spy, its child,
    may read this process where Yama restricts ptrace to ancestors; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, os.getppid(), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux, or no prctl: py-spy may still be permitted
        pass
