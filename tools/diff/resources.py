"""A dump's resources, and which base and head resources are the same resource.

A resource is keyed by its URN (type, parent chain and name). A base and a head resource are the same resource
(``match_resources``) by URN, then by an alias of the head one (``alias_urns``), then as the same Kubernetes object,
then, among resources of one type, by similar inputs: a delete and a create paired so are one replacement.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tools.fields import is_secret


@dataclass(frozen=True)
class Resource:
    """One resource of a dump."""

    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: Any
    protect: bool = False
    retain: bool = False
    provider: str | None = None
    aliases: tuple[Any, ...] = ()
    ignore_changes: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool | None = None

    @classmethod
    def from_dump(cls, entry: Mapping[str, Any]) -> Resource:
        return cls(
            urn=entry["urn"],
            type=entry["type"],
            name=entry["name"],
            parent=entry.get("parent"),
            custom=bool(entry.get("custom", True)),
            inputs=entry.get("inputs") or {},
            protect=bool(entry.get("protect")),
            retain=bool(entry.get("retainOnDelete")),
            provider=entry.get("provider"),
            aliases=tuple(entry.get("aliases") or ()),
            ignore_changes=tuple(entry.get("ignoreChanges") or ()),
            replace_on_changes=tuple(entry.get("replaceOnChanges") or ()),
            delete_before_replace=entry.get("deleteBeforeReplace"),
        )

    @property
    def is_kubernetes(self) -> bool:
        return (
            self.custom
            and self.type.startswith("kubernetes:")
            and isinstance(self.inputs, dict)
            and "apiVersion" in self.inputs
            and "kind" in self.inputs
        )

    @property
    def is_patch(self) -> bool:
        return self.is_kubernetes and self.type.endswith("Patch")

    @property
    def kind(self) -> str:
        return str(self.inputs.get("kind")) if self.is_kubernetes else ""

    @property
    def metadata(self) -> dict[str, Any]:
        metadata = self.inputs.get("metadata") if self.is_kubernetes else None
        return metadata if isinstance(metadata, dict) else {}

    @property
    def object_name(self) -> str:
        return str(self.metadata.get("name") or self.name)

    @property
    def namespace(self) -> str | None:
        namespace = self.metadata.get("namespace")
        return str(namespace) if namespace else None

    @property
    def object_id(self) -> tuple[str, str | None, str] | None:
        """(kind, namespace, name): what the API server knows the object by (its apiVersion aside)."""
        return (self.kind, self.namespace, self.object_name) if self.is_kubernetes else None

    @property
    def object_text(self) -> str:
        return f"{self.namespace}/{self.object_name}" if self.namespace else self.object_name

    @property
    def label(self) -> str:
        if self.is_kubernetes:
            patch = " (patch)" if self.is_patch else ""
            return f"{self.kind}{patch} {self.object_text}"
        return f"{self.type} {self.name}"


def urn_parts(urn: str) -> tuple[str, str, str, str] | None:
    """(stack, project, qualified type, name) of ``urn:pulumi:<stack>::<project>::<qualified type>::<name>``."""
    parts = urn.split("::", 3)
    if len(parts) != 4 or not parts[0].startswith("urn:pulumi:"):
        return None
    return parts[0].removeprefix("urn:pulumi:"), parts[1], parts[2], parts[3]


def alias_urns(resource: Resource, by_urn: Mapping[str, Resource], _depth: int = 0) -> set[str]:
    """The URNs ``resource``'s aliases stand for, its parents' aliases included.

    Each in two spellings: the engine's (the parent's whole type chain, the stack left out) and the offline
    harness's (Pulumi's mock monitor: only the parent's own type, the stack included); a dump holds one of them.
    """
    parts = urn_parts(resource.urn)
    if parts is None or _depth > 50:
        return set()
    stack, project, _, _ = parts

    def urns(name: str, type_: str, parent: str | None, stack_: str, project_: str) -> set[str]:
        parent_parts = urn_parts(parent) if parent else None
        if parent_parts is None:
            return {f"urn:pulumi:{stack_}::{project_}::{type_}::{name}"}
        chain = parent_parts[2]
        engine = type_ if chain.endswith("pulumi:pulumi:Stack") else f"{chain}${type_}"
        mock = f"{chain.rsplit('$', 1)[-1]}${type_}"
        return {f"urn:pulumi:{stack_}::{project_}::{t}::{name}" for t in (engine, mock)}

    found: set[str] = set()
    for alias in resource.aliases:
        if not isinstance(alias, dict):
            continue
        if alias.get("urn"):
            found.add(str(alias["urn"]))
            continue
        spec = alias.get("spec") or {}
        parent = None if spec.get("noParent") else (spec.get("parentUrn") or resource.parent)
        found |= urns(
            spec.get("name") or resource.name,
            spec.get("type") or resource.type,
            parent,
            spec.get("stack") or stack,
            spec.get("project") or project,
        )
    parent = by_urn.get(resource.parent or "")
    if parent is not None:
        for parent_alias in alias_urns(parent, by_urn, _depth + 1):
            found |= urns(resource.name, resource.type, parent_alias, stack, project)
    found.discard(resource.urn)
    return found


def _leaves(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict) and not is_secret(value):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{prefix}[{index}]")
    else:
        yield f"{prefix}={json.dumps(value, sort_keys=True)}"


def _leaf_set(resource: Resource) -> frozenset[str]:
    return frozenset(x for x in _leaves(resource.inputs) if not x.startswith(".metadata.name="))


def similarity(a: Resource | frozenset[str], b: Resource | frozenset[str]) -> float:
    """Jaccard similarity of the inputs' leaves (path=value), metadata.name aside."""
    left = a if isinstance(a, frozenset) else _leaf_set(a)
    right = b if isinstance(b, frozenset) else _leaf_set(b)
    if not left and not right:
        return 0.0
    return len(left & right) / len(left | right)


