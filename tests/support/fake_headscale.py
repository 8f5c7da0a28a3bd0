"""An in-process fake of Headscale's REST API (0.28.0 or 0.29.2) for tests and benches.

Why a fake: the Pulumi program manages users, keys, nodes and the policy through ``/api/v1``, and the interesting
failures (born-expired keys, masked listings, 500s for "not found", partial writes, dropped connections) are
properties of the real server that a mock written from memory would get wrong. The fake reproduces them from the
swagger, the upstream docs and the notes in ``../shared/reference/headscale/API.md`` and checks every exchange
against the release's swagger (:mod:`tests.support.swagger_contract`).

Only the REST surface is faked: there are no Tailscale clients, so nodes are created with
:meth:`FakeHeadscale.register_node`, which does what a ``tailscale up --authkey`` would do to the server state.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import re
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

from headscale_ha.policy.check import validate_policy
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.schema import policy_document
from tests.support.swagger_contract import GRPC_HTTP_STATUS, SwaggerContract, find_swagger, normalize_version

SUPPORTED_VERSIONS = ("0.28.0", "0.29.2")
#: What protojson decodes an absent ``expiration`` to, and what Headscale then stores: born expired.
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
#: The synthetic owner Headscale shows for tagged nodes (Tailscale's "tagged-devices" user id).
TAGGED_DEVICES_USER_ID = 2147455555
API_KEY_PREFIX = "hskey-api-"
AUTH_KEY_PREFIX = "hskey-auth-"
AUTH_REQUEST_PREFIX = "hskey-authreq-"
KEY_PREFIX_LENGTH = 12
KEY_SECRET_LENGTH = 64
REGISTRATION_ID_LENGTH = 24
_URLSAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_URLSAFE_RE = re.compile(r"[A-Za-z0-9_-]+")
_DNS_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_TIMESTAMP_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")
_EXIT_ROUTES = ("0.0.0.0/0", "::/0")
_POLICY_KEYS_028 = frozenset({"groups", "hosts", "tagOwners", "acls", "ssh", "autoApprovers"})
_POLICY_KEYS_029 = _POLICY_KEYS_028 | {"grants", "nodeAttrs", "tests", "sshTests", "randomizeClientPort"}
_VERSION_INFO = {
    "0.28.0": ("1f3d6b8e0c2a4e6f8091a2b3c4d5e6f708192a3b", "2026-02-03T10:21:44Z", "go1.25.5"),
    "0.29.2": ("7a9c1e3f5b7d9f1a3c5e7091b2d4f6a8c0e2a4b6", "2026-06-17T08:02:11Z", "go1.26.1"),
}
FAULT_KINDS: tuple[str, ...] = ("status", "reset", "latency", "malformed", "unauthorized")


class GrpcError(Exception):
    """A failed RPC as grpc-gateway serves it: gRPC code + message, HTTP status derived from the code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return GRPC_HTTP_STATUS.get(self.code, 500)

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": []}


def _fold_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _unknown(message: str) -> GrpcError:
    """A plain Go error returned from a handler: gRPC Unknown, served as HTTP 500 (most Headscale failures)."""
    return GrpcError(2, message)


def _invalid(message: str) -> GrpcError:
    return GrpcError(3, message)


# ---------------------------------------------------------------------------------------------------------------
# State (plain dataclasses; tests may read and edit them directly, ideally under ``fake.lock``)


@dataclass
class User:
    id: int
    name: str
    created_at: datetime
    display_name: str = ""
    email: str = ""
    provider_id: str = ""
    provider: str = ""
    profile_pic_url: str = ""


@dataclass
class PreAuthKey:
    id: int
    prefix: str
    secret_hash: str
    user_id: int | None
    reusable: bool
    ephemeral: bool
    acl_tags: list[str]
    expiration: datetime | None
    created_at: datetime
    used: bool = False

    @property
    def masked(self) -> str:
        """What listings show instead of the secret (CHANGELOG 0.28: ``hskey-auth-{prefix}-***``)."""
        return f"{AUTH_KEY_PREFIX}{self.prefix}-***"


@dataclass
class ApiKey:
    id: int
    prefix: str
    secret_hash: str
    expiration: datetime | None
    created_at: datetime
    last_seen: datetime | None = None

    @property
    def display_prefix(self) -> str:
        """The ``prefix`` field of a listing: 0.28+ keys are shown as ``hskey-api-<12 chars>-***``."""
        return f"{API_KEY_PREFIX}{self.prefix}-***"


@dataclass
class Node:
    id: int
    hostname: str
    given_name: str
    user_id: int | None
    tags: list[str]
    machine_key: str
    node_key: str
    disco_key: str
    ipv4: str
    ipv6: str
    created_at: datetime
    register_method: str
    available_routes: list[str] = field(default_factory=list)
    approved_routes: list[str] = field(default_factory=list)
    auth_key_id: int | None = None
    last_seen: datetime | None = None
    expiry: datetime | None = None
    online: bool = False

    @property
    def is_tagged(self) -> bool:
        return bool(self.tags)


@dataclass
class PendingRegistration:
    """A node waiting in the registration cache (``debug/node``) for ``node/register`` or ``auth/register``."""

    hostname: str
    user_id: int
    routes: list[str]
    machine_key: str
    node_key: str


@dataclass
class RecordedRequest:
    """One exchange as the fake saw it; ``status`` is None when the connection was reset."""

    method: str
    path: str
    query: dict[str, str | list[str]]
    body: Any
    status: int | None
    response: Any
    fault: str | None = None


@dataclass
class _Fault:
    kind: str
    path: re.Pattern[str]
    method: str | None
    status: int
    remaining: int
    delay: float
    after_apply: bool


# ---------------------------------------------------------------------------------------------------------------
# Wire helpers


def format_timestamp(moment: datetime) -> str:
    """protojson's Timestamp form: UTC with ``Z`` and 0, 3 or 6 fractional digits."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.year < 1000:
        text = f"{moment.year:04d}" + text[text.index("-") :]
    if moment.microsecond:
        fraction = f"{moment.microsecond:06d}"
        text += "." + (fraction[:3] if fraction.endswith("000") else fraction)
    return text + "Z"


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 as protojson accepts it (``Z`` or an offset, up to nanoseconds); ValueError otherwise."""
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid google.protobuf.Timestamp value {json.dumps(text)}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    micro = int((match[7] or "0").ljust(6, "0")[:6])
    offset = timedelta(0)
    if match[8] != "Z":
        sign = 1 if match[8][0] == "+" else -1
        offset = sign * timedelta(hours=int(match[8][1:3]), minutes=int(match[8][4:6]))
    try:
        local = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        return local - offset
    except (ValueError, OverflowError):
        raise ValueError(f"google.protobuf.Timestamp value out of range: {json.dumps(text)}") from None


