"""Check REST exchanges against the Swagger 2.0 document a Headscale release ships.

Headscale 0.25 to 0.29 generate ``headscale.swagger.json`` from the same protobuf definitions that drive the
grpc-gateway, so the document is the closest thing to a wire contract. This module turns it into JSON Schema and
answers two questions per exchange: is the request something the real gateway defines, and does the response have
the exact shape the gateway would marshal (every field present, ids as strings, no extra keys)?

The real gateway is more lenient than this checker on purpose: it silently drops unknown JSON fields and query
parameters. A client that sends them has a bug the server will never report, which is exactly what a contract
checker is for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote

from jsonschema import Draft7Validator, FormatChecker

PROJECT_DIR = Path(__file__).resolve().parents[3]
SWAGGER_RELATIVE = Path("gen/openapiv2/headscale/v1/headscale.swagger.json")

Mode = Literal["request", "response"]

#: grpc-gateway's ``HTTPStatusFromCode``: the HTTP status a gRPC status code is served with.
GRPC_HTTP_STATUS: dict[int, int] = {
    0: 200,
    1: 499,
    2: 500,
    3: 400,
    4: 504,
    5: 404,
    6: 409,
    7: 403,
    8: 429,
    9: 400,
    10: 409,
    11: 400,
    12: 501,
    13: 500,
    14: 503,
    15: 500,
    16: 401,
}

_UINT_RE = re.compile(r"[0-9]+")
_INT_RE = re.compile(r"-?[0-9]+")
_RFC3339_RE = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})T(?P<time>\d{2}:\d{2}:\d{2})(?P<frac>\.\d{1,9})?(?P<tz>Z|[+-]\d{2}:\d{2})"
)
_GO_BOOLS = {"true", "false"}
_INT_FORMATS = {"uint64": _UINT_RE, "int64": _INT_RE, "uint32": _UINT_RE, "int32": _INT_RE}


def normalize_version(version: str) -> str:
    """``"v0.28.0"`` and ``"0.28.0"`` name the same release; the reference tree uses the bare form."""
    return version[1:] if version.startswith("v") else version


def find_swagger(version: str, shared_dir: Path | None = None) -> Path | None:
    """The release's swagger file under ``<repo>/../shared/reference/headscale``, or None when it is not there."""
    base = shared_dir if shared_dir is not None else PROJECT_DIR.parent / "shared"
    path = base / "reference" / "headscale" / normalize_version(version) / SWAGGER_RELATIVE
    return path if path.is_file() else None


def is_rfc3339(text: str, *, utc_only: bool = False) -> bool:
    """RFC 3339 as protojson reads and writes timestamps; responses always use the ``Z`` form."""
    match = _RFC3339_RE.fullmatch(text)
    if match is None:
        return False
    if utc_only and match["tz"] != "Z":
        return False
    year, month, day = (int(part) for part in match["date"].split("-"))
    hour, minute, second = (int(part) for part in match["time"].split(":"))
    return year >= 1 and 1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61


def _format_checker(mode: Mode) -> FormatChecker:
    checker = FormatChecker(formats=())

    @checker.checks("date-time")
    def _date_time(value: object) -> bool:
        return not isinstance(value, str) or is_rfc3339(value, utc_only=mode == "response")

    return checker