#: Inputs at least this similar pair a deleted and a created resource of one type as a replacement.
SIMILARITY_THRESHOLD = 0.6


@dataclass(frozen=True)
class Pair:
    """A base and a head resource that are the same resource (``how``: urn, alias, object, similar)."""

    base: Resource
    head: Resource
    how: str


def match_resources(
    base: Mapping[str, Resource], head: Mapping[str, Resource]
) -> tuple[list[Pair], list[Resource], list[Resource]]:
    """(pairs, deleted, created): by URN, then aliases, then Kubernetes object identity, then type and inputs."""
    pairs = [Pair(base[u], head[u], "urn") for u in head if u in base]
    left = {u: r for u, r in base.items() if u not in head}
    right = {u: r for u, r in head.items() if u not in base}
    for urn, resource in list(right.items()):
        for alias in sorted(alias_urns(resource, head)):
            if alias in left:
                pairs.append(Pair(left.pop(alias), right.pop(urn), "alias"))
                break
    by_object = {r.object_id: u for u, r in left.items() if r.object_id is not None}
    for urn, resource in list(right.items()):
        old = by_object.get(resource.object_id) if resource.object_id is not None else None
        if old is not None and old in left:
            pairs.append(Pair(left.pop(old), right.pop(urn), "the same Kubernetes object"))
    leaves = {u: _leaf_set(r) for u, r in [*left.items(), *right.items()] if r.custom}
    candidates = sorted(
        (
            (similarity(leaves[bu], leaves[hu]), bu, hu)
            for bu, b in left.items()
            for hu, h in right.items()
            if b.type == h.type and b.custom and h.custom
        ),
        reverse=True,
    )
    for score, bu, hu in candidates:
        if score >= SIMILARITY_THRESHOLD and bu in left and hu in right:
            pairs.append(Pair(left.pop(bu), right.pop(hu), f"similar inputs ({score:.0%})"))
    for type_ in {r.type for r in left.values() if not r.custom}:
        olds = [u for u, r in left.items() if r.type == type_ and not r.custom]
        news = [u for u, r in right.items() if r.type == type_ and not r.custom]
        if len(olds) == 1 and len(news) == 1:
            pairs.append(Pair(left.pop(olds[0]), right.pop(news[0]), "the only component of its type"))
    return pairs, list(left.values()), list(right.values())
