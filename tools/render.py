"""Pure views of a ProgramRun: the resource tree, Kubernetes YAML, outputs JSON. Secrets never appear."""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from typing import Any

import yaml

from tools.harness import ProgramRun, RegisteredResource, Secret, Unknown


class _ManifestDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when present (plans write thousands of scalars); multi-line strings as `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)

REDACTED = "[secret]"
UNKNOWN_TEXT = "[unknown]"
_SECRET_DATA = base64.b64encode(REDACTED.encode()).decode()
_FIRST_KEYS = ("apiVersion", "kind", "metadata")


def redact(value: Any) -> Any:
    """Replace secret and unknown markers with printable stand-ins; sort mapping keys for stable output."""
    if isinstance(value, Secret):
        return REDACTED
    if isinstance(value, Unknown):
        return UNKNOWN_TEXT
    if isinstance(value, dict):
        return {k: redact(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def manifest(obj: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes object as it would be applied, with every Secret value redacted whatever its marking."""
    clean = redact(obj)
    if clean.get("kind") == "Secret" and clean.get("apiVersion") == "v1":
        if isinstance(clean.get("data"), dict):
            clean["data"] = {k: _SECRET_DATA for k in clean["data"]}
        if isinstance(clean.get("stringData"), dict):
            clean["stringData"] = {k: REDACTED for k in clean["stringData"]}
    ordered = {k: clean[k] for k in _FIRST_KEYS if k in clean}
    ordered.update({k: v for k, v in clean.items() if k not in _FIRST_KEYS})
    return ordered


def manifest_path(obj: dict[str, Any]) -> str:
    """Relative file name of an object: ``<namespace or _cluster>/<kind>-<name>.yaml``."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or "_cluster"
    name = re.sub(r"[^a-z0-9.\-]", "_", str(metadata.get("name", "unnamed")).lower())
    return f"{namespace}/{str(obj.get('kind', 'object')).lower()}-{name}.yaml"


def manifests(run: ProgramRun) -> dict[str, str]:
    """Every Kubernetes object of the run as YAML text, keyed by relative path."""
    files: dict[str, str] = {}
    for resource in run.resources:
        if not resource.is_kubernetes_object:
            continue
        obj = manifest(resource.inputs)
        path = manifest_path(obj)
        if path in files:
            raise ValueError(f"two Kubernetes objects render to {path}; names must be unique per kind")
        files[path] = yaml.dump(obj, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False, width=120)
    return dict(sorted(files.items()))


def outputs_json(run: ProgramRun) -> str:
    return json.dumps(redact(run.outputs), indent=2, sort_keys=True) + "\n"


def resource_tree(run: ProgramRun) -> str:
    """Type and name of every resource, indented under its parent, with a count."""
    children: dict[str | None, list[RegisteredResource]] = defaultdict(list)
    known = {r.urn for r in run.resources}
    for resource in run.resources:
        parent = resource.parent_urn if resource.parent_urn in known else None
        children[parent].append(resource)
    lines = [f"stack {run.stack} of {run.project}: {len(run.resources)} resources"]

    def walk(parent: str | None, prefix: str) -> None:
        items = sorted(children.get(parent, []), key=lambda r: (r.type, r.name))
        for index, resource in enumerate(items):
            last = index == len(items) - 1
            lines.append(f"{prefix}{'└─ ' if last else '├─ '}{resource.type}  {resource.name}")
            walk(resource.urn, prefix + ("   " if last else "│  "))

    walk(None, "")
    return "\n".join(lines)
