"""The HTTP side of the fake: the threading server, and the request handler that applies injected faults,
records every exchange and answers it."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from tests.models.headscale.gateway import Response, plain_query
from tests.models.headscale.state import Fault, RecordedRequest

if TYPE_CHECKING:
    from tests.models.headscale.server import FakeHeadscale


class HttpServer(ThreadingHTTPServer):
    """One thread per connection; ``fake`` is the :class:`FakeHeadscale` whose API it serves."""

    daemon_threads = True
    fake: FakeHeadscale

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (or a stop() that drops them) are normal here; anything else is still printed."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


_GRPC_CODE_FOR_STATUS = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 429: 8, 499: 1, 501: 12, 503: 14, 504: 4}


class RequestHandler(BaseHTTPRequestHandler):
    """One keep-alive connection: each request is faulted, answered by the fake, recorded, then sent."""

    protocol_version = "HTTP/1.1"
    timeout = 30
    server: HttpServer
    _fault_body: ClassVar[bytes] = b'{"code":2,"message":"injected fau'

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without NODELAY, Nagle + delayed ACK add ~40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fake = self.server.fake
        with fake._record_lock:
            fake._connections.add(self.connection)
            fake._handler_threads.add(threading.current_thread())
        if fake._stopping.is_set():  # accepted just before stop(): do not start a keep-alive wait now
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        fake = self.server.fake
        with contextlib.suppress(OSError):
            super().finish()
        with fake._record_lock:
            fake._connections.discard(self.connection)
            fake._handler_threads.discard(threading.current_thread())

    def version_string(self) -> str:
        return "fake-headscale"

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log."""

    def do_GET(self) -> None:
        self._exchange()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET  # noqa: N815

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.payload)

    def _reset(self) -> None:
        """Drop the connection without a response; SO_LINGER 0 turns the close into a TCP RST."""
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def _fault_response(self, fault: Fault, real: Response | None) -> Response | None:
        if fault.kind == "unauthorized":
            return Response.text(401, "Unauthorized")
        if fault.kind == "status":
            code = _GRPC_CODE_FOR_STATUS.get(fault.status, 2)
            return Response.json(fault.status, {"code": code, "message": "injected fault", "details": []})
        if fault.kind == "malformed":
            payload = real.payload[: max(1, len(real.payload) // 2)] if real is not None else self._fault_body
            if payload.strip() in (b"{}", b""):
                payload = self._fault_body
            return Response(200, "application/json", payload, payload.decode(errors="replace"))
        return None  # reset

    def _exchange(self) -> None:
        fake = self.server.fake
        method = self.command
        parts = urlsplit(self.path)
        path, raw_query = parts.path, parts.query
        raw_body = self._read_body()
        body: Any = None
        if raw_body.strip():
            try:
                body = json.loads(raw_body)
            except ValueError:
                body = raw_body.decode(errors="replace")
        query = plain_query(raw_query)
        fault = fake._take_fault(method, path)
        if fault is not None and fault.kind == "latency" and not fault.after_apply:
            fake._stopping.wait(fault.delay)
        if fault is not None and fault.kind != "latency" and not fault.after_apply:
            self._finish_with_fault(fault, None, method, path, query, body)
            return
        try:
            response = fake._respond(method, path, raw_query, self.headers.get("Authorization"), raw_body)
            problems = fake._contract_problems(method, path, query, body, response)
        except Exception as exc:  # noqa: BLE001 - a bug in the fake must surface in the test, not hang the client
            response = Response.json(500, {"code": 13, "message": f"fake headscale bug: {exc!r}", "details": []})
            problems = [f"{method} {path}: the fake crashed: {exc!r}"]
        if fault is not None and fault.kind == "latency":
            fake._stopping.wait(fault.delay)
        elif fault is not None:
            self._finish_with_fault(fault, response, method, path, query, body)
            return
        kind = fault.kind if fault is not None else None
        # Record before answering: a client that reacts to the answer must already find the exchange recorded.
        fake._record(RecordedRequest(method, path, query, body, response.status, response.value, kind), problems)
        self._send(response)

    def _finish_with_fault(
        self, fault: Fault, real: Response | None, method: str, path: str, query: dict[str, Any], body: Any
    ) -> None:
        response = self._fault_response(fault, real)
        if response is None:
            self.server.fake._record(RecordedRequest(method, path, query, body, None, None, fault.kind), [])
            self._reset()
        else:
            entry = RecordedRequest(method, path, query, body, response.status, response.value, fault.kind)
            self.server.fake._record(entry, [])
            self._send(response)
