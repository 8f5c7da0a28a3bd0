"""Property values on the provider protocol's wire: ``google.protobuf.Struct`` <-> plain Python, secrets, unknowns.

The engine sends and expects property maps as Structs whose special values are objects tagged with a signature key
(a secret is ``{SIG_KEY: SECRET_SIG, "value": ...}``) or a sentinel string (an unknown). The stand-in keeps those
shapes as they come, so a secret input stays a secret in the outputs it is copied to, and unwraps them only where a
value is computed from (``plain``). Hand-built rather than ``pulumi.runtime.rpc``'s (de)serializers: those are
async, need a configured runtime, and turn secrets into SDK objects the engine never sent.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

#: The protocol's constants (pulumi/sdk ``resource/sig`` and ``plugin/rpc.go``), the same in every language SDK.
SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def to_python(struct: struct_pb2.Struct | None) -> dict[str, Any]:
    """A property map as plain Python (numbers are floats, as on the wire); an absent map is empty."""
    if struct is None:
        return {}
    return json_format.MessageToDict(struct)


def to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    """A property map for the wire; ``None`` values are left out (the engine reads an absent key as null)."""
    struct = struct_pb2.Struct()
    struct.update({key: value for key, value in values.items() if value is not None})
    return struct


def secret(value: Any) -> dict[str, Any]:
    """``value`` marked secret (a value already secret is not wrapped twice)."""
    return value if is_secret(value) else {SIG_KEY: SECRET_SIG, "value": value}


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG


def plain(value: Any) -> Any:
    """``value`` with every secret marker removed, at any depth: what generation and comparison work on."""
    if is_secret(value):
        return plain(value.get("value"))
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def has_unknown(value: Any) -> bool:
    """Whether ``value`` is, or holds, a value the engine does not know yet (a preview's computed input)."""
    value = plain(value)
    if isinstance(value, dict):
        return any(has_unknown(item) for item in value.values())
    if isinstance(value, list):
        return any(has_unknown(item) for item in value)
    return value == UNKNOWN
