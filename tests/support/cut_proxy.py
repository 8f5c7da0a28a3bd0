"""A TCP proxy in front of one server for one client, which a test can cut and mend: a network partition between
that client and that server only (others keep their own proxy, or the server itself).

It forwards bytes and nothing else (TLS passes through: the client still verifies the server's certificate).
``cut("blackhole")`` drops every open connection's traffic and accepts new ones without ever answering, as a
partition does (the client's own timeout decides); ``cut("refuse")`` closes every connection and each new one at
once (a server that is down); :meth:`mend` forwards again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.free_ports import free_port


class CutProxy(threading.Thread):
    """127.0.0.1:``port`` forwarded to 127.0.0.1:``target``, until :meth:`close`."""

    def __init__(self, target: int) -> None:
        super().__init__(name=f"cut-proxy-{target}", daemon=True)
        self.target = target
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.listener.settimeout(0.2)
        self.mode = "open"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def run(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._accept(client)

    def _accept(self, client: socket.socket) -> None:
        with self._lock:
            self._sockets.append(client)
            mode = self.mode
        if mode == "refuse":
            _close(client)
        elif mode == "open":
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()
        # blackhole: held open, never read nor answered, until mended or closed

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._sockets.append(upstream)
        threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
        self._pipe(client, upstream)

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.mode != "open":
                    break
                target.sendall(data)
        _close(source)
        _close(target)

    def cut(self, mode: str = "blackhole") -> None:
        """From now on the client reaches nothing: every open connection is dropped, new ones hang or are closed."""
        assert mode in ("blackhole", "refuse"), mode
        with self._lock:
            self.mode = mode
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def mend(self) -> None:
        """Forward again (connections held by a blackhole are dropped: the client's next try gets through)."""
        self.cut("refuse")
        with self._lock:
            self.mode = "open"

    def close(self) -> None:
        self._closed.set()
        self.cut("refuse")
        _close(self.listener)
        if self.is_alive():
            self.join(timeout=5)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
