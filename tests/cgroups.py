"""A process held to a CPU quota from outside, in a cgroup of its own: what a noisy neighbour or
a scheduler's limit does to one rank. For tests and benchmarks (a fault campaign uses it too).

``cpu_limited(pid)`` makes a fresh cgroup (``tbm-test-<uuid>``), gives it a CPU quota, moves
``pid`` (every thread of it) in, and on the way out, whatever happened, moves it back where it
came from (if it still runs) and removes the cgroup. cgroup v2 where ``/sys/fs/cgroup`` is
cgroup2 and its ``cgroup.subtree_control`` enables ``cpu`` (``cpu.max``); else cgroup v1's cpu
controller at ``/sys/fs/cgroup/cpu`` (``cpu.cfs_quota_us``, ``cpu.cfs_period_us``), which hybrid
machines have where v2 holds no cpu controller. Both need root.
``cpu_limit_unavailable()`` says why neither can be used (a test skips with it, or fails in CI:
``conftest.need_cpu_limit``).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CpuLimit", "cpu_limit_unavailable", "cpu_limited"]

ROOT = Path("/sys/fs/cgroup")
V1_CPU = ROOT / "cpu"
_CGROUP2_MAGIC = "cgroup2"


class CpuLimit:
    """Where the quota is set: cgroup v2 (``cpu.max``) or v1's cpu controller."""

    def __init__(self, root: Path, v2: bool) -> None:
        self.root, self.v2 = root, v2

    def make(self, quota_us: int, period_us: int) -> Path:
        """A fresh cgroup under the root with the quota set."""
        group = self.root / f"tbm-test-{uuid.uuid4().hex[:12]}"
        group.mkdir()
        try:
            if self.v2:
                (group / "cpu.max").write_text(f"{quota_us} {period_us}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(period_us))
                (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        except OSError:
            group.rmdir()
            raise
        return group

    def group_of(self, pid: int) -> Path | None:
        """The cgroup (of this hierarchy) ``pid`` is in now; None when it has exited."""
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if (not controllers) if self.v2 else "cpu" in controllers.split(","):
                return self.root / path.lstrip("/")
        return None


def _is_cgroup2(path: Path) -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[1:3] == [str(path), _CGROUP2_MAGIC] for line in mounts)


def _limit() -> CpuLimit | str:
    """The hierarchy to use, or why there is none."""
    if os.geteuid() != 0:
        return "moving a process into a cgroup needs root"
    if _is_cgroup2(ROOT):
        enabled = (ROOT / "cgroup.subtree_control").read_text().split()
        if "cpu" in enabled:
            return CpuLimit(ROOT, v2=True)
        why = f"{ROOT} is cgroup2 but its cgroup.subtree_control enables no cpu controller"
    else:
        why = f"{ROOT} is not cgroup2"
    if (V1_CPU / "cpu.cfs_quota_us").exists() and os.access(V1_CPU, os.W_OK):
        return CpuLimit(V1_CPU, v2=False)
    return f"{why}, and no writable cgroup v1 cpu controller at {V1_CPU}"


def cpu_limit_unavailable() -> str | None:
    """Why no process can be held to a CPU quota here, or None when ``cpu_limited`` works."""
    found = _limit()
    return found if isinstance(found, str) else None


@contextlib.contextmanager
def cpu_limited(pid: int, quota_us: int = 10_000, period_us: int = 100_000) -> Iterator[Path]:
    """``pid`` held to ``quota_us`` of CPU time per ``period_us`` (default: 10% of one CPU) in a
    fresh cgroup, yielded; afterwards moved back (if it still runs) and the cgroup removed."""
    limit = _limit()
    if isinstance(limit, str):
        raise RuntimeError(limit)
    home = limit.group_of(pid)
    group = limit.make(quota_us, period_us)
    try:
        (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        if home is not None:
            with contextlib.suppress(OSError):  # it exited meanwhile
                (home / "cgroup.procs").write_text(str(pid))
        _remove(group)


def _remove(group: Path, timeout_s: float = 10.0) -> None:
    """Remove ``group`` once empty (a process exiting leaves it a moment later)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
