"""A REST client for the Headscale API, 0.28 and 0.29.

Written against the upstream OpenAPI documents and their quirks: 64-bit ids are strings, creating a key
without an expiration makes it born expired (so this client always sends one), listings mask key material,
and most failures are HTTP 500 with a gRPC-status body whose `message` says what happened.

Retries are for reads and idempotent writes only (connection errors, 502/503/504). A call that mints
something (a user, a pre-auth key, an API key) is never retried blindly: a retry after a lost response
could mint a second live key. Error messages name the call and the server's message, never a key.

Before its first API call a client confirms the live server's version: ``GET /version`` (unauthenticated,
0.27 and later, ``{"version": "v0.29.2", ...}``; 0.25/0.26 have no such endpoint and the OpenAPI document's
``info.version`` is always "version not set"). A pinned minor that differs from the live one, or a live minor
this client does not speak, is refused with both versions named, before anything is read or written.

A server that cannot be reached costs seconds, once: connections give up after ``CONNECT_TIMEOUT``, answers after
``READ_TIMEOUT``; the probe is retried at most ``PROBE_RETRIES`` times and never after a timeout; and a failed probe,
or a call that could not connect at all, is remembered for ``DOWN_MEMORY_SECONDS``: every call in that window fails
at once with `UnreachableError` (nothing sent), naming the URL and the first failure; after it, or after
`ask_again` (the providers call it before each write), the server is probed again (it may have come back, with
another release). Once a write asked for it (`ask_again(patient=True)`), a probe that finds the server not serving
waits for it, up to ``WRITE_PATIENCE_SECONDS`` and once per client: a write may follow the rollout that makes the
server, seconds before anything routes to it.

Listings can be shared (``cache_seconds``): one fetch per listing for every thread of the process, however
many ask at once (single flight); any write through the client empties them.

A client can be pinned to an address (``connect_to``): the TCP connection goes there instead of to whatever the
URL's name resolves to, while TLS (SNI and the certificate's name check, with the usual CA verification) and the
HTTP ``Host`` header still use the URL's name. The providers pin the active site's ``publicAddress``, so a
promotion reaches the new active's Headscale before the public DNS record moves to it.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
import urllib3.exceptions

from headscale_ha.provider.pinning import pin
from headscale_ha.provider.records import (
    ApiKeyInfo,
    LivePolicy,
    Node,
    PreAuthKeyInfo,
    User,
    parse_time,
    wire_time,
)

SUPPORTED_MINORS = ("0.28", "0.29")
#: Seconds to establish a TCP (and TLS) connection: an address that drops packets (a lost cluster) costs this much.
CONNECT_TIMEOUT = 3.0
#: Seconds to wait for an answer once connected: a server that accepts and hangs costs this much per attempt.
READ_TIMEOUT = 10.0
#: Retries of the version probe (refused connections and 502/503/504 only; a timeout is final).
PROBE_RETRIES = 1
#: How long a failed probe, or a call that could not connect, keeps every later call from being sent.
DOWN_MEMORY_SECONDS = 30.0
#: How long a write waits, once per client, for a server that does not serve yet: a Deployment counts as rolled
#: out when its pod is Ready, and the ingress or load balancer in front of it routes to that pod some seconds later.
WRITE_PATIENCE_SECONDS = 60.0
#: The longest pause between two probes of that wait.
PATIENCE_STEP_SECONDS = 5.0
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
_TRANSIENT_STATUS = frozenset({502, 503, 504})
_SECRETISH = re.compile(r"hskey-(api|auth|authreq|client|oauthtok)-[A-Za-z0-9_\-]+|[0-9a-f]{48}")


def redact(text: str) -> str:
    """Key material never leaves this module in a message."""
    return _SECRETISH.sub(lambda m: m.group(0)[:20] + "***" if m.group(0).startswith("hskey") else "***", text)


class HeadscaleError(Exception):
    """A call failed; `call` names it (e.g. `CreatePreAuthKey`), `status` is the HTTP status if one came back."""

    def __init__(self, call: str, message: str, *, status: int | None = None) -> None:
        self.call = call
        self.status = status
        self.server_message = redact(message)
        where = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"Headscale {call} failed{where}: {self.server_message}")


class UnauthorizedError(HeadscaleError):
    """The API key is missing, wrong or expired."""


class NotFoundError(HeadscaleError):
    """The object does not exist (404, or a 500 whose message says so)."""


class TransientError(HeadscaleError):
    """The server or the network failed in a way a later call may not; the outcome of a write is unknown.

    `timed_out`: no answer within the timeout, so the server may still apply the request after this error.
    """

    def __init__(self, call: str, message: str, *, status: int | None = None, timed_out: bool = False) -> None:
        super().__init__(call, message, status=status)
        self.timed_out = timed_out


class UnreachableError(TransientError):
    """The call was not sent: the server refused the connection, did not answer within `CONNECT_TIMEOUT`, its name
    did not resolve, TLS failed, or an earlier failure of this server is remembered (`DOWN_MEMORY_SECONDS`).
    Nothing was written by this call."""


class UnsupportedError(HeadscaleError):
    """The server's version lacks this call, or this client does not speak the server's version."""


class VersionMismatchError(UnsupportedError):
    """The live server runs another minor than the one pinned (both are named in the message)."""

    def __init__(self, call: str, message: str, *, pinned: str, live: str) -> None:
        super().__init__(call, message)
        self.pinned = pinned
        self.live = live


@dataclass
class CallCounter:
    """Requests made, by method; the bench and the fault tests read it."""

    reads: int = 0
    writes: int = 0
    by_call: dict[str, int] = field(default_factory=dict)


class HeadscaleClient:
    """One server, one API key; thread-safe. `version` pins the minor, which the live server must run (checked
    once, before the first API call, unless `verify_version` is off); without a pin the live minor is used.

    `timeout` is the read timeout, `connect_timeout` the connect one; `monotonic` is the clock of the down memory.
    `connect_to` pins the address the connection goes to (provider/pinning.py): `base_url` stays the URL the
    server is known by (TLS name, `Host` header), and messages name both (`where`). Pinning mounts an adapter on
    `session` for the pinned origin."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        version: str | None = None,
        timeout: float = READ_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        cache_seconds: float = 0.0,
        verify_version: bool = True,
        down_memory: float = DOWN_MEMORY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        connect_to: str | None = None,
        write_patience: float = WRITE_PATIENCE_SECONDS,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not api_key:
            raise ValueError("api_key is empty")
        self.base_url = base_url.rstrip("/")
        self.connect_to = connect_to
        #: What messages name: the URL, and the address it was reached at when pinned.
        self.where = f"{self.base_url} (at {connect_to})" if connect_to else self.base_url
        self._api_key = api_key
        self._pinned = _minor(version) if version else None
        self.verify_version = verify_version
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()
        self._url, self._host = self.base_url, None
        if connect_to:
            self._pin(connect_to)
        self._sleep = sleep
        self.calls = CallCounter()
        self._lock = threading.Lock()
        # The live version: fetched once, by one thread. A failed probe or a refusal, and a call that could not
        # connect, are remembered (`_down`) for `down_memory` seconds; then the server is probed again.
        self._version_lock = threading.RLock()
        self._server_version: str | None = None
        self._confirmed = False
        self._down: tuple[float, HeadscaleError] | None = None
        self.down_memory = down_memory
        #: How long a probe waits for a server that does not serve yet, once `ask_again(patient=True)` asked for it
        #: (before a write); once spent, it is 0 (`_patient_probe`).
        self.write_patience = write_patience
        self._patient = False
        self._monotonic = monotonic
        # Listings shared by the many resources one provider process diffs (one fetch per listing, however many
        # threads ask at once); a write empties them, and a read that started before a write is not kept.
        self.cache_seconds = cache_seconds
        self._cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self._inflight: dict[tuple[str, str], tuple[int, Future[Any]]] = {}
        self._generation = 0

    def __repr__(self) -> str:
        pinned = f", connect_to={self.connect_to!r}" if self.connect_to else ""
        return f"HeadscaleClient({self.base_url!r}, version={self._pinned!r}{pinned})"

    def _pin(self, connect_to: str) -> None:
        """Send to the pinned origin, with the URL's name in `Host` and in TLS (the adapter mounted for it)."""
        self._url, self._host = pin(self.session, self.base_url, connect_to)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("HeadscaleClient holds an API key and must not be pickled")

    # ------------------------------------------------------------------------------------------ transport

    def _request(
        self,
        call: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        idempotent: bool,
        auth: bool = True,
    ) -> Any:
        self._refuse_if_down(call)
        if auth and self.verify_version:
            self.confirm_version()
        send = {"body": body, "query": query, "attempts": 1 + (self.retries if idempotent else 0), "auth": auth}
        if method != "GET":
            self._invalidate()
            try:
                return self._send(call, method, path, **send)
            finally:
                self._invalidate()  # a read that overlapped the write must not be kept either
        if self.cache_seconds <= 0:
            return self._send(call, method, path, **send)
        key = (path, json.dumps(dict(query or {}), sort_keys=True))
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and time.monotonic() - cached[0] < self.cache_seconds:
                return cached[1]
            flight = self._inflight.get(key)
            leader = flight is None or flight[0] != self._generation
            if leader:
                generation, future = self._generation, Future()
                self._inflight[key] = (generation, future)
            else:
                assert flight is not None
                generation, future = flight
        if not leader:
            return future.result()  # the leader's answer, or its error
        try:
            result = self._send(call, method, path, **send)
        except BaseException as exc:
            with self._lock:
                if self._inflight.get(key, (0, None))[1] is future:
                    del self._inflight[key]
            future.set_exception(exc)
            raise
        with self._lock:
            if self._generation == generation:
                self._cache[key] = (time.monotonic(), result)
            if self._inflight.get(key, (0, None))[1] is future:
                del self._inflight[key]
        future.set_result(result)
        return result

    def _invalidate(self) -> None:
        with self._lock:
            self._generation += 1
            self._cache.clear()

    def _send(
        self,
        call: str,
        method: str,
        path: str,
        *,
        body: Any,
        query: Mapping[str, str] | None,
        attempts: int,
        auth: bool,
        retry_timeouts: bool = True,
    ) -> Any:
        """Send, retrying transient failures up to `attempts` in all; a connect timeout is never retried (the
        kernel retransmitted the SYN already), a read timeout only with `retry_timeouts`."""
        headers = {"Accept": "application/json", **({"Host": self._host} if self._host else {})}
        if auth:
            headers["Authorization"] = f"Bearer {self._api_key}"
        last: TransientError | None = None
        for attempt in range(attempts):
            if attempt:
                self._sleep(self.backoff * (2 ** (attempt - 1)))
            self._count(call, method)
            try:
                response = self.session.request(
                    method,
                    f"{self._url}{path}",
                    params=dict(query or {}),
                    data=json.dumps(body) if body is not None else None,
                    headers={**headers, **({"Content-Type": "application/json"} if body is not None else {})},
                    timeout=(self.connect_timeout, self.timeout),
                )
            except requests.RequestException as exc:
                last = self._no_response(call, exc)
                final = isinstance(exc, requests.ConnectTimeout) or not retry_timeouts
                if final and isinstance(exc, requests.Timeout):
                    break
                continue
            if response.status_code in _TRANSIENT_STATUS:
                last = TransientError(call, _message(response), status=response.status_code)
                continue
            return self._decode(call, response)
        assert last is not None
        if isinstance(last, UnreachableError):
            self._remember_down(last)
        raise last

    def _no_response(self, call: str, exc: requests.RequestException) -> TransientError:
        reason = _reason(exc, connect_timeout=self.connect_timeout, read_timeout=self.timeout)
        if _not_connected(exc):
            return UnreachableError(call, f"{self.where} is unreachable: {reason}")
        return TransientError(
            call, f"no response from {self.where}: {reason}", timed_out=isinstance(exc, requests.Timeout)
        )

    def _count(self, call: str, method: str) -> None:
        with self._lock:
            if method == "GET":
                self.calls.reads += 1
            else:
                self.calls.writes += 1
            self.calls.by_call[call] = self.calls.by_call.get(call, 0) + 1

    @staticmethod
    def _decode(call: str, response: requests.Response) -> Any:
        status = response.status_code
        if status == 401:
            raise UnauthorizedError(call, "the API key is missing, wrong or expired", status=status)
        if status == 404:
            raise NotFoundError(call, _message(response), status=status)
        if status >= 400:
            message = _message(response)
            if "not found" in message.lower() or "record not found" in message.lower():
                raise NotFoundError(call, message, status=status)
            raise HeadscaleError(call, message, status=status)
        try:
            return response.json() if response.content else {}
        except ValueError:
            raise TransientError(call, "the server answered with malformed JSON", status=status) from None

    # ------------------------------------------------------------------------------------------ version

    @property
    def server_version(self) -> str:
        """The live server's release as `/version` reports it (``v0.29.2``); fetched once, by one thread."""
        with self._version_lock:
            self._refuse_if_down("Version")
            if self._server_version is None:
                try:
                    self._server_version = self._patient_probe()
                except HeadscaleError as exc:
                    raise self._remember_down(exc) from None
            return self._server_version

    def _patient_probe(self) -> str:
        """The probe, repeated with growing pauses for up to `write_patience` seconds while the server does not
        serve (refused, reset, a gateway's 502/503/504), once a write asked for patience. A write may come right
        after the rollout or the route the same `up` made, seconds before the ingress sends anything to the new pod.
        A server that answers, even to refuse, ends the wait. The wait is given once per client: when it runs out,
        it is spent, so a dead server costs one wait per run, not one per write."""
        began, pause, paused = self._monotonic(), self.backoff, False
        while True:
            try:
                version = self._probe()
            except UnreachableError as exc:
                waited = self._monotonic() - began
                if not self._patient or waited + pause > self.write_patience:
                    if not paused:
                        raise
                    limit = f"{self.write_patience:g} s"
                    message = f"{exc.server_message} (still, after waiting up to {limit} for it to serve)"
                    self.write_patience = 0.0
                    raise UnreachableError(exc.call, message, status=exc.status) from None
            else:
                self._down = None  # what a failed attempt of this wait remembered
                return version
            self._sleep(pause)
            pause, paused = min(pause * 2, PATIENCE_STEP_SECONDS), True

    def _probe(self) -> str:
        attempts = 1 + min(self.retries, PROBE_RETRIES)
        send = {"body": None, "query": None, "attempts": attempts, "auth": False, "retry_timeouts": False}
        try:
            data = self._send("Version", "GET", "/version", **send)
        except NotFoundError:
            raise UnsupportedError(
                "Version",
                f"{self.where} has no /version endpoint: Headscale older than 0.27, or not Headscale "
                f"(this client speaks {', '.join(SUPPORTED_MINORS)})",
            ) from None
        except UnreachableError:
            raise
        except TransientError as exc:  # a gateway's 502/503/504 or a hung server: not serving, so nothing is sent
            message = f"{self.where} is not serving: {exc.server_message}"
            raise UnreachableError("Version", message, status=exc.status, timed_out=exc.timed_out) from None
        text = data.get("version") if isinstance(data, Mapping) else None
        if not isinstance(text, str) or not text:
            raise UnsupportedError("Version", f"{self.where}: /version names no version: {str(data)[:120]}")
        return text

    def _remember_down(self, error: HeadscaleError) -> HeadscaleError:
        with self._version_lock:
            self._down = (self._monotonic(), error)
        return error

    def _refuse_if_down(self, call: str) -> None:
        """Raise the remembered failure of this server (a refusal as it was; anything else as `UnreachableError`
        for this call, which is not sent); once `down_memory` has passed, forget it and probe again."""
        with self._version_lock:
            if self._down is None:
                return
            since, error = self._down
            age = self._monotonic() - since
            if age >= self.down_memory:
                self._down, self._server_version, self._confirmed = None, None, False
                return
        if isinstance(error, UnsupportedError):
            raise error
        raise UnreachableError(
            call,
            f"not sent: {error}; that was {age:.1f} s ago and the server is not asked again within "
            f"{self.down_memory:g} s of a failure",
        )

    def ask_again(self, *, patient: bool = False) -> None:
        """Forget a remembered failure now: the next call probes the server again (providers do this before a write,
        so a server that came back within `down_memory` is not refused). ``patient`` (a write): from now on a probe
        waits for a server that does not serve yet (`_patient_probe`), until that wait is spent."""
        with self._version_lock:
            self._patient = self._patient or patient
            if self._down is not None:
                self._down, self._server_version, self._confirmed = None, None, False

    def confirm_version(self) -> None:
        """Refuse a live server whose minor is unsupported or differs from the pin, naming both versions.

        A refusal, like a failed probe, is remembered for `down_memory` seconds (later calls raise it without
        asking); then the server is asked again (an upgrade may have rolled out meanwhile).
        """
        with self._version_lock:
            server = self.server_version
            if self._confirmed:
                return
            refusal = self._refusal(server)
            if refusal is not None:
                raise self._remember_down(refusal)
            self._confirmed = True

    def _refusal(self, server: str) -> UnsupportedError | None:
        match = re.match(r"^v?(\d+)\.(\d+)", server.strip())
        live = f"{match.group(1)}.{match.group(2)}" if match else None
        if live not in SUPPORTED_MINORS:
            pin = f"; the stack pins {self._pinned}" if self._pinned else ""
            return UnsupportedError(
                "Version",
                f"Headscale at {self.where} runs {server}, which this provider does not speak "
                f"({', '.join(SUPPORTED_MINORS)}){pin}",
            )
        if self._pinned is not None and live != self._pinned:
            return VersionMismatchError(
                "Version",
                f"Headscale at {self.where} runs {server} (minor {live}) but the stack pins {self._pinned}: "
                "roll the server out to the pinned release first, or pin the release it runs",
                pinned=self._pinned,
                live=live,
            )
        return None

    @property
    def version(self) -> str:
        """The minor this client speaks ("0.28" or "0.29"): the pin, once the live server confirmed it."""
        if self.verify_version or self._pinned is None:
            self.confirm_version()
        if self._pinned is not None:
            return self._pinned
        return re.match(r"^v?(\d+\.\d+)", self.server_version.strip()).group(1)  # type: ignore[union-attr]

    @property
    def has_policy_check(self) -> bool:
        return self.version >= "0.29"

    # ------------------------------------------------------------------------------------------ users

    def list_users(self, *, name: str | None = None, id_: str | None = None) -> list[User]:
        """Every user, filtered here by exact name or id (one listing serves every filter)."""
        data = self._request("ListUsers", "GET", "/api/v1/user", idempotent=True)
        users = [User.from_api(u) for u in data.get("users") or []]
        return [u for u in users if (not name or u.name == name) and (not id_ or u.id == id_)]

    def find_user(self, name: str) -> User | None:
        return next((u for u in self.list_users(name=name) if u.name == name), None)

    def create_user(self, name: str, *, display_name: str = "", email: str = "") -> User:
        body = {"name": name, "displayName": display_name, "email": email}
        data = self._request("CreateUser", "POST", "/api/v1/user", body=body, idempotent=False)
        return User.from_api(data["user"])

    def rename_user(self, user_id: str, new_name: str) -> User:
        path = f"/api/v1/user/{user_id}/rename/{new_name}"
        return User.from_api(self._request("RenameUser", "POST", path, idempotent=True)["user"])

    def delete_user(self, user_id: str) -> None:
        self._request("DeleteUser", "DELETE", f"/api/v1/user/{user_id}", idempotent=True)

    # ------------------------------------------------------------------------------------------ nodes

    def list_nodes(self, *, user: str | None = None) -> list[Node]:
        """Every node, or a user's own (untagged) nodes, filtered here (one listing serves every filter)."""
        data = self._request("ListNodes", "GET", "/api/v1/node", idempotent=True)
        nodes = [Node.from_api(n) for n in data.get("nodes") or []]
        return [n for n in nodes if not user or (not n.tags and n.user is not None and n.user.name == user)]

    def get_node(self, node_id: str) -> Node:
        return Node.from_api(self._request("GetNode", "GET", f"/api/v1/node/{node_id}", idempotent=True)["node"])

    def set_tags(self, node_id: str, tags: list[str]) -> Node:
        path = f"/api/v1/node/{node_id}/tags"
        return Node.from_api(self._request("SetTags", "POST", path, body={"tags": tags}, idempotent=True)["node"])

    def set_approved_routes(self, node_id: str, routes: list[str]) -> Node:
        path = f"/api/v1/node/{node_id}/approve_routes"
        data = self._request("SetApprovedRoutes", "POST", path, body={"routes": routes}, idempotent=True)
        return Node.from_api(data["node"])

    def rename_node(self, node_id: str, new_name: str) -> Node:
        path = f"/api/v1/node/{node_id}/rename/{new_name}"
        return Node.from_api(self._request("RenameNode", "POST", path, idempotent=True)["node"])

    def delete_node(self, node_id: str) -> None:
        self._request("DeleteNode", "DELETE", f"/api/v1/node/{node_id}", idempotent=True)

    # ------------------------------------------------------------------------------------------ pre-auth keys

    def list_preauth_keys(self) -> list[PreAuthKeyInfo]:
        data = self._request("ListPreAuthKeys", "GET", "/api/v1/preauthkey", idempotent=True)
        return [PreAuthKeyInfo.from_api(k) for k in data.get("preAuthKeys") or []]

    def create_preauth_key(
        self,
        *,
        user_id: str | None,
        reusable: bool,
        ephemeral: bool,
        expiration: datetime,
        acl_tags: list[str],
    ) -> PreAuthKeyInfo:
        """Mint a key; never retried (a lost response must be reconciled by listing, not by minting again)."""
        if user_id is None and not acl_tags:
            raise ValueError("a pre-auth key without a user must carry ACL tags (a tag-only key)")
        body: dict[str, Any] = {
            "reusable": reusable,
            "ephemeral": ephemeral,
            "expiration": wire_time(expiration),
            "aclTags": sorted(acl_tags),
        }
        if user_id is not None:
            body["user"] = user_id
        data = self._request("CreatePreAuthKey", "POST", "/api/v1/preauthkey", body=body, idempotent=False)
        return PreAuthKeyInfo.from_api(data["preAuthKey"])

    def expire_preauth_key(self, key_id: str) -> None:
        self._request("ExpirePreAuthKey", "POST", "/api/v1/preauthkey/expire", body={"id": key_id}, idempotent=True)

    def delete_preauth_key(self, key_id: str) -> None:
        self._request("DeletePreAuthKey", "DELETE", "/api/v1/preauthkey", query={"id": key_id}, idempotent=True)

    # ------------------------------------------------------------------------------------------ API keys

    def list_api_keys(self) -> list[ApiKeyInfo]:
        data = self._request("ListApiKeys", "GET", "/api/v1/apikey", idempotent=True)
        return [ApiKeyInfo.from_api(k) for k in data.get("apiKeys") or []]

    def create_api_key(self, *, expiration: datetime) -> str:
        """Mint an API key and return it (shown once); never retried."""
        body = {"expiration": wire_time(expiration)}
        return str(self._request("CreateApiKey", "POST", "/api/v1/apikey", body=body, idempotent=False)["apiKey"])

    def expire_api_key(self, prefix: str) -> None:
        self._request("ExpireApiKey", "POST", "/api/v1/apikey/expire", body={"prefix": prefix}, idempotent=True)

    def delete_api_key(self, prefix: str) -> None:
        self._request("DeleteApiKey", "DELETE", f"/api/v1/apikey/{prefix}", idempotent=True)

    # ------------------------------------------------------------------------------------------ policy

    def get_policy(self) -> LivePolicy:
        """The live policy; a database that never stored one answers "acl policy not found": that is empty."""
        try:
            data = self._request("GetPolicy", "GET", "/api/v1/policy", idempotent=True)
        except NotFoundError as exc:
            if "acl policy not found" in exc.server_message:
                return LivePolicy(text="", updated_at=None)
            raise
        return LivePolicy(text=data.get("policy", "") or "", updated_at=parse_time(data.get("updatedAt")))

    def check_policy(self, text: str) -> None:
        """Validate without saving (0.29+); raises HeadscaleError with the server's reason."""
        if not self.has_policy_check:
            raise UnsupportedError("CheckPolicy", f"Headscale {self.version} has no policy check endpoint")
        self._request("CheckPolicy", "POST", "/api/v1/policy/check", body={"policy": text}, idempotent=True)

    def set_policy(self, text: str) -> LivePolicy:
        data = self._request("SetPolicy", "PUT", "/api/v1/policy", body={"policy": text}, idempotent=True)
        return LivePolicy(text=data.get("policy", text) or text, updated_at=parse_time(data.get("updatedAt")))


