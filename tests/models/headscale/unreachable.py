"""A Headscale that is not there: addresses that refuse, drop or never answer connections."""

from __future__ import annotations

import contextlib
import socket

UNREACHABLE_MODES = ("refuse", "blackhole", "silent")


def fill_accept_queue(port: int) -> list[socket.socket]:
    """Connect to a listening socket of backlog 0 until its accept queue holds an established connection (and one
    more waits): the kernel then drops every further SYN. The caller closes the sockets."""
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)
    extra = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    extra.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        extra.connect(("127.0.0.1", port))
    return [filler, extra]


class Unreachable:
    """An address on 127.0.0.1 where Headscale does not answer, as a lost or broken site looks from outside.

    - ``refuse``: a port bound but not listening (reserved, so nobody else takes it): connections are refused, as a
      host whose Headscale is down refuses them.
    - ``blackhole``: a listening socket whose accept queue is full and never drained: the kernel drops every SYN
      (``tcp_abort_on_overflow`` is 0 by default), so a connect hangs until its timeout, as an address whose
      cluster is gone drops packets.
    - ``silent``: connections are accepted by the kernel and never answered: the read timeout bounds them, as a
      hung server behind a load balancer does.
    Only loopback traffic; ``with Unreachable("blackhole") as down: ... down.url``.
    """

    def __init__(self, mode: str) -> None:
        if mode not in UNREACHABLE_MODES:
            raise ValueError(f"mode is one of {', '.join(UNREACHABLE_MODES)}, got {mode!r}")
        self.mode = mode
        self._sockets: list[socket.socket] = []
        self.url = ""

    def start(self) -> Unreachable:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        self._sockets.append(server)
        port = server.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        if self.mode == "silent":
            server.listen(64)
        elif self.mode == "blackhole":
            server.listen(0)
            self._fill(port)
        return self

    def _fill(self, port: int) -> None:
        self._sockets += fill_accept_queue(port)

    def stop(self) -> None:
        for sock in reversed(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()
        self._sockets.clear()

    def __enter__(self) -> Unreachable:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
