"""Control groups of our own for tests and benchmarks: a process held to a CPU quota, a memory
limit or the freezer from outside, as a machine or a scheduler would hold it.

``Cgroup(controller)`` makes a fresh group (``tbm-test-<uuid>``) in cgroup v2's unified
hierarchy where ``/sys/fs/cgroup`` is one, else under v1's ``/sys/fs/cgroup/<controller>``;
``set`` writes a setting under its v1 or its v2 name, ``remove`` moves every process back to the
parent group and removes the group. ``in_cgroup(controller, pid)`` moves ``pid`` (every thread
of it) in, and removes the group only when something fails (the fault campaign's faults outlive
it); ``limit_cpu(group)`` holds a ``cpu`` group to a CPU quota. All need root:
``cgroups_usable()`` says why not (a campaign case skips with it, or fails in CI).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "V2",
    "Cgroup",
    "cgroups_usable",
    "in_cgroup",
    "limit_cpu",
]

ROOT = Path("/sys/fs/cgroup")
#: The unified (v2) hierarchy is mounted at ROOT; else v1's, one per controller under it.
V2 = (ROOT / "cgroup.controllers").exists()


def cgroups_usable() -> str | None:
    """Why control groups cannot be used here (not root, no hierarchy), or None when they can."""
    if os.geteuid() != 0:
        return "control groups need root"
    if not V2 and not (ROOT / "cpu").is_dir():
        return f"no cgroup hierarchy under {ROOT}"
    return None


@dataclass
class Cgroup:
    """A control group of our own for one controller (``cpu``, ``memory``, ``freezer``)."""

    controller: str
    path: Path = field(init=False)

    def __post_init__(self) -> None:
        base = ROOT if V2 else ROOT / self.controller
        self.path = base / f"tbm-test-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()

    def add(self, pid: int) -> None:
        """Move process ``pid`` (every thread of it) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def set(self, v1_file: str, v1_value: str, v2_file: str, v2_value: str) -> None:
        """Write a setting, under its v1 or its v2 name."""
        name, value = (v2_file, v2_value) if V2 else (v1_file, v1_value)
        (self.path / name).write_text(value)

    def remove(self) -> None:
        """Thaw, move every process back to the parent group, and remove the group."""
        with contextlib.suppress(OSError):
            if self.controller == "freezer":
                self.set("freezer.state", "THAWED", "cgroup.freeze", "0")
        parent = self.path.parent / "cgroup.procs"
        for _ in range(50):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    parent.write_text(pid)
            with contextlib.suppress(OSError):
                self.path.rmdir()
                return
            time.sleep(0.1)


@contextlib.contextmanager
def in_cgroup(controller: str, pid: int) -> Iterator[Cgroup]:
    """``pid`` moved into a fresh group of ``controller``; the group is removed only when the
    body raises (else the caller removes it, once the fault it holds is over)."""
    group = Cgroup(controller)
    try:
        group.add(pid)
        yield group
    except BaseException:
        group.remove()
        raise


def limit_cpu(group: Cgroup, quota_us: int = 10_000, period_us: int = 100_000) -> None:
    """Hold ``group`` (a ``cpu`` one) to ``quota_us`` of CPU time per ``period_us``."""
    both = f"{quota_us} {period_us}"
    group.set("cpu.cfs_period_us", str(period_us), "cpu.max", both)
    if not V2:
        group.set("cpu.cfs_quota_us", str(quota_us), "cpu.max", both)