def _ts(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def _random_urlsafe(length: int) -> str:
    return "".join(secrets.choice(_URLSAFE) for _ in range(length))


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


@dataclass(frozen=True, order=True)
class _Prefix:
    """A route in ``netip.Prefix.Compare`` order: family, masked address, prefix length, then the address itself."""

    family: int
    masked: int
    bits: int
    address: int
    text: str = field(compare=False)


def parse_prefix(text: str) -> _Prefix:
    """Parse like ``netip.ParsePrefix`` (the address is kept unmasked); ValueError with Go's wording."""
    where = f"netip.ParsePrefix({json.dumps(text)})"
    address_text, slash, bits_text = text.partition("/")
    if not slash:
        raise ValueError(f"{where}: no '/'")
    try:
        address = ipaddress.ip_address(address_text)
    except ValueError:
        raise ValueError(f"{where}: ParseAddr({json.dumps(address_text)}): unable to parse IP") from None
    width = 32 if address.version == 4 else 128
    if not bits_text.isdigit() or int(bits_text) > width or (len(bits_text) > 1 and bits_text[0] == "0"):
        raise ValueError(f"{where}: bad bits after slash: {json.dumps(bits_text)}")
    bits = int(bits_text)
    masked = int(address) >> (width - bits) << (width - bits) if bits else 0
    return _Prefix(address.version, masked, bits, int(address), f"{address}/{bits}")


def _sorted_routes(routes: Iterable[str]) -> list[str]:
    return [prefix.text for prefix in sorted({parse_prefix(route) for route in routes})]


def _validate_tag(tag: str) -> str | None:
    """The gRPC layer's tag check (``validateTag``); the message of the first rule broken, or None."""
    if not tag.startswith("tag:"):
        return "tag must start with the string 'tag:'"
    if tag.lower() != tag:
        return "tag should be lowercase"
    if len(tag.split()) > 1:
        return "tags must not contain spaces"
    return None


def _given_name(hostname: str) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-")[:63].strip("-")
    return label or "node"


def _go_parse_bool(text: str) -> bool:
    if text in {"1", "t", "T", "TRUE", "true", "True"}:
        return True
    if text in {"0", "f", "F", "FALSE", "false", "False"}:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {json.dumps(text)}: invalid syntax")


def _go_parse_uint(text: str, *, base0: bool = False) -> int:
    """``strconv.ParseUint(text, 10|0, 64)``: path parameters use base 0 (0x…, 0b…, 0o…, 0…)."""
    error = ValueError(f"strconv.ParseUint: parsing {json.dumps(text)}: invalid syntax")
    candidate = text
    base = 10
    if base0:
        lowered = text.lower()
        if lowered.startswith(("0x", "0b", "0o")):
            base, candidate = {"x": 16, "b": 2, "o": 8}[lowered[1]], text[2:]
        elif len(text) > 1 and text.startswith("0"):
            base, candidate = 8, text[1:]
        if "_" in candidate and base != 10 and not candidate.startswith("_") and "__" not in candidate:
            candidate = candidate.replace("_", "")
    if not candidate or not candidate.isalnum() or not candidate.isascii():
        raise error
    try:
        value = int(candidate, base)
    except ValueError:
        raise error from None
    if value >= 2**64:
        raise ValueError(f"strconv.ParseUint: parsing {json.dumps(text)}: value out of range")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Route table (the fake's own copy: it must work without the swagger files)

FieldKinds = Mapping[str, str]  # field name → "string" | "uint64" | "bool" | "timestamp" | "strings"


@dataclass(frozen=True)
class _Route:
    method: str
    template: str
    handler: str
    body: FieldKinds | None = None
    query: FieldKinds = field(default_factory=dict)
    new_in: str | None = None
    regex: re.Pattern[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts = re.split(r"(\{[^/{}]+\})", self.template)
        pattern = "".join(f"(?P<{p[1:-1]}>[^/]*)" if p.startswith("{") else re.escape(p) for p in parts)
        object.__setattr__(self, "regex", re.compile(pattern))

    @property
    def literal_segments(self) -> int:
        return sum(1 for part in self.template.split("/") if part and not part.startswith("{"))


_PATH_UINT_PARAMS = {"nodeId", "id", "oldId"}
_ROUTES: tuple[_Route, ...] = (
    _Route("GET", "/api/v1/apikey", "list_api_keys"),
    _Route("POST", "/api/v1/apikey", "create_api_key", body={"expiration": "timestamp"}),
    _Route("POST", "/api/v1/apikey/expire", "expire_api_key", body={"prefix": "string", "id": "uint64"}),
    _Route("DELETE", "/api/v1/apikey/{prefix}", "delete_api_key", query={"id": "uint64"}),
    _Route(
        "POST",
        "/api/v1/debug/node",
        "debug_create_node",
        body={"user": "string", "key": "string", "name": "string", "routes": "strings"},
    ),
    _Route("GET", "/api/v1/health", "health"),
    _Route("GET", "/api/v1/node", "list_nodes", query={"user": "string"}),
    _Route("POST", "/api/v1/node/backfillips", "backfill_node_ips", query={"confirmed": "bool"}),
    _Route("POST", "/api/v1/node/register", "register_node_api", query={"user": "string", "key": "string"}),
    _Route("GET", "/api/v1/node/{nodeId}", "get_node"),
    _Route("DELETE", "/api/v1/node/{nodeId}", "delete_node"),
    _Route("POST", "/api/v1/node/{nodeId}/approve_routes", "set_approved_routes", body={"routes": "strings"}),
    _Route("POST", "/api/v1/node/{nodeId}/expire", "expire_node", query={"expiry": "timestamp"}),
    _Route("POST", "/api/v1/node/{nodeId}/rename/{newName}", "rename_node"),
    _Route("POST", "/api/v1/node/{nodeId}/tags", "set_tags", body={"tags": "strings"}),
    _Route("GET", "/api/v1/policy", "get_policy"),
    _Route("PUT", "/api/v1/policy", "set_policy", body={"policy": "string"}),
    _Route("POST", "/api/v1/policy/check", "check_policy", body={"policy": "string"}, new_in="0.29"),
    _Route("GET", "/api/v1/preauthkey", "list_preauth_keys"),
    _Route(
        "POST",
        "/api/v1/preauthkey",
        "create_preauth_key",
        body={
            "user": "uint64",
            "reusable": "bool",
            "ephemeral": "bool",
            "expiration": "timestamp",
            "aclTags": "strings",
        },
    ),
    _Route("DELETE", "/api/v1/preauthkey", "delete_preauth_key", query={"id": "uint64"}),
    _Route("POST", "/api/v1/preauthkey/expire", "expire_preauth_key", body={"id": "uint64"}),
    _Route("GET", "/api/v1/user", "list_users", query={"id": "uint64", "name": "string", "email": "string"}),
    _Route(
        "POST",
        "/api/v1/user",
        "create_user",
        body={"name": "string", "displayName": "string", "email": "string", "pictureUrl": "string"},
    ),
    _Route("DELETE", "/api/v1/user/{id}", "delete_user"),
    _Route("POST", "/api/v1/user/{oldId}/rename/{newName}", "rename_user"),
    _Route(
        "POST", "/api/v1/auth/register", "auth_register", body={"user": "string", "authId": "string"}, new_in="0.29"
    ),
    _Route("POST", "/api/v1/auth/approve", "auth_approve", body={"authId": "string"}, new_in="0.29"),
    _Route("POST", "/api/v1/auth/reject", "auth_reject", body={"authId": "string"}, new_in="0.29"),
)
_DEFAULTS: dict[str, Any] = {"string": "", "uint64": 0, "bool": False, "timestamp": None, "strings": []}


@dataclass
class _Call:
    """A decoded request: path parameters, query fields and body fields with protobuf defaults filled in."""

    path: dict[str, Any]
    query: dict[str, Any]
    body: dict[str, Any]
    present: set[str]


def _decode_body(kinds: FieldKinds, raw: bytes) -> tuple[dict[str, Any], set[str]]:
    """Decode a JSON body like protojson with DiscardUnknown: unknown fields dropped, ``null`` means unset."""
    values = {name: _DEFAULTS[kind] for name, kind in kinds.items()}
    if not raw.strip():
        return values, set()  # grpc-gateway treats an empty body (io.EOF) as an empty message
    aliases = {name: name for name in kinds} | {_snake(name): name for name in kinds}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            canonical = aliases.get(key, key)
            if canonical in seen:
                raise _invalid(f'proto: duplicate field "{key}"')
            seen[canonical] = value
        return seen

    try:
        document = json.loads(raw, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise _invalid(f"proto: syntax error (line {exc.lineno}:{exc.colno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise _invalid("proto: syntax error (line 1:1): invalid UTF-8") from None
    if not isinstance(document, dict):
        token = "null" if document is None else json.dumps(document)[:1]
        raise _invalid(f"proto: syntax error (line 1:1): unexpected token {token}")
    present = set()
    for name, kind in kinds.items():
        if name not in document or document[name] is None:
            continue
        values[name] = _decode_field(name, kind, document[name])
        present.add(name)
    return values, present


def _decode_field(name: str, kind: str, value: Any) -> Any:
    shown = json.dumps(value)
    if kind == "strings":
        if not isinstance(value, list):
            raise _invalid(f"proto: syntax error (line 1:1): unexpected token {shown}")
        for item in value:
            if not isinstance(item, str):
                raise _invalid(f"proto: invalid value for string field {name}: {json.dumps(item)}")
        return list(value)
    if kind == "string":
        if not isinstance(value, str):
            raise _invalid(f"proto: invalid value for string field {name}: {shown}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _invalid(f"proto: invalid value for bool field {name}: {shown}")
        return value
    if kind == "uint64":
        if isinstance(value, bool):
            raise _invalid(f"proto: invalid value for uint64 field {name}: {shown}")
        if isinstance(value, int) and 0 <= value < 2**64:
            return value
        if isinstance(value, str) and value.isdigit() and value.isascii() and int(value) < 2**64:
            return int(value)
        raise _invalid(f"proto: invalid value for uint64 field {name}: {shown}")
    if kind == "timestamp":
        if not isinstance(value, str):
            raise _invalid(f"proto: unexpected token {shown[:1]} for timestamp field {name}")
        try:
            return parse_timestamp(value)
        except ValueError as exc:
            raise _invalid(f"proto: {exc}") from None
    raise AssertionError(kind)


def _decode_query(kinds: FieldKinds, raw_query: str) -> tuple[dict[str, Any], set[str]]:
    """Query parameters the way grpc-gateway's PopulateQueryParameters reads them (unknown names ignored)."""
    if ";" in raw_query:
        raise _invalid("invalid semicolon separator in query")
    parsed = parse_qs(raw_query, keep_blank_values=True)
    values = {name: _DEFAULTS[kind] for name, kind in kinds.items()}
    present = set()
    for name, kind in kinds.items():
        given = parsed.get(name, []) + parsed.get(_snake(name), []) if _snake(name) != name else parsed.get(name, [])
        if not given:
            continue
        if len(given) > 1:
            raise _invalid(f'too many values for field "{name}": {", ".join(given)}')
        text = given[0]
        try:
            if kind == "uint64":
                values[name] = _go_parse_uint(text)
            elif kind == "bool":
                values[name] = _go_parse_bool(text)
            elif kind == "timestamp":
                values[name] = _parse_query_timestamp(text)
            else:
                values[name] = text
        except ValueError as exc:
            raise _invalid(f'parsing field "{name}": {exc}') from None
        present.add(name)
    return values, present


def _parse_query_timestamp(text: str) -> datetime:
    try:
        return parse_timestamp(text)
    except ValueError:
        layout = "2006-01-02T15:04:05.999999999Z07:00"
        raise ValueError(f"parsing time {json.dumps(text)} as {json.dumps(layout)}: cannot parse") from None


def _plain_query(raw_query: str) -> dict[str, str | list[str]]:
    parsed = parse_qs(raw_query, keep_blank_values=True)
    return {name: values[0] if len(values) == 1 else values for name, values in parsed.items()}


# ---------------------------------------------------------------------------------------------------------------
# The fake


@dataclass
class _Response:
    status: int
    content_type: str
    payload: bytes
    value: Any  # parsed JSON or text, for recording and contract checks

    @classmethod
    def json(cls, status: int, value: Any) -> _Response:
        return cls(status, "application/json", json.dumps(value, separators=(",", ":")).encode(), value)

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> _Response:
        return cls(status, content_type, text.encode(), text)


class FakeHeadscale:
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
        self.version = version
        self.minor = ".".join(version.split(".")[:2])
        self.reported_version = reported_version
        self.policy_mode = policy_mode
        self._clock = now
        self._frozen: datetime | None = None
        self.lock = threading.RLock()
        self.users: dict[int, User] = {}
        self.nodes: dict[int, Node] = {}
        self.preauth_keys: dict[int, PreAuthKey] = {}
        self.api_keys: dict[int, ApiKey] = {}
        self.pending_registrations: dict[str, PendingRegistration] = {}
        #: Database mode: the stored policy (None = nothing stored yet). File mode: the file's text (None = unreadable).
        self.policy_text: str | None = None
        self.policy_updated_at: datetime | None = None
        self._ids: dict[str, int] = {}
        self.requests: list[RecordedRequest] = []
        self.contract_violations: list[str] = []
        self._record_lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._routes = tuple(r for r in _ROUTES if r.new_in is None or self.minor >= r.new_in)
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

    # -- clock ------------------------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The fake's current time: a value set here, else the clock callable, else real UTC now."""
        if self._frozen is not None:
            return self._frozen
        if self._clock is not None:
            return self._clock().astimezone(UTC)
        return datetime.now(UTC)

    @now.setter
    def now(self, value: datetime) -> None:
        if value.tzinfo is None:
            raise ValueError("the fake's clock needs an aware datetime")
        self._frozen = value.astimezone(UTC)

    def advance(self, delta: timedelta) -> datetime:
        """Freeze the clock at ``now + delta`` (e.g. to let keys expire)."""
        self.now = self.now + delta
        return self.now

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeHeadscale:
        """Serve on 127.0.0.1 (``port`` 0: any free port; else that one, as ``come_back`` does)."""
        if self._server is not None:
            return self
        if not self.admin_key:
            self.admin_key = self.add_api_key(expiration=self.now + timedelta(days=90))
        self._stopping.clear()
        server = _Server(("127.0.0.1", port), _Handler)
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
            self._held += _fill_accept_queue(port)

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
            self._routes = tuple(r for r in _ROUTES if r.new_in is None or self.minor >= r.new_in)
            swagger = find_swagger(version)
            self.contract = None if swagger is None else SwaggerContract(swagger, version=version)

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
        fault = _Fault(kind, re.compile(path), method.upper() if method else None, status, times, delay, after_apply)
        with self._record_lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        with self._record_lock:
            self._faults.clear()

    def reset_requests(self) -> None:
        with self._record_lock:
            self.requests.clear()

    def _take_fault(self, method: str, path: str) -> _Fault | None:
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

    # -- setup helpers ----------------------------------------------------------------------------------------

    def _next_id(self, table: str) -> int:
        with self.lock:
            self._ids[table] = self._ids.get(table, 0) + 1
            return self._ids[table]

    def add_user(self, name: str, *, display_name: str = "", email: str = "") -> str:
        """Create a user directly (no HTTP); returns its id as the API would show it (ValueError if taken)."""
        with self.lock:
            try:
                return str(self._create_user(name, display_name, email, "").id)
            except GrpcError as exc:
                raise ValueError(exc.message) from None

    def add_api_key(self, *, expiration: datetime | None) -> str:
        """Create an API key directly; returns the full key (the only time it exists in clear)."""
        with self.lock:
            prefix, secret = _random_urlsafe(KEY_PREFIX_LENGTH), _random_urlsafe(KEY_SECRET_LENGTH)
            key_id = self._next_id("api_keys")
            self.api_keys[key_id] = ApiKey(key_id, prefix, _hash(secret), expiration, self.now)
            return f"{API_KEY_PREFIX}{prefix}-{secret}"

    def add_preauth_key(
        self,
        *,
        user: str | None = None,
        reusable: bool = False,
        ephemeral: bool = False,
        tags: Iterable[str] = (),
        expiration: datetime | None = None,
    ) -> str:
        """Create a pre-auth key directly (``expiration`` defaults to now + 1 h like the CLI); returns the key."""
        with self.lock:
            owner = self._user_by_name(user).id if user is not None else None
            expires = expiration or self.now + timedelta(hours=1)
            return self._create_preauth_key(owner, reusable, ephemeral, expires, tags)

    def register_node(
        self,
        name: str,
        *,
        user: str | None = None,
        tags: Iterable[str] = (),
        available_routes: Iterable[str] = (),
        preauth_key: str | None = None,
    ) -> str:
        """Do to the server what a Tailscale client registering as ``name`` would; returns the node id.

        With ``preauth_key`` the key decides ownership (its user, or its tags for a tagged key), single-use keys
        become ``used`` and expired/used/unknown keys are refused (ValueError). Without a key the node is
        registered for ``user`` (like ``headscale nodes register``) or, with ``tags``, as a tagged node.
        """
        tags = list(tags)
        with self.lock:
            key: PreAuthKey | None = None
            owner: int | None = None
            if preauth_key is not None:
                key = self._preauth_key_for_secret(preauth_key)
                if key.expiration is not None and key.expiration < self.now:
                    raise ValueError("authkey expired")
                if key.used and not key.reusable:
                    raise ValueError("authkey already used")
                if tags:
                    raise ValueError("with a pre-auth key the node's tags come from the key (its aclTags)")
                owner, tags = key.user_id, list(key.acl_tags)
                if user is not None and (owner is None or self.users[owner].name != user):
                    raise ValueError(f"the pre-auth key does not belong to user {user!r}")
            elif user is not None:
                owner = self._user_by_name(user).id
            elif not tags:
                raise ValueError("a node needs a user, tags or a pre-auth key")
            for tag in tags:
                problem = _validate_tag(tag)
                if problem:
                    raise ValueError(problem)
            routes = _sorted_routes(available_routes)
            node = self._create_node(
                name,
                owner=None if tags else owner,
                tags=sorted(set(tags)),
                routes=routes,
                method="REGISTER_METHOD_AUTH_KEY" if key else "REGISTER_METHOD_CLI",
            )
            if key is not None:
                node.auth_key_id = key.id
                if not key.reusable:
                    key.used = True
            return str(node.id)

    # -- state operations (callers hold self.lock) ----------------------------------------------------------

    def _user_by_name(self, name: str) -> User:
        for user in self.users.values():
            if user.name == name:
                return user
        raise ValueError("user not found")

    def _create_user(self, name: str, display_name: str, email: str, picture: str) -> User:
        if any(user.name == name and not user.provider_id for user in self.users.values()):
            raise GrpcError(
                13, "creating user: creating user: constraint failed: UNIQUE constraint failed: users.name (2067)"
            )
        user_id = self._next_id("users")
        user = User(user_id, name, self.now, display_name, email, profile_pic_url=picture)
        self.users[user_id] = user
        return user

    def _create_preauth_key(
        self, owner: int | None, reusable: bool, ephemeral: bool, expiration: datetime | None, tags: Iterable[str]
    ) -> str:
        prefix, secret = _random_urlsafe(KEY_PREFIX_LENGTH), _random_urlsafe(KEY_SECRET_LENGTH)
        key_id = self._next_id("preauth_keys")
        self.preauth_keys[key_id] = PreAuthKey(
            key_id, prefix, _hash(secret), owner, reusable, ephemeral, list(tags), expiration, self.now
        )
        return f"{AUTH_KEY_PREFIX}{prefix}-{secret}"

    def _preauth_key_for_secret(self, full_key: str) -> PreAuthKey:
        rest = full_key.removeprefix(AUTH_KEY_PREFIX)
        if rest != full_key and len(rest) == KEY_PREFIX_LENGTH + 1 + KEY_SECRET_LENGTH:
            prefix, secret = rest[:KEY_PREFIX_LENGTH], rest[KEY_PREFIX_LENGTH + 1 :]
            for key in self.preauth_keys.values():
                if key.prefix == prefix and secrets.compare_digest(key.secret_hash, _hash(secret)):
                    return key
        raise ValueError("invalid authkey")

    def _free_address_index(self) -> int:
        used = {int(ipaddress.ip_address(node.ipv4)) for node in self.nodes.values()}
        base = int(ipaddress.ip_address("100.64.0.0"))
        index = 1
        while base + index in used:
            index += 1
        return index

    def _unique_given_name(self, hostname: str) -> str:
        """A DNS-label form of the hostname; a clash gets ``-1``, ``-2``… (no source for Headscale's suffix)."""
        base = _given_name(hostname)
        taken = {node.given_name for node in self.nodes.values()}
        candidate, counter = base, 0
        while candidate in taken:
            counter += 1
            candidate = f"{base[: 63 - len(str(counter)) - 1]}-{counter}"
        return candidate

    def _create_node(
        self,
        hostname: str,
        *,
        owner: int | None,
        tags: list[str],
        routes: list[str],
        method: str,
        machine_key: str | None = None,
        node_key: str | None = None,
    ) -> Node:
        index = self._free_address_index()
        node_id = self._next_id("nodes")
        node = Node(
            id=node_id,
            hostname=hostname,
            given_name=self._unique_given_name(hostname),
            user_id=owner,
            tags=tags,
            machine_key=machine_key or f"mkey:{secrets.token_hex(32)}",
            node_key=node_key or f"nodekey:{secrets.token_hex(32)}",
            disco_key=f"discokey:{secrets.token_hex(32)}",
            ipv4=str(ipaddress.ip_address("100.64.0.0") + index),
            ipv6=str(ipaddress.ip_address("fd7a:115c:a1e0::") + index),
            created_at=self.now,
            register_method=method,
            available_routes=routes,
            last_seen=self.now,
        )
        self.nodes[node_id] = node
        return node

    def _policy_document(self, text: str) -> dict[str, Any] | None:
        """Parse and validate policy text as this release does (None = empty policy, allow all); ValueError, the
        caller picks the gRPC code. Validation is the project's policy model, which decides what Headscale's
        parser decides (tests/policy/test_conformance.py), including a ``tests`` entry proven to fail."""
        if not text.strip():
            return None
        try:
            document = load_hujson(text)
        except PolicyError as exc:
            raise ValueError(f"parsing policy: {exc.problems[0].reason}") from None
        if not isinstance(document, dict):
            raise ValueError("parsing policy: the policy must be a JSON object")
        allowed = _POLICY_KEYS_029 if self.minor >= "0.29" else _POLICY_KEYS_028
        folded = {_fold_key(key) for key in allowed}  # Go's v2 decoder: any case, '_' and '-' ignored
        unknown = sorted(key for key in document if _fold_key(key) not in folded)
        if unknown:
            raise ValueError(f'parsing policy: unknown field "{unknown[0]}"')
        try:
            return policy_document(validate_policy(document, version=self.minor))
        except PolicyError as exc:
            raise ValueError(f"parsing policy: {exc.problems[0]}") from None

    def _defined_tags(self) -> set[str]:
        try:
            document = self._policy_document(self.policy_text or "")
        except ValueError:
            return set()
        owners = (document or {}).get("tagOwners") or {}
        return set(owners) if isinstance(owners, dict) else set()

    # -- JSON views -------------------------------------------------------------------------------------------

    @staticmethod
    def _user_json(user: User) -> dict[str, Any]:
        return {
            "id": str(user.id),
            "name": user.name,
            "createdAt": _ts(user.created_at),
            "displayName": user.display_name,
            "email": user.email,
            "providerId": user.provider_id,
            "provider": user.provider,
            "profilePicUrl": user.profile_pic_url,
        }

    def _tagged_devices_json(self) -> dict[str, Any]:
        return self._user_json(User(TAGGED_DEVICES_USER_ID, "tagged-devices", ZERO_TIME, "Tagged Devices"))

    def _preauth_key_json(self, key: PreAuthKey, *, full_key: str | None = None) -> dict[str, Any]:
        owner = self.users.get(key.user_id) if key.user_id is not None else None
        return {
            "user": self._user_json(owner) if owner else None,
            "id": str(key.id),
            "key": full_key or key.masked,
            "reusable": key.reusable,
            "ephemeral": key.ephemeral,
            "used": key.used,
            "expiration": _ts(key.expiration),
            "createdAt": _ts(key.created_at),
            "aclTags": list(key.acl_tags),
        }

    @staticmethod
    def _api_key_json(key: ApiKey) -> dict[str, Any]:
        return {
            "id": str(key.id),
            "prefix": key.display_prefix,
            "expiration": _ts(key.expiration),
            "createdAt": _ts(key.created_at),
            "lastSeen": _ts(key.last_seen),
        }

    def _node_json(self, node: Node) -> dict[str, Any]:
        if node.is_tagged:
            owner = self._tagged_devices_json()
        else:
            user = self.users.get(node.user_id) if node.user_id is not None else None
            owner = self._user_json(user) if user else None
        key = self.preauth_keys.get(node.auth_key_id) if node.auth_key_id is not None else None
        available = set(node.available_routes)
        return {
            "id": str(node.id),
            "machineKey": node.machine_key,
            "nodeKey": node.node_key,
            "discoKey": node.disco_key,
            "ipAddresses": [node.ipv4, node.ipv6],
            "name": node.hostname,
            "user": owner,
            "lastSeen": _ts(node.last_seen),
            "expiry": _ts(node.expiry),
            "preAuthKey": self._preauth_key_json(key) if key else None,
            "createdAt": _ts(node.created_at),
            "registerMethod": node.register_method,
            "givenName": node.given_name,
            "online": node.online,
            "approvedRoutes": list(node.approved_routes),
            "availableRoutes": list(node.available_routes),
            "subnetRoutes": [route for route in node.approved_routes if route in available],
            "tags": list(node.tags),
        }

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
                if key.prefix == prefix and secrets.compare_digest(key.secret_hash, _hash(secret)):
                    return key.expiration is None or key.expiration >= self.now
        return False

    def _route(self, method: str, path: str) -> tuple[_Route, dict[str, str]] | GrpcError:
        matches = [(route, found) for route in self._routes if (found := route.regex.fullmatch(path))]
        for_method = [(route, found) for route, found in matches if route.method == method]
        if not for_method:
            # grpc-gateway's routing errors: 404 → NotFound, 405 → Unimplemented (served as 501).
            return GrpcError(12, "Method Not Allowed") if matches else GrpcError(5, "Not Found")
        route, found = max(for_method, key=lambda item: item[0].literal_segments)
        return route, {name: unquote(value) for name, value in found.groupdict().items()}

    def _respond(self, method: str, path: str, raw_query: str, auth: str | None, raw_body: bytes) -> _Response:
        if path == "/health" and method == "GET":
            return _Response(200, "application/health+json", b'{"status":"pass"}', {"status": "pass"})
        if path == "/version" and method == "GET":
            if self.reported_version == "":
                return _Response.text(404, "404 page not found\n")
            commit, built, go = _VERSION_INFO[self.version]
            info = {
                "version": self.reported_version or f"v{self.version}",
                "commit": commit,
                "buildTime": built,
                "go": {"version": go, "os": "linux", "arch": "amd64"},
                "dirty": False,
            }
            return _Response.json(200, info)
        if not path.startswith("/api/v1/"):
            return _Response.text(404, "404 page not found\n")
        if not self._authorized(auth):
            return _Response.text(401, "Unauthorized")
        try:
            routed = self._route(method, path)
            if isinstance(routed, GrpcError):
                raise routed
            route, path_params = routed
            body, present = _decode_body(route.body, raw_body) if route.body is not None else ({}, set())
            path_values = {name: self._path_value(name, value) for name, value in path_params.items()}
            query, query_present = _decode_query(self._query_kinds(route), raw_query)
            call = _Call(path_values, query, body, present | query_present)
            with self.lock:
                result = getattr(self, f"_op_{route.handler}")(call)
            return _Response.json(200, result)
        except GrpcError as exc:
            return _Response.json(exc.http_status, exc.body())

    def _query_kinds(self, route: _Route) -> FieldKinds:
        if route.handler == "expire_node" and self.minor >= "0.29":
            return {**route.query, "disableExpiry": "bool"}
        return route.query

    @staticmethod
    def _path_value(name: str, value: str) -> Any:
        if name not in _PATH_UINT_PARAMS:
            return value
        try:
            return _go_parse_uint(value, base0=True)
        except ValueError as exc:
            raise _invalid(f"type mismatch, parameter: {_snake(name)}, error: {exc}") from None

    # -- operations: users ------------------------------------------------------------------------------------

    def _op_list_users(self, call: _Call) -> dict[str, Any]:
        users = sorted(self.users.values(), key=lambda u: u.id)
        if call.query["name"]:
            users = [u for u in users if u.name == call.query["name"]]
        elif call.query["email"]:
            users = [u for u in users if u.email == call.query["email"]]
        elif call.query["id"]:
            users = [u for u in users if u.id == call.query["id"]]
        return {"users": [self._user_json(u) for u in users]}

    def _op_create_user(self, call: _Call) -> dict[str, Any]:
        body = call.body
        user = self._create_user(body["name"], body["displayName"], body["email"], body["pictureUrl"])
        return {"user": self._user_json(user)}

    def _op_rename_user(self, call: _Call) -> dict[str, Any]:
        user = self.users.get(call.path["oldId"])
        if user is None:
            raise _unknown("user not found")
        new_name = call.path["newName"]
        if any(other.name == new_name and other.id != user.id for other in self.users.values()):
            raise _unknown("updating user: constraint failed: UNIQUE constraint failed: users.name (2067)")
        user.name = new_name
        return {"user": self._user_json(user)}

    def _op_delete_user(self, call: _Call) -> dict[str, Any]:
        user = self.users.get(call.path["id"])
        if user is None:
            raise _unknown("user not found")
        if any(node.user_id == user.id for node in self.nodes.values()):
            raise _unknown("user not empty: node(s) found")
        for key_id in [k.id for k in self.preauth_keys.values() if k.user_id == user.id]:
            self._drop_preauth_key(key_id)
        del self.users[user.id]
        return {}

    # -- operations: API keys ---------------------------------------------------------------------------------

    def _op_list_api_keys(self, call: _Call) -> dict[str, Any]:
        return {"apiKeys": [self._api_key_json(k) for k in sorted(self.api_keys.values(), key=lambda k: k.id)]}

    def _op_create_api_key(self, call: _Call) -> dict[str, Any]:
        return {"apiKey": self.add_api_key(expiration=call.body["expiration"] or ZERO_TIME)}

    def _api_key_by(self, key_id: int, prefix: str) -> ApiKey:
        if key_id and prefix:
            raise _invalid("provide either id or prefix, not both")
        if key_id:
            found = self.api_keys.get(key_id)
        elif prefix:
            wanted = self._parse_api_key_prefix(prefix)
            found = next((k for k in self.api_keys.values() if k.prefix == wanted), None)
        else:
            raise _invalid("must provide id or prefix")
        if found is None:
            raise _unknown("api key not found")
        return found

    @staticmethod
    def _parse_api_key_prefix(text: str) -> str:
        """Accept the listed form ``hskey-api-<prefix>-***``, ``hskey-api-<prefix>`` or the bare 12 chars."""
        if len(text) == KEY_PREFIX_LENGTH and _URLSAFE_RE.fullmatch(text):
            return text
        if text.startswith(API_KEY_PREFIX):
            rest = text[len(API_KEY_PREFIX) :]
            if len(rest) < KEY_PREFIX_LENGTH:
                raise _unknown("failed to parse ApiKey: prefix too short")
            if not _URLSAFE_RE.fullmatch(rest[:KEY_PREFIX_LENGTH]):
                raise _unknown("failed to parse ApiKey: prefix contains invalid characters")
            return rest[:KEY_PREFIX_LENGTH]
        return text

    def _op_expire_api_key(self, call: _Call) -> dict[str, Any]:
        self._api_key_by(call.body["id"], call.body["prefix"]).expiration = self.now
        return {}

    def _op_delete_api_key(self, call: _Call) -> dict[str, Any]:
        key = self._api_key_by(call.query["id"], call.path["prefix"])
        del self.api_keys[key.id]
        return {}

    # -- operations: pre-auth keys ----------------------------------------------------------------------------

    def _op_list_preauth_keys(self, call: _Call) -> dict[str, Any]:
        keys = sorted(self.preauth_keys.values(), key=lambda k: k.id)
        return {"preAuthKeys": [self._preauth_key_json(k) for k in keys]}

    def _op_create_preauth_key(self, call: _Call) -> dict[str, Any]:
        body = call.body
        for tag in body["aclTags"]:
            problem = _validate_tag(tag)
            if problem:
                raise _invalid(problem)
        owner: int | None = None
        if body["user"]:
            if body["user"] not in self.users:
                raise _unknown("user not found")
            owner = body["user"]
        if owner is None and not body["aclTags"]:
            raise _unknown("auth-key must be either tagged or owned by user")
        expiration = body["expiration"] or ZERO_TIME
        full = self._create_preauth_key(owner, body["reusable"], body["ephemeral"], expiration, body["aclTags"])
        key = self.preauth_keys[self._ids["preauth_keys"]]
        return {"preAuthKey": self._preauth_key_json(key, full_key=full)}

    def _op_expire_preauth_key(self, call: _Call) -> dict[str, Any]:
        key = self.preauth_keys.get(call.body["id"])
        if key is not None:  # 0.28/0.29 answer {} for an unknown id (only main makes it an error)
            key.expiration = self.now
        return {}

    def _drop_preauth_key(self, key_id: int) -> None:
        for node in self.nodes.values():
            if node.auth_key_id == key_id:
                node.auth_key_id = None
        self.preauth_keys.pop(key_id, None)

    def _op_delete_preauth_key(self, call: _Call) -> dict[str, Any]:
        self._drop_preauth_key(call.query["id"])
        return {}

    # -- operations: nodes ------------------------------------------------------------------------------------

    def _node(self, node_id: int, error: GrpcError) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            raise error
        return node

    def _op_list_nodes(self, call: _Call) -> dict[str, Any]:
        nodes = sorted(self.nodes.values(), key=lambda n: n.id)
        if call.query["user"]:
            try:
                owner = self._user_by_name(call.query["user"])
            except ValueError:
                raise _unknown("user not found") from None
            nodes = [n for n in nodes if n.user_id == owner.id and not n.is_tagged]
        return {"nodes": [self._node_json(n) for n in nodes]}

    def _op_get_node(self, call: _Call) -> dict[str, Any]:
        return {"node": self._node_json(self._node(call.path["nodeId"], GrpcError(5, "node not found")))}

    def _op_delete_node(self, call: _Call) -> dict[str, Any]:
        node = self._node(call.path["nodeId"], GrpcError(5, "node not found"))
        del self.nodes[node.id]
        return {}

    def _op_rename_node(self, call: _Call) -> dict[str, Any]:
        node_id, new_name = call.path["nodeId"], call.path["newName"]
        if not _DNS_LABEL_RE.fullmatch(new_name):
            raise _unknown(f"invalid given name {json.dumps(new_name)}: not a lowercase DNS label of 1-63 characters")
        node = self._node(node_id, _unknown(f"node no longer exists in NodeStore: {node_id}"))
        if any(other.given_name == new_name and other.id != node.id for other in self.nodes.values()):
            raise _unknown(f"node name is not unique: {new_name}")
        node.given_name = new_name
        return {"node": self._node_json(node)}

    def _op_set_tags(self, call: _Call) -> dict[str, Any]:
        tags = call.body["tags"]
        if not tags:
            raise _invalid("cannot remove all tags from a node - tagged nodes must have at least one tag")
        for tag in tags:
            problem = _validate_tag(tag)
            if problem:
                raise _unknown(problem)
        node = self._node(call.path["nodeId"], GrpcError(5, "node not found"))
        defined = self._defined_tags()
        invalid = [tag for tag in tags if tag not in defined]
        if invalid:
            raise _invalid(f"requested tags [{' '.join(invalid)}] are invalid or not permitted")
        node.tags = sorted(set(tags))
        node.user_id = None  # tags and user ownership are mutually exclusive; the conversion is one-way
        return {"node": self._node_json(node)}

    def _op_set_approved_routes(self, call: _Call) -> dict[str, Any]:
        routes: list[str] = []
        for route in call.body["routes"]:
            try:
                prefix = parse_prefix(route)
            except ValueError as exc:
                raise _unknown(f"parsing route: {exc}") from None
            routes += _EXIT_ROUTES if prefix.text in _EXIT_ROUTES else (prefix.text,)
        node_id = call.path["nodeId"]
        node = self._node(node_id, _invalid(f"node no longer exists in NodeStore: {node_id}"))
        node.approved_routes = _sorted_routes(routes)
        return {"node": self._node_json(node)}

    def _op_expire_node(self, call: _Call) -> dict[str, Any]:
        disable = bool(call.query.get("disableExpiry"))
        if disable and "expiry" in call.present:
            raise _invalid("cannot set both disable_expiry and expiry")
        node_id = call.path["nodeId"]
        node = self._node(node_id, _unknown(f"node no longer exists in NodeStore: {node_id}"))
        node.expiry = None if disable else (call.query["expiry"] or self.now)
        return {"node": self._node_json(node)}

    def _op_backfill_node_ips(self, call: _Call) -> dict[str, Any]:
        if not call.query["confirmed"]:
            raise _unknown("not confirmed, aborting")
        return {"changes": []}

    # -- operations: registration cache ---------------------------------------------------------------------

    def _registration_id(self, text: str) -> str:
        if self.minor >= "0.29":
            if not text.startswith(AUTH_REQUEST_PREFIX):
                raise ValueError(f'auth ID has invalid prefix: expected prefix "{AUTH_REQUEST_PREFIX}"')
            expected = len(AUTH_REQUEST_PREFIX) + REGISTRATION_ID_LENGTH
            if len(text) != expected:
                raise ValueError(f"auth ID has invalid length: expected {expected}, got {len(text)}")
        elif len(text) != REGISTRATION_ID_LENGTH:
            raise ValueError(f"registration ID has invalid length: expected {REGISTRATION_ID_LENGTH}, got {len(text)}")
        return text

    def _op_debug_create_node(self, call: _Call) -> dict[str, Any]:
        body = call.body
        try:
            owner = self._user_by_name(body["user"])
            routes = _sorted_routes(body["routes"])
            registration_id = self._registration_id(body["key"])
        except ValueError as exc:
            raise _unknown(str(exc)) from None
        pending = PendingRegistration(
            body["name"], owner.id, routes, f"mkey:{secrets.token_hex(32)}", f"nodekey:{secrets.token_hex(32)}"
        )
        self.pending_registrations[registration_id] = pending
        preview = Node(
            id=0,
            hostname=body["name"],
            given_name=body["name"],
            user_id=owner.id,
            tags=[],
            machine_key=pending.machine_key,
            node_key=pending.node_key,
            disco_key="",
            ipv4="",
            ipv6="",
            created_at=ZERO_TIME,
            register_method="REGISTER_METHOD_UNSPECIFIED",
            available_routes=routes,
            last_seen=ZERO_TIME,
            expiry=ZERO_TIME,
        )
        shown = self._node_json(preview)
        shown["ipAddresses"] = []
        return {"node": shown}

    def _register_pending(self, username: str, registration: str) -> dict[str, Any]:
        try:
            registration_id = self._registration_id(registration)
        except ValueError as exc:
            raise _unknown(str(exc)) from None
        try:
            owner = self._user_by_name(username)
        except ValueError:
            raise _unknown("looking up user: user not found") from None
        pending = self.pending_registrations.pop(registration_id, None)
        if pending is None:
            raise _unknown("node not found in registration cache")
        node = self._create_node(
            pending.hostname,
            owner=owner.id,
            tags=[],
            routes=pending.routes,
            method="REGISTER_METHOD_CLI",
            machine_key=pending.machine_key,
            node_key=pending.node_key,
        )
        return {"node": self._node_json(node)}

    def _op_register_node_api(self, call: _Call) -> dict[str, Any]:
        return self._register_pending(call.query["user"], call.query["key"])

    def _op_auth_register(self, call: _Call) -> dict[str, Any]:
        return self._register_pending(call.body["user"], call.body["authId"])

    def _auth_decision(self, call: _Call, *, reject: bool) -> dict[str, Any]:
        auth_id = call.body["authId"]
        try:
            self._registration_id(auth_id)
        except ValueError as exc:
            raise _invalid(f"invalid auth_id: {exc}") from None
        if auth_id not in self.pending_registrations:
            raise GrpcError(5, f"no pending auth session for auth_id {auth_id}")
        if reject:
            del self.pending_registrations[auth_id]
        return {}

    def _op_auth_approve(self, call: _Call) -> dict[str, Any]:
        return self._auth_decision(call, reject=False)

    def _op_auth_reject(self, call: _Call) -> dict[str, Any]:
        return self._auth_decision(call, reject=True)

    # -- operations: policy and health ------------------------------------------------------------------------

    def _op_get_policy(self, call: _Call) -> dict[str, Any]:
        if self.policy_mode == "file":
            if self.policy_text is None:
                path = "/etc/headscale/acl.hujson"
                raise _unknown(f'reading policy from path "{path}": open {path}: no such file or directory')
            return {"policy": self.policy_text, "updatedAt": None}
        if self.policy_text is None:
            raise _unknown("loading ACL from database: acl policy not found")
        return {"policy": self.policy_text, "updatedAt": _ts(self.policy_updated_at)}

    def _op_set_policy(self, call: _Call) -> dict[str, Any]:
        if self.policy_mode != "database":
            raise _unknown("update is disabled for modes other than 'database'")
        text = call.body["policy"]
        try:
            self._policy_document(text)
        except ValueError as exc:
            raise _unknown(f"setting policy: {exc}") from None
        self.policy_text, self.policy_updated_at = text, self.now
        return {"policy": text, "updatedAt": _ts(self.policy_updated_at)}

    def _op_check_policy(self, call: _Call) -> dict[str, Any]:
        try:
            self._policy_document(call.body["policy"])
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        return {}

    def _op_health(self, call: _Call) -> dict[str, Any]:
        return {"databaseConnectivity": True}

    # -- exchange bookkeeping ---------------------------------------------------------------------------------

    def _contract_problems(
        self, method: str, path: str, query: dict[str, str | list[str]], body: Any, response: _Response
    ) -> list[str]:
        if self.contract is None or not path.startswith("/api/v1/"):
            return []
        problems = self.contract.request_problems(method, path, query, body)
        problems += self.contract.response_problems(method, path, response.status, response.value)
        where = f"{method} {path}"
        return [problem if problem.startswith(where) else f"{where}: {problem}" for problem in problems]


# ---------------------------------------------------------------------------------------------------------------
# HTTP plumbing


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeHeadscale

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (or a stop() that drops them) are normal here; anything else is still printed."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


_GRPC_CODE_FOR_STATUS = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6, 429: 8, 499: 1, 501: 12, 503: 14, 504: 4}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server
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

    def _send(self, response: _Response) -> None:
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

    def _fault_response(self, fault: _Fault, real: _Response | None) -> _Response | None:
        if fault.kind == "unauthorized":
            return _Response.text(401, "Unauthorized")
        if fault.kind == "status":
            code = _GRPC_CODE_FOR_STATUS.get(fault.status, 2)
            return _Response.json(fault.status, {"code": code, "message": "injected fault", "details": []})
        if fault.kind == "malformed":
            payload = real.payload[: max(1, len(real.payload) // 2)] if real is not None else self._fault_body
            if payload.strip() in (b"{}", b""):
                payload = self._fault_body
            return _Response(200, "application/json", payload, payload.decode(errors="replace"))
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
        query = _plain_query(raw_query)
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
            response = _Response.json(500, {"code": 13, "message": f"fake headscale bug: {exc!r}", "details": []})
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
        self, fault: _Fault, real: _Response | None, method: str, path: str, query: dict[str, Any], body: Any
    ) -> None:
        response = self._fault_response(fault, real)
        if response is None:
            self.server.fake._record(RecordedRequest(method, path, query, body, None, None, fault.kind), [])
            self._reset()
        else:
            entry = RecordedRequest(method, path, query, body, response.status, response.value, fault.kind)
            self.server.fake._record(entry, [])
            self._send(response)


# ---------------------------------------------------------------------------------------------------------------
# A Headscale that is not there


UNREACHABLE_MODES = ("refuse", "blackhole", "silent")


def _fill_accept_queue(port: int) -> list[socket.socket]:
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
        self._sockets += _fill_accept_queue(port)

    def stop(self) -> None:
        for sock in reversed(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()
        self._sockets.clear()

    def __enter__(self) -> Unreachable:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = [
    "FAULT_KINDS",
    "SUPPORTED_VERSIONS",
    "TAGGED_DEVICES_USER_ID",
    "UNREACHABLE_MODES",
    "ZERO_TIME",
    "ApiKey",
    "FakeHeadscale",
    "GrpcError",
    "Node",
    "PendingRegistration",
    "PreAuthKey",
    "RecordedRequest",
    "Unreachable",
    "User",
    "format_timestamp",
    "parse_prefix",
    "parse_timestamp",
]
