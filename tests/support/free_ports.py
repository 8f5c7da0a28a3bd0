"""Loopback ports for the servers the tests start (the lab's control planes, Headscale, Prometheus, PostgreSQL).

One picker for all of them: each server binds its port some time after the pick, so a port must be free for TCP
and UDP alike, never handed out twice in a run, and out of reach of the kernel's own picks for other sockets.
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

_PORTS_GIVEN: set[int] = set()


def _lab_ports() -> range | None:
    """Ports below the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), or None when it starts too low.

    Outgoing connections and unconnected UDP sockets (a DNS lookup) get their local port from the ephemeral range,
    so a port picked there can be taken by one of them between the pick and the server's bind. Headscale opens its
    STUN listener (UDP) in a goroutine that exits the process when the bind fails, and the lab's kubelet had no
    eye on a Headscale that exits after it started: its pod could stay Ready with nothing behind it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(10000, low) if low > 12000 else None


def _bindable(port: int) -> bool:
    """Free for a TCP listener and a UDP socket alike on 127.0.0.1 (a server of the lab may use either)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with contextlib.closing(socket.socket(socket.AF_INET, kind)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 now for TCP and UDP, outside the ephemeral range when the kernel's range allows
    (:func:`_lab_ports`), and never one handed out before (the lab binds its ports later, and the kernel offers a
    port it just released again)."""
    ports = _lab_ports()
    while True:
        if ports is None:
            with contextlib.closing(socket.socket()) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
        else:
            port = random.choice(ports)
        if port not in _PORTS_GIVEN and _bindable(port):
            _PORTS_GIVEN.add(port)
            return port