def minor(version: str) -> str:
    """``0.29.2`` / ``v0.29`` → ``0.29``; an unsupported release is refused."""
    return _minor(version)


def _minor(version: str) -> str:
    match = re.match(r"^v?(\d+)\.(\d+)", version.strip())
    minor = f"{match.group(1)}.{match.group(2)}" if match else version
    if minor not in SUPPORTED_MINORS:
        raise UnsupportedError("Version", f"Headscale {version or '(unknown)'} is not supported (0.28 or 0.29 only)")
    return minor


def _message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason or "no message"
    if isinstance(data, Mapping):
        return str(data.get("message") or data.get("detail") or data.get("title") or data)[:300]
    return str(data)[:300]


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and what it wraps: requests' first argument (urllib3's MaxRetryError), its `reason`, causes."""
    seen: list[BaseException] = []
    todo: list[Any] = [exc]
    while todo and len(seen) < 12:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [*(item.args[:1] if item.args else ()), getattr(item, "reason", None), item.__cause__, item.__context__]
    return seen


def _not_connected(exc: requests.RequestException) -> bool:
    """The request never reached the server: no connection (refused, timed out, name unresolved) or no TLS."""
    if isinstance(exc, requests.ConnectTimeout | requests.exceptions.SSLError):
        return True
    return isinstance(exc, requests.ConnectionError) and any(
        isinstance(c, urllib3.exceptions.NewConnectionError) for c in _causes(exc)
    )


def _reason(exc: requests.RequestException, *, connect_timeout: float, read_timeout: float) -> str:
    """A short, key-free account of a failure without an answer."""
    causes = _causes(exc)
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection within {connect_timeout:g} s (ConnectTimeout)"
    if isinstance(exc, requests.ReadTimeout):
        return f"no answer within {read_timeout:g} s (ReadTimeout)"
    if isinstance(exc, requests.exceptions.SSLError):
        return "the TLS handshake failed (SSLError)"
    if any(isinstance(c, urllib3.exceptions.NameResolutionError | socket.gaierror) for c in causes):
        return "its name does not resolve (DNS)"
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return "connection refused"
    if any(isinstance(c, ConnectionResetError) for c in causes):
        return "connection reset"
    return type(exc).__name__
