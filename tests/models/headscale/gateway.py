"""What grpc-gateway does between HTTP and Headscale's handlers: routing, and decoding a request into a :class:`Call`.

The route table is the fake's own copy: it must work without the swagger files. Decoding follows grpc-gateway and
protojson: the body with DiscardUnknown (unknown fields dropped, ``null`` means unset), path parameters with Go's
``strconv``, query parameters the way ``PopulateQueryParameters`` reads them; each failure is the InvalidArgument
(or routing) error the real gateway answers with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, unquote

from tests.models.headscale.wire import GrpcError, invalid_argument, parse_timestamp

FieldKinds = Mapping[str, str]  # field name → "string" | "uint64" | "bool" | "timestamp" | "strings"


@dataclass(frozen=True)
class Route:
    """One REST route: method, path template, the operation it calls and the kinds of its body and query fields."""

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
ROUTES: tuple[Route, ...] = (
    Route("GET", "/api/v1/apikey", "list_api_keys"),
    Route("POST", "/api/v1/apikey", "create_api_key", body={"expiration": "timestamp"}),
    Route("POST", "/api/v1/apikey/expire", "expire_api_key", body={"prefix": "string", "id": "uint64"}),
    Route("DELETE", "/api/v1/apikey/{prefix}", "delete_api_key", query={"id": "uint64"}),
    Route(
        "POST",
        "/api/v1/debug/node",
        "debug_create_node",
        body={"user": "string", "key": "string", "name": "string", "routes": "strings"},
    ),
    Route("GET", "/api/v1/health", "health"),
    Route("GET", "/api/v1/node", "list_nodes", query={"user": "string"}),
    Route("POST", "/api/v1/node/backfillips", "backfill_node_ips", query={"confirmed": "bool"}),
    Route("POST", "/api/v1/node/register", "register_node_api", query={"user": "string", "key": "string"}),
    Route("GET", "/api/v1/node/{nodeId}", "get_node"),
    Route("DELETE", "/api/v1/node/{nodeId}", "delete_node"),
    Route("POST", "/api/v1/node/{nodeId}/approve_routes", "set_approved_routes", body={"routes": "strings"}),
    Route("POST", "/api/v1/node/{nodeId}/expire", "expire_node", query={"expiry": "timestamp"}),
    Route("POST", "/api/v1/node/{nodeId}/rename/{newName}", "rename_node"),
    Route("POST", "/api/v1/node/{nodeId}/tags", "set_tags", body={"tags": "strings"}),
    Route("GET", "/api/v1/policy", "get_policy"),
    Route("PUT", "/api/v1/policy", "set_policy", body={"policy": "string"}),
    Route("POST", "/api/v1/policy/check", "check_policy", body={"policy": "string"}, new_in="0.29"),
    Route("GET", "/api/v1/preauthkey", "list_preauth_keys"),
    Route(
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
    Route("DELETE", "/api/v1/preauthkey", "delete_preauth_key", query={"id": "uint64"}),
    Route("POST", "/api/v1/preauthkey/expire", "expire_preauth_key", body={"id": "uint64"}),
    Route("GET", "/api/v1/user", "list_users", query={"id": "uint64", "name": "string", "email": "string"}),
    Route(
        "POST",
        "/api/v1/user",
        "create_user",
        body={"name": "string", "displayName": "string", "email": "string", "pictureUrl": "string"},
    ),
    Route("DELETE", "/api/v1/user/{id}", "delete_user"),
    Route("POST", "/api/v1/user/{oldId}/rename/{newName}", "rename_user"),
    Route("POST", "/api/v1/auth/register", "auth_register", body={"user": "string", "authId": "string"}, new_in="0.29"),
    Route("POST", "/api/v1/auth/approve", "auth_approve", body={"authId": "string"}, new_in="0.29"),
    Route("POST", "/api/v1/auth/reject", "auth_reject", body={"authId": "string"}, new_in="0.29"),
)
_DEFAULTS: dict[str, Any] = {"string": "", "uint64": 0, "bool": False, "timestamp": None, "strings": []}


def routes_for(minor: str) -> tuple[Route, ...]:
    """The routes release ``minor`` (``0.29``) serves."""
    return tuple(route for route in ROUTES if route.new_in is None or minor >= route.new_in)


def match_route(routes: tuple[Route, ...], method: str, path: str) -> tuple[Route, dict[str, str]] | GrpcError:
    """The route for ``method`` and ``path`` (the most literal one wins) and its path parameters, or the error."""
    matches = [(route, found) for route in routes if (found := route.regex.fullmatch(path))]
    for_method = [(route, found) for route, found in matches if route.method == method]
    if not for_method:
        # grpc-gateway's routing errors: 404 → NotFound, 405 → Unimplemented (served as 501).
        return GrpcError(12, "Method Not Allowed") if matches else GrpcError(5, "Not Found")
    route, found = max(for_method, key=lambda item: item[0].literal_segments)
    return route, {name: unquote(value) for name, value in found.groupdict().items()}


@dataclass
class Call:
    """A decoded request: path parameters, query fields and body fields with protobuf defaults filled in."""

    path: dict[str, Any]
    query: dict[str, Any]
    body: dict[str, Any]
    present: set[str]


def decode_call(route: Route, path_params: dict[str, str], raw_query: str, raw_body: bytes, *, minor: str) -> Call:
    """Decode one request for ``route`` in the gateway's order (body, path, query): the first failure is raised."""
    body, present = _decode_body(route.body, raw_body) if route.body is not None else ({}, set())
    path_values = {name: _path_value(name, value) for name, value in path_params.items()}
    query, query_present = _decode_query(_query_kinds(route, minor), raw_query)
    return Call(path_values, query, body, present | query_present)


