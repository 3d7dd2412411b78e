"""Two hosts on one machine, joined by a link of their own that a test can cut: a network partition.

``two_hosts()`` yields ``Hosts``: host 0 is the root network namespace, host 1 a namespace of its
own (``tbm-<uuid>``), joined by a veth pair with the address pair 10.213.X.1 / 10.213.X.2 (X
chosen at random among the subnets no interface here uses, so jobs can run side by side).
``Hosts.command(node, argv)`` runs ``argv`` on a host (host 1's in its namespace, under a
hostname of its own: ``unshare --uts``); ``Hosts.cut()`` makes the partition: each end's
egress queue is a FIFO of length zero, so every packet either way is dropped without a word (no
RST, no unreachable error: a connection times out, as across a dead switch; a ``down`` link
would answer "network unreachable" at once instead). ``heal()`` undoes it. The namespace and
the veth pair are removed at the end, whatever happened. Needs root (``netns_usable``).

The filesystem stays shared: both hosts see one logdir, as on a shared volume.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Hosts", "netns_usable", "two_hosts"]

PREFIX = "10.213"


def netns_usable() -> str | None:
    """Why two hosts cannot be made here (not root, no ``ip``/``tc``), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    return f"no {', '.join(missing)} on PATH" if missing else None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _free_subnet() -> int:
    """An X whose 10.213.X.0/24 no interface or route here uses."""
    used = subprocess.run(
        ["sh", "-c", "ip -4 -o addr; ip -4 route"], capture_output=True, text=True, check=True
    ).stdout
    free = [x for x in range(1, 255) if f"{PREFIX}.{x}." not in used]
    if not free:
        raise RuntimeError(f"every {PREFIX}.X.0/24 is in use here")
    return random.choice(free)


@dataclass(frozen=True)
class Hosts:
    """Host 0 (the root namespace) and host 1 (``namespace``), one veth end each."""

    namespace: str
    links: tuple[str, str]  # the veth ends, host 0's and host 1's
    addresses: tuple[str, str]

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run on host ``node`` (the same process: each wrapper execs the next)."""
        if node == 0:
            return list(argv)
        rename = 'hostname "$0" && exec "$@"'
        hostname = f"{self.namespace}-host1"
        inside = ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "--"]
        return [*inside, "sh", "-c", rename, hostname, *argv]

    def env(self, node: int) -> dict[str, str]:
        """What a job's processes on host ``node`` need to talk over the link (gloo's device)."""
        return {"GLOO_SOCKET_IFNAME": self.links[node]}

    def cut(self) -> None:
        """Drop every packet either way from now on, silently."""
        for node in (0, 1):
            self._tc(node, "replace", "pfifo", "limit", "0")

    def heal(self) -> None:
        """Let packets through again."""
        for node in (0, 1):
            with contextlib.suppress(subprocess.CalledProcessError):
                self._tc(node, "del")

    def _tc(self, node: int, verb: str, *qdisc: str) -> None:
        where = ["ip", "netns", "exec", self.namespace] if node == 1 else []
        subprocess.run(
            [*where, "tc", "qdisc", verb, "dev", self.links[node], "root", *qdisc],
            check=True,
            capture_output=True,
        )


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts]:
    """Two hosts joined by a veth pair (see the module), removed at the end whatever happened."""
    tag = uuid.uuid4().hex[:8]
    subnet = _free_subnet()
    hosts = Hosts(
        f"tbm-{tag}",
        (f"tbm{tag}a", f"tbm{tag}b"),
        (f"{PREFIX}.{subnet}.1", f"{PREFIX}.{subnet}.2"),
    )
    try:
        _ip("netns", "add", hosts.namespace)
        _ip("link", "add", hosts.links[0], "type", "veth", "peer", "name", hosts.links[1])
        _ip("link", "set", hosts.links[1], "netns", hosts.namespace)
        _ip("addr", "add", f"{hosts.addresses[0]}/24", "dev", hosts.links[0])
        _ip("link", "set", hosts.links[0], "up")
        inside = ("-n", hosts.namespace)
        _ip(*inside, "addr", "add", f"{hosts.addresses[1]}/24", "dev", hosts.links[1])
        _ip(*inside, "link", "set", hosts.links[1], "up")
        _ip(*inside, "link", "set", "lo", "up")
        yield hosts
    finally:
        _remove(hosts)


def _remove(hosts: Hosts) -> None:
    """The veth pair (both ends go with either) and the namespace, each if it exists."""
    for args in (("link", "del", hosts.links[0]), ("netns", "del", hosts.namespace)):
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip(*args)
