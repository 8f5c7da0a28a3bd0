"""The fake Headscale server: :class:`FakeHeadscale`, the registry and its operations served over HTTP.

Its lifecycle (start, stop, going dark and coming back, restarting as another release), fault injection, the record
of every exchange and its check against the release's swagger, and the request path in front of the operations:
``/health`` and ``/version``, the API key check, routing and decoding (:mod:`.gateway`), then the ``_op_`` method
of the route's operation family (:mod:`.users`, :mod:`.keys`, :mod:`.nodes`, :mod:`.policy`).
"""

from __future__ import annotations

import contextlib
import copy
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from http.server import ThreadingHTTPServer
from typing import Any

from tests.models.headscale.gateway import Call, Response, decode_call, match_route, routes_for
from tests.models.headscale.handler import HttpServer, RequestHandler
from tests.models.headscale.keys import ApiKeyOperations, PreAuthKeyOperations
from tests.models.headscale.nodes import NodeOperations, RegistrationOperations
from tests.models.headscale.policy import PolicyOperations
from tests.models.headscale.state import (
    API_KEY_PREFIX,
    FAULT_KINDS,
    KEY_PREFIX_LENGTH,
    KEY_SECRET_LENGTH,
    Fault,
    RecordedRequest,
    hash_secret,
)
from tests.models.headscale.unreachable import fill_accept_queue
from tests.models.headscale.users import UserOperations
from tests.models.headscale.wire import GrpcError
from tests.models.swagger.swagger_contract import SwaggerContract, find_swagger, normalize_version

SUPPORTED_VERSIONS = ("0.28.0", "0.29.2")
_VERSION_INFO = {
    "0.28.0": ("1f3d6b8e0c2a4e6f8091a2b3c4d5e6f708192a3b", "2026-02-03T10:21:44Z", "go1.25.5"),
    "0.29.2": ("7a9c1e3f5b7d9f1a3c5e7091b2d4f6a8c0e2a4b6", "2026-06-17T08:02:11Z", "go1.26.1"),
}