class SwaggerSchemaConverter:
    """Swagger 2.0 schema objects → JSON Schema draft 7, in a request or a response flavour.

    Both flavours close objects (``additionalProperties: false`` unless the document says otherwise) and allow
    ``null`` for message and timestamp fields (protojson's marshalling of an unset field). The response flavour
    also requires every property (grpc-gateway emits unpopulated fields) and 64-bit integers as strings; the request
    flavour accepts 64-bit integers as strings or numbers, like the gateway does.
    """

    def __init__(self, definitions: Mapping[str, Any], mode: Mode) -> None:
        self.definitions = definitions
        self.mode = mode

    def definitions_schema(self) -> dict[str, Any]:
        return {name: self.convert(schema) for name, schema in self.definitions.items()}

    def _is_message_ref(self, ref: str) -> bool:
        target = self.definitions.get(ref.rsplit("/", 1)[-1], {})
        return target.get("type", "object") == "object" and "enum" not in target

    def convert(self, schema: Mapping[str, Any], *, as_field: bool = False) -> dict[str, Any]:
        """Convert one schema; ``as_field`` marks a property value (where protojson may emit ``null``)."""
        if "$ref" in schema:
            ref = {"$ref": schema["$ref"]}
            if as_field and self._is_message_ref(schema["$ref"]):
                # if/else rather than anyOf: errors inside the message keep their own paths.
                return {"if": {"type": "null"}, "else": ref}
            return ref
        kind = schema.get("type")
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema)
        if kind == "array":
            return {"type": "array", "items": self.convert(schema.get("items", {}))}
        if kind == "string":
            return self._string(schema, as_field=as_field)
        if kind in {"integer", "number", "boolean"}:
            converted: dict[str, Any] = {"type": kind}
            if "enum" in schema:
                converted["enum"] = list(schema["enum"])
            return converted
        return {}

    def _object(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        properties = {name: self.convert(sub, as_field=True) for name, sub in schema.get("properties", {}).items()}
        converted: dict[str, Any] = {"type": "object", "properties": properties}
        extra = schema.get("additionalProperties")
        if extra is None:
            converted["additionalProperties"] = False
            if self.mode == "response" and properties:
                converted["required"] = list(properties)
        else:
            converted["additionalProperties"] = self.convert(extra) if extra else True
        return converted

    def _string(self, schema: Mapping[str, Any], *, as_field: bool) -> dict[str, Any]:
        fmt = schema.get("format")
        if fmt in _INT_FORMATS:
            pattern = f"^{_INT_FORMATS[fmt].pattern}$"
            as_string = {"type": "string", "pattern": pattern}
            if self.mode == "response":
                return as_string
            number: dict[str, Any] = {"type": "integer"}
            if fmt.startswith("u"):
                number["minimum"] = 0
            return {"anyOf": [as_string, number]}
        converted: dict[str, Any] = {"type": ["string", "null"] if fmt == "date-time" and as_field else "string"}
        if fmt == "date-time":
            converted["format"] = "date-time"
        if "enum" in schema:
            converted["enum"] = list(schema["enum"])
        return converted


@dataclass(frozen=True)
class Operation:
    """One method on one path template of the swagger, with its parameters and schemas."""

    method: str
    template: str
    operation_id: str
    path_params: Mapping[str, Mapping[str, Any]]
    query_params: Mapping[str, Mapping[str, Any]]
    body_schema: Mapping[str, Any] | None
    response_schema: Mapping[str, Any] | None
    error_schema: Mapping[str, Any] | None
    _regex: re.Pattern[str] = field(repr=False, compare=False)

    @property
    def literal_segments(self) -> int:
        """How specific the template is: literal segments win over ``{variables}`` (``/apikey/expire``)."""
        return sum(1 for part in self.template.split("/") if part and not part.startswith("{"))

    def match(self, path: str) -> dict[str, str] | None:
        """Path parameters (percent-decoded) when ``path`` fits the template, else None."""
        found = self._regex.fullmatch(path)
        if found is None:
            return None
        return {name: unquote(value) for name, value in found.groupdict().items()}


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^/{}]+\})", template)
    pattern = "".join(f"(?P<{part[1:-1]}>[^/]*)" if part.startswith("{") else re.escape(part) for part in parts)
    return re.compile(pattern)


