"""How long this process's threads waited for a CPU: what names a rank starved of CPU.

A rank held back by its CPU (a cgroup's quota, a core shared with a noisy neighbour) is slow in
everything it does, gloo's own work inside the collectives included, so its *compute* (step
time minus wait) need not stand out while the whole job waits for it. The rank knows, though:
the kernel counts, per thread, the time it ran and the time it was runnable but not running
(``/proc/self/task/<tid>/schedstat``: the first two fields, in ns). A task of a cgroup that
CFS bandwidth throttles stays queued, so throttling lands in that wait too; where the kernel
does not count it so, the rank's own cgroup's ``cpu.stat`` (``throttled_usec`` in cgroup v2,
``throttled_time`` in ns in v1's cpu controller) says how long the group was held.

:class:`CpuWait` is read once per rank-health window, by the timer thread at the window's end
(``RankHealth``), never per step: one directory listing and one small read per thread, the
cgroup's file, and deltas since the last read. Linux only: where ``/proc/self/task`` cannot be
read, ``read()`` answers ``{}`` and nothing is recorded.
"""

from __future__ import annotations

import os
import threading

from tb_monitor import contract

__all__ = ["CpuWait", "cgroup_throttled_s", "thread_times_ns"]

_TASKS = "/proc/self/task"
_CGROUP_ROOT = "/sys/fs/cgroup"
#: Where cgroup v1's cpu controller may be mounted, under _CGROUP_ROOT.
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
#: cpu.stat keys of the time a group was throttled, and their unit in seconds.
_THROTTLED_KEYS = {"throttled_usec": 1e-6, "throttled_time": 1e-9}

_WAIT = contract.stat_tag(contract.RANK_CPU_WAIT, "sum")
_RUN = contract.stat_tag(contract.RANK_CPU_RUN, "sum")
_THROTTLED = contract.stat_tag(contract.RANK_CPU_THROTTLED, "sum")


def thread_times_ns(tasks: str = _TASKS) -> dict[int, tuple[int, int]] | None:
    """Per thread of the process, (ns on a CPU, ns runnable waiting for one); None where
    ``tasks`` cannot be listed (not Linux). A thread that ends meanwhile is left out."""
    try:
        tids = os.listdir(tasks)
    except OSError:
        return None
    out = {}
    for tid in tids:
        try:
            with open(f"{tasks}/{tid}/schedstat", "rb") as file:
                ran, waited = file.read().split()[:2]
            out[int(tid)] = (int(ran), int(waited))
        except (OSError, ValueError):
            continue
    return out


def _cpu_stat_path(cgroup_file: str = "/proc/self/cgroup") -> str | None:
    """The ``cpu.stat`` of this process's own cgroup that holds its CPU bandwidth: cgroup v2's
    unified one, else v1's cpu controller's; None where neither is found."""
    try:
        with open(cgroup_file) as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        path = path.lstrip("/")
        if not controllers:
            candidates = [os.path.join(_CGROUP_ROOT, path, "cpu.stat")]
        elif "cpu" in controllers.split(","):
            candidates = [os.path.join(_CGROUP_ROOT, d, path, "cpu.stat") for d in _V1_CPU_DIRS]
        else:
            continue
        for candidate in candidates:
            if os.path.exists(candidate):
                return candidate
    return None


def cgroup_throttled_s(path: str) -> float | None:
    """Seconds the cgroup whose ``cpu.stat`` is ``path`` was throttled so far; None where the
    file cannot be read or says nothing of it (a root cgroup, no bandwidth control)."""
    try:
        with open(path) as file:
            for line in file:
                key, _, value = line.partition(" ")
                if key in _THROTTLED_KEYS:
                    return int(value) * _THROTTLED_KEYS[key]
    except (OSError, ValueError):
        pass
    return None


class CpuWait:
    """Per call of :meth:`read`, what this process's threads did since the call before: seconds
    on a CPU and waiting for one, and its cgroup's throttled seconds, as scalar tags."""

    def __init__(self, tasks: str = _TASKS, cgroup_file: str = "/proc/self/cgroup") -> None:
        self._tasks, self._cgroup_file = tasks, cgroup_file
        self._lock = threading.Lock()  # the timer thread, and close() on the caller's
        self._threads: dict[int, tuple[int, int]] | None = None  # None: no baseline yet
        self._throttled: tuple[str, float] | None = None  # (cpu.stat path, seconds then)
        self._off = False
        self.read()  # the baseline: what came before it is not this recorder's

    def read(self) -> dict[str, float]:
        """``{tag: seconds}`` since the last read (``rank/cpu_wait_s.sum``, ``cpu_run_s``, and
        ``cpu_throttled_s`` where the cgroup says); ``{}`` on the first read after a fork, and
        off Linux. Never raises."""
        with self._lock:
            try:
                return self._read()
            except Exception:  # telemetry never breaks training: this rank records no CPU wait
                self._off = True
                return {}

    def _read(self) -> dict[str, float]:
        if self._off:
            return {}
        now = thread_times_ns(self._tasks)
        if now is None:
            self._off = True
            return {}
        before, self._threads = self._threads, now
        throttled = self._read_throttled()
        if before is None:
            return {}
        ran = waited = 0
        for tid, (ran_ns, waited_ns) in now.items():
            ran0, waited0 = before.get(tid, (0, 0))  # a new thread: all of its life is new
            ran += max(0, ran_ns - ran0)
            waited += max(0, waited_ns - waited0)
        out = {_WAIT: waited / 1e9, _RUN: ran / 1e9}
        if throttled is not None:
            out[_THROTTLED] = throttled
        return out

    def _read_throttled(self) -> float | None:
        """The cgroup's throttled seconds since the last read; None where it cannot say, or
        its cgroup changed since (the process was moved)."""
        path = _cpu_stat_path(self._cgroup_file)
        seconds = None if path is None else cgroup_throttled_s(path)
        before, self._throttled = self._throttled, None if seconds is None else (path, seconds)
        if seconds is None or before is None or before[0] != path:
            return None
        return max(0.0, seconds - before[1])

    def forget(self) -> None:
        """In a forked child: the parent's threads are not the child's; the next read is its
        baseline."""
        self._lock = threading.Lock()
        self._threads = self._throttled = None