class FakeHeadscale(
    UserOperations,
    ApiKeyOperations,
    PreAuthKeyOperations,
    NodeOperations,
    RegistrationOperations,
    PolicyOperations,
):
    """A stateful Headscale REST server on 127.0.0.1, faithful to one release's swagger and quirks."""

    def __init__(
        self,
        *,
        version: str = "0.29.2",
        policy_mode: str = "database",
        now: Callable[[], datetime] | None = None,
        reported_version: str | None = None,
    ) -> None:
        """``reported_version`` plays a server of another release at ``GET /version`` only (``"v0.30.0"``;
        ``""`` for a release without that endpoint, 0.26 and older); the API stays that of ``version``."""
        version = normalize_version(version)
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported Headscale version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})")
        if policy_mode not in {"database", "file"}:
            raise ValueError("policy_mode is 'database' or 'file'")
        super().__init__(policy_mode=policy_mode, now=now)
        self.version = version
        self.minor = ".".join(version.split(".")[:2])
        self.reported_version = reported_version
        self.requests: list[RecordedRequest] = []
        self.contract_violations: list[str] = []
        self._record_lock = threading.Lock()
        self._faults: list[Fault] = []
        self._routes = routes_for(self.minor)
        self.contract: SwaggerContract | None = None
        self.contract_note: str | None = None
        swagger = find_swagger(version)
        if swagger is None:
            self.contract_note = f"swagger for {version} not found under ../shared: contract checks are off"
        else:
            self.contract = SwaggerContract(swagger, version=version)
        self.url = ""
        self.admin_key = ""
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()
        self._held: list[socket.socket] = []  # while dark: the port kept (first), and a blackhole's fillers

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeHeadscale:
        """Serve on 127.0.0.1 (``port`` 0: any free port; else that one, as ``come_back`` does)."""
        if self._server is not None:
            return self
        if not self.admin_key:
            self.admin_key = self.add_api_key(expiration=self.now + timedelta(days=90))
        self._stopping.clear()
        server = HttpServer(("127.0.0.1", port), RequestHandler)
        server.fake = self
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-headscale", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, drop open (keep-alive) connections and wait for every handler thread."""
        self._release_port()
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._record_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._record_lock:
                threads = [t for t in self._handler_threads if t is not threading.current_thread()]
            if not threads:
                break
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
                with self._record_lock:
                    self._handler_threads.discard(thread)

    @property
    def dark(self) -> bool:
        """True between ``go_dark`` and ``come_back``: the URL refuses connections."""
        return bool(self._held)

    def go_dark(self, mode: str = "refuse") -> None:
        """The host is gone: stop serving and keep the port (no other process takes it) until ``come_back``; the
        registry is kept. ``mode`` as :class:`Unreachable`'s: ``refuse`` (bound, not listening: connections are
        refused, a host that is up without Headscale) or ``blackhole`` (a full accept queue: every SYN is dropped
        and a connect hangs until its timeout, an address whose cluster is gone)."""
        if mode not in ("refuse", "blackhole"):
            raise ValueError(f"mode is refuse or blackhole, got {mode!r}")
        if self._held:
            return
        port = int(self.url.rsplit(":", 1)[1])
        self.stop()
        hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hold.bind(("127.0.0.1", port))
        self._held = [hold]
        if mode == "blackhole":
            hold.listen(0)
            self._held += fill_accept_queue(port)

    def come_back(self) -> None:
        """Serve again at the same URL (the registry as it was)."""
        if not self._held:
            return
        port = self._held[0].getsockname()[1]
        self._release_port()
        self.start(port=port)

    def _release_port(self) -> None:
        for sock in reversed(self._held):
            with contextlib.suppress(OSError):
                sock.close()
        self._held = []

    def restart_as(self, version: str) -> None:
        """Headscale restarted on another release with the same database: the registry is kept, the API (routes,
        contract, policy dialect, ``/version``) becomes that release's. An upgrade is this plus the migration,
        which the fake's registry does not need."""
        version = normalize_version(version)
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"unsupported Headscale version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})")
        with self.lock:
            self.version = version
            self.minor = ".".join(version.split(".")[:2])
            self._routes = routes_for(self.minor)
            swagger = find_swagger(version)
            self.contract = None if swagger is None else SwaggerContract(swagger, version=version)

    #: What serving needs rather than what the server holds (its registry, release, records and faults): kept as it
    #: is when a saved state is put back. The release's routes and contract follow ``version`` (``restart_as``).
    _NOT_SAVED = frozenset(
        {
            "lock",
            "_record_lock",
            "_clock",
            "_server",
            "_thread",
            "_stopping",
            "_connections",
            "_handler_threads",
            "_held",
            "url",
            "minor",
            "_routes",
            "contract",
            "contract_note",
        }
    )

    def saved(self) -> dict[str, Any]:
        """Everything the server holds, to put back with ``restore``."""
        with self.lock, self._record_lock:
            return copy.deepcopy({key: value for key, value in vars(self).items() if key not in self._NOT_SAVED})

    def restore(self, saved: dict[str, Any]) -> None:
        """Back to ``saved``, serving at the same URL: as a server that held exactly that and was never called
        since (a lab deployed once puts its fake back before each test, tests/models/engine/lifecycle.py)."""
        self.come_back()
        if self._server is None:
            self.start(port=int(self.url.rsplit(":", 1)[1]))
        if saved["version"] != self.version:
            self.restart_as(saved["version"])
        with self.lock, self._record_lock:
            vars(self).update(copy.deepcopy(saved))

    def __enter__(self) -> FakeHeadscale:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- faults and records -----------------------------------------------------------------------------------

    def inject(
        self,
        *,
        path: str = ".*",
        method: str | None = None,
        kind: str,
        status: int = 503,
        times: int = 1,
        delay: float = 0.0,
        after_apply: bool = False,
    ) -> None:
        """Make the next ``times`` requests matching ``method`` and ``path`` (a regex, full match on the URL path)
        fail with ``kind``; ``times=-1`` keeps the fault forever. ``after_apply`` performs the real request
        first and then fails the response, like a write that happened although the client saw an error."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})")
        if times == 0 or times < -1:
            raise ValueError("times is a positive count, or -1 for every matching request")
        fault = Fault(kind, re.compile(path), method.upper() if method else None, status, times, delay, after_apply)
        with self._record_lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._record_lock:
            self._faults.clear()

    def reset_requests(self) -> None:
        with self._record_lock:
            self.requests.clear()

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._record_lock:
            for fault in self._faults:
                if fault.method not in (None, method) or not fault.path.fullmatch(path):
                    continue
                if fault.remaining > 0:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                return fault
        return None

    def _record(self, entry: RecordedRequest, problems: list[str]) -> None:
        with self._record_lock:
            self.requests.append(entry)
            self.contract_violations.extend(problems)

    # -- HTTP -------------------------------------------------------------------------------------------------

    def _authorized(self, header: str | None) -> bool:
        """The auth middleware: exact ``Bearer `` prefix, a known 0.28+ key, not expired."""
        if not header or not header.startswith("Bearer "):
            return False
        rest = header[len("Bearer ") :].removeprefix(API_KEY_PREFIX)
        if rest == header[len("Bearer ") :] or len(rest) != KEY_PREFIX_LENGTH + 1 + KEY_SECRET_LENGTH:
            return False
        prefix, separator, secret = rest[:KEY_PREFIX_LENGTH], rest[KEY_PREFIX_LENGTH], rest[KEY_PREFIX_LENGTH + 1 :]
        if separator != "-":
            return False
        with self.lock:
            for key in self.api_keys.values():
                if key.prefix == prefix and secrets.compare_digest(key.secret_hash, hash_secret(secret)):
                    return key.expiration is None or key.expiration >= self.now
        return False

    def _respond(self, method: str, path: str, raw_query: str, auth: str | None, raw_body: bytes) -> Response:
        if path == "/health" and method == "GET":
            return Response(200, "application/health+json", b'{"status":"pass"}', {"status": "pass"})
        if path == "/version" and method == "GET":
            if self.reported_version == "":
                return Response.text(404, "404 page not found\n")
            commit, built, go = _VERSION_INFO[self.version]
            info = {
                "version": self.reported_version or f"v{self.version}",
                "commit": commit,
                "buildTime": built,
                "go": {"version": go, "os": "linux", "arch": "amd64"},
                "dirty": False,
            }
            return Response.json(200, info)
        if not path.startswith("/api/v1/"):
            return Response.text(404, "404 page not found\n")
        if not self._authorized(auth):
            return Response.text(401, "Unauthorized")
        try:
            routed = match_route(self._routes, method, path)
            if isinstance(routed, GrpcError):
                raise routed
            route, path_params = routed
            call = decode_call(route, path_params, raw_query, raw_body, minor=self.minor)
            with self.lock:
                result = getattr(self, f"_op_{route.handler}")(call)
            return Response.json(200, result)
        except GrpcError as exc:
            return Response.json(exc.http_status, exc.body())

    def _op_health(self, call: Call) -> dict[str, Any]:
        return {"databaseConnectivity": True}

    # -- exchange bookkeeping ---------------------------------------------------------------------------------

    def _contract_problems(
        self, method: str, path: str, query: dict[str, str | list[str]], body: Any, response: Response
    ) -> list[str]:
        if self.contract is None or not path.startswith("/api/v1/"):
            return []
        problems = self.contract.request_problems(method, path, query, body)
        problems += self.contract.response_problems(method, path, response.status, response.value)
        where = f"{method} {path}"
        return [problem if problem.startswith(where) else f"{where}: {problem}" for problem in problems]
