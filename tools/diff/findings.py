"""DATA LOSS lines and warnings: the state a replacement or deletion loses, the keys it changes, and the updates
the API server refuses.

A DATA LOSS line is written for every replaced or deleted claim, volume, identity Secret, router state Secret,
CloudNativePG Cluster, namespace holding one of them, and key material, saying what ``retainOnDelete`` does there:
the old object stays, and a new one of the same name fails to be created or adopts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tools.diff.changes import StackContext, deletes_first
from tools.diff.report import Change, Finding, short_change
from tools.diff.resources import Resource, urn_parts
from tools.kubernetes_rules import api_group, truthy

_ROUTER_STATE = re.compile(r"^subnet-router-\d+$")


def _holds(resource: Resource) -> str | None:
    """What a Kubernetes object holds that a deletion loses (Namespaces aside), or None."""
    kind, name = resource.kind, resource.object_name
    if kind == "PersistentVolumeClaim":
        return "the data on its volume"
    if kind == "PersistentVolume":
        return "the data it points to"
    if kind == "Secret" and name == "headscale-identity":
        return "the tailnet's Noise and DERP private keys"
    if kind == "Secret" and _ROUTER_STATE.match(name):
        return "a subnet router's node key"
    if kind == "Cluster" and api_group(resource.inputs.get("apiVersion")) == "postgresql.cnpg.io":
        return "the PostgreSQL database (CloudNativePG deletes its volumes with the Cluster)"
    if kind == "ConfigMap" and name.endswith("-served"):
        return "the witness that the site has served"
    return None


def stateful_namespaces(resources: Mapping[str, Resource]) -> dict[str, list[str]]:
    """Namespace → the stateful objects it holds: deleting the namespace deletes them."""
    found: dict[str, list[str]] = {}
    for resource in resources.values():
        if resource.is_kubernetes and resource.namespace and _holds(resource) and not resource.is_patch:
            found.setdefault(resource.namespace, []).append(f"{resource.kind} {resource.object_name}")
    return found


def alias_hint(old: Resource, new: Resource) -> str:
    """The alias that makes ``new`` the same Pulumi resource as ``old`` (what changed in its URN)."""
    parts = []
    if old.name != new.name:
        parts.append(f'name="{old.name}"')
    if old.type != new.type:
        parts.append(f'type_="{old.type}"')
    if old.parent != new.parent:
        old_parent = urn_parts(old.parent or "")
        parts.append(f"parent=<the {old_parent[2].rsplit('$', 1)[-1]} {old_parent[3]}>" if old_parent else "no_parent")
    return f"aliases=[pulumi.Alias({', '.join(parts)})]"


_PROTECTED = "; it is protected: `pulumi up` refuses until `pulumi state unprotect` (which is what would lose it)"


def _what(change: Change, old: Resource, *, replaced: bool) -> str:
    """``<label> replaced (<cause>)``: what a DATA LOSS line or a warning is about."""
    return f"{old.label} {'replaced' if replaced else 'deleted'} ({change.cause or 'removed from the program'})"


def _object_loss(change: Change, old: Resource, new: Resource | None, holds: str) -> Finding | None:
    """The DATA LOSS line (or warning) of a replaced or deleted stateful Kubernetes object, retainOnDelete spelled
    out: what happens to the old object, and to a new one of the same name."""
    what = _what(change, old, replaced=new is not None)
    protect = _PROTECTED if old.protect else ""
    if old.is_patch:
        if new is not None and old.object_id == new.object_id:
            return None  # the patch is applied again to the same object: nothing is deleted
        if old.retain:
            return None
        return Finding(True, f"DATA LOSS: {what}: a patch; its fields are removed from the object ({holds}){protect}")
    if new is None:
        if old.retain:
            return Finding(
                True,
                f"DATA LOSS (retained, recoverable by hand): {what}: it holds {holds}; Pulumi forgets it and the "
                "object stays in the cluster (retainOnDelete), unmanaged and used by nothing the stack deploys; a "
                "later object of the same name collides with it (pulumi-kubernetes refuses to create an existing "
                f"object) or, with PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true, adopts it as it is{protect}",
            )
        return Finding(True, f"DATA LOSS: {what}: it is deleted, and {holds} with it{protect}")
    if change.old_urn is not None and old.object_id == new.object_id and new.is_patch:
        if old.retain:
            return None  # the patch is applied to the object (never AlreadyExists); the old delete leaves it
        return Finding(
            True,
            f"DATA LOSS: {what}: the new patch applies to the object, then the old resource's delete deletes it, "
            f"and {holds} with it{protect}",
        )
    if change.old_urn is not None and old.object_id == new.object_id:
        alias = f"; to keep it, give the new resource {alias_hint(old, new)}"
        adopted = (
            "the old resource's delete leaves it (retainOnDelete): nothing is lost"
            if old.retain
            else f"the old resource's delete then deletes it, and {holds} with it"
        )
        return Finding(
            not old.retain,
            f"{'' if old.retain else 'DATA LOSS: '}{what}: the new resource is created while the old one still holds "
            "the object, so the create fails (the object exists); with PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true the "
            f"new resource adopts it and {adopted}{alias}{protect}",
        )
    if deletes_first(change, old, new):
        if old.retain:
            adopt = (
                "and the API server then refuses the changed immutable field"
                if change.immutable_field
                else "and overwrites it: the old content is lost"
            )
            return Finding(
                True,
                f"DATA LOSS: {what}: it holds {holds}; pulumi-kubernetes deletes before it creates (same name), "
                "retainOnDelete skips the delete, so the old object stays in the cluster with its data and creating "
                f"the new one fails because it exists (PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true adopts it instead, "
                f"{adopt}); applying this change means deleting the old object by hand, and {holds} with it{protect}",
            )
        return Finding(
            True,
            f"DATA LOSS: {what}: pulumi-kubernetes deletes it before it creates the new one (same name): {holds} is "
            f"gone, the new one starts empty{protect}",
        )
    old_fate = (
        f"the old one is retained in the cluster (retainOnDelete) with {holds}, but nothing uses it any more"
        if old.retain
        else f"the old one is deleted, and {holds} with it"
    )
    new_text = f"{new.kind} {new.object_text}"
    return Finding(True, f"DATA LOSS: {what}: the new {new_text} starts empty; {old_fate}{protect}")


def _refused_updates(change: Change) -> list[Finding]:
    """A warning for each field of an update that the API server refuses."""
    return [
        Finding(
            False,
            f"{change.label}: {short_change(f)}, but the API server refuses it ({f.refused}): `pulumi preview` "
            "shows an update and `pulumi up` fails; applying it takes a replacement "
            "(`pulumi up --replace <urn>`), with what replacing this object costs",
        )
        for f in (change.fields if change.action == "update" else [])
        if f.refused
    ]


def _kubernetes_loss(change: Change, old: Resource, new: Resource | None, ctx: StackContext) -> list[Finding]:
    """What replacing or deleting a Kubernetes object loses (a namespace: the stateful objects inside it)."""
    replaced = change.action == "replace"
    holds = _holds(old)
    if old.kind == "Namespace" and ctx.stateful_namespaces.get(old.object_name):
        holds = "everything inside it: " + ", ".join(sorted(ctx.stateful_namespaces[old.object_name]))
    finding = _object_loss(change, old, new if replaced else None, holds) if holds else None
    if finding is not None:
        return [finding]
    if old.protect:
        return [Finding(False, f"{_what(change, old, replaced=replaced)}{_PROTECTED}")]
    return []


def _pulumi_resource_loss(change: Change, old: Resource) -> list[Finding]:
    """What replacing or deleting a pulumi-random or Headscale provider resource loses."""
    replaced = change.action == "replace"
    what = _what(change, old, replaced=replaced)
    protect = _PROTECTED if old.protect else ""
    if old.type == "random:index/randomBytes:RandomBytes":
        fate = "a new random key replaces it" if replaced else "it is gone"
        return [
            Finding(
                True,
                f"DATA LOSS: {what}: key material that exists only in the Pulumi state; {fate} (the tailnet's "
                f"identity keys: a different server to every client, every node must re-register){protect}",
            )
        ]
    if old.type == "random:index/randomPassword:RandomPassword":
        return [
            Finding(
                False,
                f"key {'replaced' if replaced else 'deleted'}: {what}: a new random value replaces the one in the "
                f"Pulumi state; whatever holds the old one must get the new one{protect}",
            )
        ]
    if old.type in ("pulumi-python:dynamic/headscale:PreAuthKey", "pulumi-python:dynamic/headscale:ApiKey"):
        text = (
            "clients of the old key must get the new one"
            if replaced
            else "it is expired and deleted on the server: whoever holds it loses access"
        )
        return [Finding(False, f"key {'replaced' if replaced else 'deleted'}: {what}: {text}{protect}")]
    if old.type == "pulumi-python:dynamic/headscale:User":
        if truthy(old.inputs.get("forceDelete")):
            return [Finding(True, f"DATA LOSS: {what}: forceDelete: the user's nodes are deleted with it")]
        return [Finding(False, f"{what}: refused while the user has nodes (forceDelete is false): `pulumi up` fails")]
    if old.type == "pulumi-python:dynamic/headscale:NodeSettings" and truthy(old.inputs.get("deleteOnDestroy")):
        return [Finding(True, f"DATA LOSS: {what}: deleteOnDestroy: the node is deleted from Headscale")]
    if old.protect:
        return [Finding(False, f"{what}{protect}")]
    return []


def findings_for(change: Change, old: Resource | None, new: Resource | None, ctx: StackContext) -> list[Finding]:
    """DATA LOSS lines and warnings of one change: state that a replacement or deletion loses, keys that change,
    updates the API server refuses."""
    found = _refused_updates(change)
    if old is None or change.action not in ("replace", "delete"):
        return found
    if old.is_kubernetes:
        return found + _kubernetes_loss(change, old, new, ctx)
    return found + _pulumi_resource_loss(change, old)
