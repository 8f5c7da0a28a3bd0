"""The test servers' port picker: out of the kernel's ephemeral range, free for TCP and UDP, never given twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.free_ports import _bindable, _lab_ports, free_port


def test_a_port_held_by_a_udp_socket_alone_is_not_free() -> None:
    """Headscale's STUN listener is UDP: a TCP-only check handed out a port a UDP socket held."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        assert not _bindable(port)
    assert _bindable(port)


def test_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    ports = _lab_ports()
    if ports is None:
        pytest.skip("the kernel's ephemeral range starts too low (or is unknown): its own pick is used")
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = [free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(10000 <= port < low for port in picked), picked
