"""Reading one rendered object as a plain dict: fields that may be missing or of the wrong type, reference names,
namespaces, API groups, and how an object and a reference are named in a Finding.

A wrong type is the schema check's to report, and a Pulumi unknown (a marker object) cannot be checked offline:
both read as absent here, so the rules see nothing to resolve. Pod Security admission (tools/pod_security.py) and
tools/validate.py read objects through `as_dict` and `as_list` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.wiring.vocabulary import CLUSTER_SCOPED


def as_dict(value: Any) -> Mapping[str, Any]:
    """The value when it is a mapping, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """The value when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def nested(value: Any, *path: str) -> Any:
    """The value at ``path`` inside nested mappings, or None where a step is missing or not a mapping."""
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def ref_name(value: Any) -> str | None:
    """A usable reference name; markers for unknown values (and empty strings) are not names."""
    return value if isinstance(value, str) and value else None


def is_true(value: Any) -> bool:
    return value is True


def scope(kind: str, namespace: str | None) -> str | None:
    """The namespace a reference to ``kind`` looks in: none for a cluster-scoped kind."""
    return None if kind in CLUSTER_SCOPED else namespace


def namespace_of(obj: Mapping[str, Any]) -> str | None:
    kind = obj.get("kind")
    if kind in CLUSTER_SCOPED:
        return None
    return ref_name(nested(obj, "metadata", "namespace")) or "default"


def ident(kind: str, namespace: str | None, name: str) -> str:
    """``Kind/namespace/name`` (``Kind/name`` when cluster-scoped): how a Finding names the object holding it."""
    return f"{kind}/{namespace}/{name}" if namespace is not None else f"{kind}/{name}"


def api_group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    return api_version.rsplit("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""


def ref_label(kind: str, namespace: str | None, name: str, here: str | None) -> str:
    """How a message names a referenced object: with its namespace only when that is not the holder's."""
    noun = "claim" if kind == "PersistentVolumeClaim" else kind
    return f"{noun} '{namespace}/{name}'" if namespace is not None and namespace != here else f"{noun} '{name}'"
