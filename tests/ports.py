"""Ports for the suite's servers, chosen below Linux's ephemeral range.

A port the kernel hands out (``bind(("127.0.0.1", 0))``) lies in the ephemeral range, where every
outgoing connection on the machine also takes its source port: between choosing such a port and the
server binding it, a torchrun store or a TensorBoard client may take it. Ports below the range are
only ever taken by another server, and the suite's choose at random, so two rarely meet.
"""

from __future__ import annotations

import random
import socket

#: The lowest port of Linux's default ephemeral range (/proc/sys/net/ipv4/ip_local_port_range).
EPHEMERAL_START = 32768
LOWEST = 15000


def free_ports(count: int, offset: int = 0) -> list[int]:
    """``count`` distinct ports, each free on 127.0.0.1 together with port + ``offset``."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(1000):
            if len(ports) == count:
                return ports
            port = random.randrange(LOWEST, EPHEMERAL_START - offset)
            pair: list[socket.socket] = []
            try:
                for candidate in {port, port + offset}:
                    sock = socket.socket()
                    pair.append(sock)
                    sock.bind(("127.0.0.1", candidate))
            except OSError:
                for sock in pair:
                    sock.close()
                continue
            held += pair
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    raise RuntimeError(f"could not find {count} free ports in [{LOWEST}, {EPHEMERAL_START})")


def free_port() -> int:
    """One port free on 127.0.0.1 now, below the ephemeral range."""
    return free_ports(1)[0]