class SwaggerContract:
    """The request/response contract of one Headscale release, from its ``headscale.swagger.json``."""

    def __init__(self, source: Path | str | Mapping[str, Any] | None = None, *, version: str | None = None) -> None:
        """``source`` is a path or an already-loaded document; without one, ``version`` finds it under ../shared."""
        if source is None:
            if version is None:
                raise ValueError("give the swagger document (path or mapping) or a Headscale version")
            source = find_swagger(version)
            if source is None:
                raise FileNotFoundError(f"no headscale.swagger.json for Headscale {normalize_version(version)}")
        if isinstance(source, Mapping):
            document: Mapping[str, Any] = source
            self.path: Path | None = None
        else:
            self.path = Path(source)
            document = json.loads(self.path.read_text(encoding="utf-8"))
        if document.get("swagger") != "2.0":
            raise ValueError("not a Swagger 2.0 document")
        self.version = normalize_version(version) if version else None
        self.document = document
        definitions = document.get("definitions", {})
        self._definitions = {mode: SwaggerSchemaConverter(definitions, mode).definitions_schema() for mode in _MODES}
        self._checkers = {mode: _format_checker(mode) for mode in _MODES}
        self.operations: tuple[Operation, ...] = tuple(self._load_operations(document))

    @classmethod
    def for_version(cls, version: str, shared_dir: Path | None = None) -> SwaggerContract:
        """Load the document of a release from ../shared; FileNotFoundError when this machine lacks it."""
        path = find_swagger(version, shared_dir)
        if path is None:
            raise FileNotFoundError(f"no headscale.swagger.json for Headscale {normalize_version(version)}")
        return cls(path, version=version)

    def _load_operations(self, document: Mapping[str, Any]) -> list[Operation]:
        operations = []
        for template, methods in document.get("paths", {}).items():
            for method, spec in methods.items():
                if method.startswith("x-") or method == "parameters":
                    continue
                params = spec.get("parameters", [])
                body = next((param for param in params if param.get("in") == "body"), None)
                responses = spec.get("responses", {})
                operations.append(
                    Operation(
                        method=method.upper(),
                        template=template,
                        operation_id=spec.get("operationId", f"{method} {template}"),
                        path_params={p["name"]: p for p in params if p.get("in") == "path"},
                        query_params={p["name"]: p for p in params if p.get("in") == "query"},
                        body_schema=body.get("schema") if body else None,
                        response_schema=responses.get("200", {}).get("schema"),
                        error_schema=responses.get("default", {}).get("schema"),
                        _regex=_template_regex(template),
                    )
                )
        return operations

    # -- routing ---------------------------------------------------------------------------------------------

    def operation(self, method: str, path: str) -> Operation | None:
        """The operation serving ``method path``; the most literal template wins, as in the gateway."""
        candidates = [op for op in self.operations if op.method == method.upper() and op.match(path) is not None]
        return max(candidates, key=lambda op: op.literal_segments, default=None)

    def allowed_methods(self, path: str) -> list[str]:
        """Methods the swagger defines on any template matching ``path`` (empty: unknown route)."""
        return sorted({op.method for op in self.operations if op.match(path) is not None})

    # -- schema validation ------------------------------------------------------------------------------------

    def _validate(self, schema: Mapping[str, Any], instance: Any, mode: Mode, where: str) -> list[str]:
        root = {**SwaggerSchemaConverter(self.document.get("definitions", {}), mode).convert(schema)}
        root["definitions"] = self._definitions[mode]
        validator = Draft7Validator(root, format_checker=self._checkers[mode])
        problems = set()
        for error in validator.iter_errors(instance):
            location = "/".join(str(part) for part in error.absolute_path) or "(root)"
            problems.add(f"{where} {location}: {_describe(error)}")
        return sorted(problems)

    def request_problems(
        self, method: str, path: str, query: Mapping[str, str | Sequence[str]] | None = None, body: Any = None
    ) -> list[str]:
        """Everything in the request the swagger does not define or allow (route, parameters, body)."""
        op = self.operation(method, path)
        if op is None:
            allowed = self.allowed_methods(path)
            if allowed:
                return [f"{method.upper()} {path}: method not in the swagger (the path allows {', '.join(allowed)})"]
            return [f"{method.upper()} {path}: no such route in the swagger"]
        problems = []
        for name, value in (op.match(path) or {}).items():
            problems += _scalar_problems(op.path_params.get(name, {}), value, f"path parameter {name}")
        for name, raw in (query or {}).items():
            spec = op.query_params.get(name)
            if spec is None:
                problems.append(f"query parameter {name!r} is not defined for {op.operation_id}")
                continue
            values = [raw] if isinstance(raw, str) else list(raw)
            if len(values) != 1:
                problems.append(f"query parameter {name!r} given {len(values)} times")
            for value in values:
                problems += _scalar_problems(spec, value, f"query parameter {name}")
        if op.body_schema is None:
            if body is not None:
                problems.append(f"{op.operation_id} takes no request body")
        elif body is None:
            problems.append(f"{op.operation_id} requires a JSON request body")
        else:
            problems += self._validate(op.body_schema, body, "request", "request body")
        return problems

    def response_problems(self, method: str, path: str, status: int, body: Any) -> list[str]:
        """Everything in the response that the real gateway would not produce for this operation."""
        if status == 401 and body == "Unauthorized":
            return []  # Headscale's auth middleware answers before the gateway, in plain text.
        op = self.operation(method, path)
        if status == 200:
            if op is None:
                return [f"{method.upper()} {path}: 200 for a route the swagger does not define"]
            if op.response_schema is None:
                return []
            return self._validate(op.response_schema, body, "response", "response body")
        schema = op.error_schema if op is not None and op.error_schema else {"$ref": "#/definitions/rpcStatus"}
        problems = self._validate(schema, body, "response", f"error response ({status})")
        code = body.get("code") if isinstance(body, Mapping) else None
        if not problems and isinstance(code, int) and GRPC_HTTP_STATUS.get(code, 500) != status:
            expected = GRPC_HTTP_STATUS.get(code, 500)
            problems.append(f"error response: HTTP {status} for gRPC code {code} (the gateway serves {expected})")
        return problems


_MODES: tuple[Mode, Mode] = ("request", "response")


def _describe(error: Any) -> str:
    """A jsonschema error in one line; anyOf failures name what was wrong instead of repeating the instance."""
    if error.validator == "anyOf" and error.context:
        reasons = sorted({sub.message for sub in error.context})
        shown = repr(error.instance)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"{shown} matches none of: " + "; ".join(reasons)
    return str(error.message)


def _scalar_problems(spec: Mapping[str, Any], value: str, where: str) -> list[str]:
    """Path and query values arrive as text; check them against the parameter's type and format."""
    kind, fmt = spec.get("type"), spec.get("format")
    if fmt in _INT_FORMATS and not _INT_FORMATS[fmt].fullmatch(value):
        return [f"{where}: {value!r} is not a decimal {fmt}"]
    if kind == "boolean" and value not in _GO_BOOLS:
        return [f"{where}: {value!r} is not 'true' or 'false'"]
    if fmt == "date-time" and not is_rfc3339(value):
        return [f"{where}: {value!r} is not an RFC 3339 timestamp"]
    return []


__all__ = [
    "GRPC_HTTP_STATUS",
    "Operation",
    "SwaggerContract",
    "SwaggerSchemaConverter",
    "find_swagger",
    "is_rfc3339",
    "normalize_version",
]
