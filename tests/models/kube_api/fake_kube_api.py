"""A fake of the part of the Kubernetes API server the position recorder talks to, over real TLS: a CA and a
server certificate made with the openssl CLI (curl verifies them through CA_FILE), and PATCH of one ConfigMap with
authentication, authorization, content negotiation and validation as strict as the real server's. Used by the
recorder's tests and by bench/position_record.py."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

NAMESPACE, NAME = "headscale", "headscale-served"
CONFIG_MAP_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps/([^/]+)$")


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def make_certificates(directory: Path) -> Certificates:
    """A CA, and a server certificate it signs for IP 127.0.0.1 (subjectAltName IP:127.0.0.1), with the openssl CLI."""
    directory.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, capture_output=True, timeout=60, check=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=fake-kube-ca")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=fake-kube-apiserver")
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
    )  # fmt: skip
    return Certificates(directory / "ca.crt", directory / "server.crt", directory / "server.key")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes
    status: int


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class FakeKubeApi:
    """The part of the API server the recorder talks to: PATCH of one ConfigMap, with authentication (the token
    file's current content), authorization (the Role's resourceNames: only ``allowed``), content negotiation and
    validation as strict as the real one. ``down()`` closes the port (connection refused), ``up()`` reopens it."""

    certificates: Certificates
    token_file: Path
    allowed: tuple[str, str] = (NAMESPACE, NAME)
    configmaps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    token_override: str | None = None  # when set, the only token accepted (to make the file's token wrong)
    port: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def create(self, namespace: str = NAMESPACE, name: str = NAME, data: dict[str, str] | None = None) -> None:
        with self.lock:
            self.configmaps[namespace, name] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": dict(data or {}),
            }

    def data(self, namespace: str = NAMESPACE, name: str = NAME) -> dict[str, str] | None:
        with self.lock:
            configmap = self.configmaps.get((namespace, name))
            return None if configmap is None else dict(configmap.get("data") or {})

    def stored(self, key: str = "position") -> str | None:
        return (self.data() or {}).get(key)

    def patches(self, status: int | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.method == "PATCH" and (status is None or r.status == status)]

    def up(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_PATCH(self) -> None:
                fake.handle(self)

            def do_GET(self) -> None:
                fake.handle(self)

            def do_POST(self) -> None:
                fake.handle(self)

            def do_PUT(self) -> None:
                fake.handle(self)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gives up (curl's timeout, a refused handshake) is not the test's concern

        server = Server(("127.0.0.1", self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificates.cert, self.certificates.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(timeout=5)
            self._server = None

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self.lock:  # the request is on record as soon as its effect is
            status, answer = self.answer(handler.command, split.path, handler.headers, body)
            self.requests.append(
                Request(
                    handler.command,
                    split.path,
                    parse_qs(split.query),
                    {name.lower(): value for name, value in handler.headers.items()},
                    body,
                    status,
                )
            )
        payload = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        def status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
            return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                          "reason": reason, "code": code}  # fmt: skip

        expected = self.token_override if self.token_override is not None else self.token_file.read_text()
        if headers.get("Authorization") != f"Bearer {expected}":
            return status(401, "Unauthorized", "Unauthorized")
        match = CONFIG_MAP_PATH.match(path)
        if match is None:
            return status(404, "NotFound", "the server could not find the requested resource")
        namespace, name = match.groups()
        if method != "PATCH":
            return status(405, "MethodNotAllowed", "this fake API server serves PATCH only")
        if (namespace, name) != self.allowed:
            return status(
                403,
                "Forbidden",
                f'configmaps "{name}" is forbidden: User "system:serviceaccount:{NAMESPACE}:recorder" cannot '
                f'patch resource "configmaps" in API group "" in the namespace "{namespace}"',
            )
        if headers.get("Content-Type") != "application/merge-patch+json":
            return status(415, "UnsupportedMediaType", "the body of the request was in an unknown format")
        try:
            patch = json.loads(body)
        except ValueError:
            return status(400, "BadRequest", "error decoding patch")
        if not isinstance(patch, dict):
            return status(400, "BadRequest", "the patch is not a JSON object")
        with self.lock:
            configmap = self.configmaps.get((namespace, name))
            if configmap is None:
                return status(404, "NotFound", f'configmaps "{name}" not found')
            patched = merge_patch(configmap, patch)
            data = patched.get("data") or {}
            if not isinstance(data, dict) or not all(isinstance(value, str) for value in data.values()):
                return status(422, "Invalid", "data values must be strings")
            self.configmaps[namespace, name] = patched
            return 200, patched
