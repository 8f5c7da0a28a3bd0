"""Each lab site's public ingress: TLS for the public hostname at the site's ``publicAddress``, in front of the
Headscale the site serves.

A site's public address is where the DNS record points while the site is active; its ingress terminates TLS with
the public certificate and forwards to Headscale's Service. Here the address is a loopback one (``127.0.0.x``,
set as the site's ``publicAddress`` in the lab's copy of Pulumi.yaml), port 443, with a certificate for the public
hostname from a CA of the lab's own (``REQUESTS_CA_BUNDLE`` names it to the provider). A connection is forwarded
to the Headscale the site's pod runner serves (tests/support/kube_lab_pods.py); with none serving it is closed, as
an ingress with no ready endpoint refuses. Nothing resolves the public hostname: a client that reaches the site
had to be pointed at its address.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

HTTPS_PORT = 443


def make_certificate(directory: Path, hostname: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for ``hostname`` signed by it (openssl): (ca.crt, server.crt, server.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    extensions = directory / "server.ext"
    extensions.write_text(f"subjectAltName = DNS:{hostname}\nextendedKeyUsage = serverAuth\n")
    commands = [
        ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
         "-subj", "/CN=headscale-ha lab CA", "-keyout", "ca.key", "-out", "ca.crt"],
        ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={hostname}",
         "-keyout", "server.key", "-out", "server.csr"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
         "-extfile", extensions.name, "-out", "server.crt"],
    ]  # fmt: skip
    for args in commands:
        subprocess.run(["openssl", *args], cwd=directory, capture_output=True, check=True)
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


class Ingress(threading.Thread):
    """TLS on ``address``:443, forwarded to ``backend()`` (a loopback port, or None: no ready endpoint)."""

    def __init__(self, address: str, certificate: Path, key: Path, backend: Callable[[], int | None]) -> None:
        super().__init__(name=f"ingress-{address}", daemon=True)
        self.address, self.backend = address, backend
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(certificate, key)
        self.listener = socket.create_server((address, HTTPS_PORT), reuse_port=False)
        self.listener.settimeout(0.3)
        #: The server name (SNI) of each TLS handshake: who came through, and as whom.
        self.handshakes: list[str | None] = []
        self.context.sni_callback = lambda _socket, name, _context: self.handshakes.append(name)
        self._halt = threading.Event()
        #: Each connection it could not forward, (time.monotonic(), why): what a failed run's story needs.
        self.refusals: list[tuple[float, str]] = []

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            client.settimeout(30)
            secured = self.context.wrap_socket(client, server_side=True)
            port = self.backend()
            if port is None:
                self.refusals.append((time.monotonic(), "no ready endpoint"))
                secured.close()
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError as exc:
                self.refusals.append((time.monotonic(), f"port {port}: {exc}"))
                raise
            threading.Thread(target=_pipe, args=(upstream, secured), daemon=True).start()
            _pipe(secured, upstream)

    def stop(self) -> None:
        """The site is gone: its address refuses connections from now on."""
        self._halt.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        if self.is_alive():
            self.join(timeout=5)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    for end in (source, target):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