def _query_kinds(route: Route, minor: str) -> FieldKinds:
    if route.handler == "expire_node" and minor >= "0.29":
        return {**route.query, "disableExpiry": "bool"}
    return route.query


def _path_value(name: str, value: str) -> Any:
    if name not in _PATH_UINT_PARAMS:
        return value
    try:
        return _go_parse_uint(value, base0=True)
    except ValueError as exc:
        raise invalid_argument(f"type mismatch, parameter: {_snake(name)}, error: {exc}") from None


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


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
                raise invalid_argument(f'proto: duplicate field "{key}"')
            seen[canonical] = value
        return seen

    try:
        document = json.loads(raw, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise invalid_argument(f"proto: syntax error (line {exc.lineno}:{exc.colno}): {exc.msg}") from None
    except UnicodeDecodeError:
        raise invalid_argument("proto: syntax error (line 1:1): invalid UTF-8") from None
    if not isinstance(document, dict):
        token = "null" if document is None else json.dumps(document)[:1]
        raise invalid_argument(f"proto: syntax error (line 1:1): unexpected token {token}")
    present = set()
    for name, kind in kinds.items():
        if name not in document or document[name] is None:
            continue
        values[name] = _decode_field(name, kind, document[name])
        present.add(name)
    return values, present


def _decode_strings(name: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise invalid_argument(f"proto: syntax error (line 1:1): unexpected token {json.dumps(value)}")
    for item in value:
        if not isinstance(item, str):
            raise invalid_argument(f"proto: invalid value for string field {name}: {json.dumps(item)}")
    return list(value)


def _decode_string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise invalid_argument(f"proto: invalid value for string field {name}: {json.dumps(value)}")
    return value


def _decode_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid_argument(f"proto: invalid value for bool field {name}: {json.dumps(value)}")
    return value


def _decode_uint64(name: str, value: Any) -> int:
    """A JSON number or a decimal string (protojson's form of 64-bit integers) in range; never a boolean."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64:
        return value
    if isinstance(value, str) and value.isdigit() and value.isascii() and int(value) < 2**64:
        return int(value)
    raise invalid_argument(f"proto: invalid value for uint64 field {name}: {json.dumps(value)}")


def _decode_timestamp(name: str, value: Any) -> datetime:
    if not isinstance(value, str):
        raise invalid_argument(f"proto: unexpected token {json.dumps(value)[:1]} for timestamp field {name}")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise invalid_argument(f"proto: {exc}") from None


_FIELD_DECODERS: dict[str, Callable[[str, Any], Any]] = {
    "strings": _decode_strings,
    "string": _decode_string,
    "bool": _decode_bool,
    "uint64": _decode_uint64,
    "timestamp": _decode_timestamp,
}


def _decode_field(name: str, kind: str, value: Any) -> Any:
    """One present body field of ``kind``, as protojson decodes it (InvalidArgument with protojson's wording)."""
    decoder = _FIELD_DECODERS.get(kind)
    if decoder is None:
        raise AssertionError(kind)
    return decoder(name, value)


def _decode_query(kinds: FieldKinds, raw_query: str) -> tuple[dict[str, Any], set[str]]:
    """Query parameters the way grpc-gateway's PopulateQueryParameters reads them (unknown names ignored)."""
    if ";" in raw_query:
        raise invalid_argument("invalid semicolon separator in query")
    parsed = parse_qs(raw_query, keep_blank_values=True)
    values = {name: _DEFAULTS[kind] for name, kind in kinds.items()}
    present = set()
    for name, kind in kinds.items():
        given = parsed.get(name, []) + parsed.get(_snake(name), []) if _snake(name) != name else parsed.get(name, [])
        if not given:
            continue
        if len(given) > 1:
            raise invalid_argument(f'too many values for field "{name}": {", ".join(given)}')
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
            raise invalid_argument(f'parsing field "{name}": {exc}') from None
        present.add(name)
    return values, present


def _parse_query_timestamp(text: str) -> datetime:
    try:
        return parse_timestamp(text)
    except ValueError:
        layout = "2006-01-02T15:04:05.999999999Z07:00"
        raise ValueError(f"parsing time {json.dumps(text)} as {json.dumps(layout)}: cannot parse") from None


def plain_query(raw_query: str) -> dict[str, str | list[str]]:
    parsed = parse_qs(raw_query, keep_blank_values=True)
    return {name: values[0] if len(values) == 1 else values for name, values in parsed.items()}


@dataclass
class Response:
    """An answer ready to send: status, content type and bytes, and the value the records and contract checks see."""

    status: int
    content_type: str
    payload: bytes
    value: Any  # parsed JSON or text, for recording and contract checks

    @classmethod
    def json(cls, status: int, value: Any) -> Response:
        return cls(status, "application/json", json.dumps(value, separators=(",", ":")).encode(), value)

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(status, content_type, text.encode(), text)
