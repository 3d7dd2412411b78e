"""Two hosts on one machine, joined by a switch of their own that a test can cut: a network partition.

``two_hosts()`` yields ``Hosts``: host 0 is the root network namespace, host 1 a namespace of its
own (``tbm-<uuid>``), each joined by a veth pair to a bridge in a third namespace, the switch
(``tbm-<uuid>-sw``), with the address pair 10.213.X.1 / 10.213.X.2 (X chosen at random among
the subnets no interface here uses, so jobs can run side by side). ``Hosts.command(node,
argv)`` runs ``argv`` on a host (host 1's in its namespace, under a hostname of its own:
``unshare --uts``); ``Hosts.cut()`` makes the partition in the switch: its two ports' egress
queues become FIFOs of length zero, so every packet either way is dropped there, past both
hosts' stacks. Neither host learns of it: no RST, no unreachable error, no failed send (a drop
in a host's own queue is one its TCP sees, and gives up on within seconds; a ``down`` link
answers "network unreachable" at once), and each host's entry for the other's address is
pinned, so no failed address resolution tells either. ``heal()`` undoes it. The namespaces and
veth pairs are removed at the end, whatever happened. Needs root (``netns_usable``).

The filesystem stays shared: both hosts see one logdir, as on a shared volume.
"""

from __future__ import annotations

import contextlib
import json
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
    """Host 0 (the root namespace) and host 1 (``namespace``), one veth end each, joined by a
    bridge in ``switch``."""

    namespace: str
    links: tuple[str, str]  # the veth ends, host 0's and host 1's
    addresses: tuple[str, str]
    switch: str  # the switch's namespace
    ports: tuple[str, str]  # the switch's veth ends, to host 0 and to host 1

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
        """Drop every packet either way in the switch from now on, silently."""
        for port in self.ports:
            self._tc(port, "replace", "pfifo", "limit", "0")

    def heal(self) -> None:
        """Let packets through again."""
        for port in self.ports:
            with contextlib.suppress(subprocess.CalledProcessError):
                self._tc(port, "del")

    def _tc(self, port: str, verb: str, *qdisc: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.switch, "tc", "qdisc", verb, "dev", port, "root", *qdisc],
            check=True,
            capture_output=True,
        )


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts]:
    """Two hosts joined by a switch (see the module), removed at the end whatever happened."""
    tag = uuid.uuid4().hex[:8]
    subnet = _free_subnet()
    hosts = Hosts(
        f"tbm-{tag}",
        (f"tbm{tag}a", f"tbm{tag}b"),
        (f"{PREFIX}.{subnet}.1", f"{PREFIX}.{subnet}.2"),
        f"tbm-{tag}-sw",
        (f"tbm{tag}s0", f"tbm{tag}s1"),
    )
    try:
        _switch(hosts)
        for node, where in ((0, ()), (1, ("-n", hosts.namespace))):
            _ip(*where, "addr", "add", f"{hosts.addresses[node]}/24", "dev", hosts.links[node])
            _ip(*where, "link", "set", hosts.links[node], "up")
        _ip("-n", hosts.namespace, "link", "set", "lo", "up")
        _pin_neighbours(hosts)
        yield hosts
    finally:
        _remove(hosts)


def _switch(hosts: Hosts) -> None:
    """The namespaces, a bridge in the switch's, and a veth pair from each host to it."""
    _ip("netns", "add", hosts.namespace)
    _ip("netns", "add", hosts.switch)
    bridge, inside = f"{hosts.ports[0][:-2]}br", ("-n", hosts.switch)
    _ip(*inside, "link", "add", bridge, "type", "bridge")
    _ip(*inside, "link", "set", bridge, "up")
    for node, host in ((0, None), (1, hosts.namespace)):
        _ip("link", "add", hosts.links[node], "type", "veth", "peer", "name", hosts.ports[node])
        _ip("link", "set", hosts.ports[node], "netns", hosts.switch)
        if host is not None:
            _ip("link", "set", hosts.links[node], "netns", host)
        _ip(*inside, "link", "set", hosts.ports[node], "master", bridge)
        _ip(*inside, "link", "set", hosts.ports[node], "up")


def _mac(link: str, *where: str) -> str:
    shown = subprocess.run(
        ["ip", *where, "-j", "link", "show", link], capture_output=True, text=True, check=True
    )
    return json.loads(shown.stdout)[0]["address"]


def _pin_neighbours(hosts: Hosts) -> None:
    """Each end's neighbour entry for the other fixed: a cut then drops only the traffic, and
    no failed address resolution tells either host that the other is unreachable (as across a
    routed network, where the gateway still answers)."""
    inside = ("-n", hosts.namespace)
    macs = (_mac(hosts.links[0]), _mac(hosts.links[1], *inside))
    _ip(
        "neigh",
        "replace",
        hosts.addresses[1],
        "lladdr",
        macs[1],
        "nud",
        "permanent",
        "dev",
        hosts.links[0],
    )
    _ip(
        *inside,
        "neigh",
        "replace",
        hosts.addresses[0],
        "lladdr",
        macs[0],
        "nud",
        "permanent",
        "dev",
        hosts.links[1],
    )


def _remove(hosts: Hosts) -> None:
    """The veth pairs (both ends go with either) and the namespaces, each if it exists."""
    for args in (
        ("link", "del", hosts.links[0]),
        ("-n", hosts.namespace, "link", "del", hosts.links[1]),
        ("netns", "del", hosts.namespace),
        ("netns", "del", hosts.switch),
    ):
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip(*args)
