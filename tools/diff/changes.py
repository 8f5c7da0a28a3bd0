"""What changes for one resource, from its base to its head inputs: an update or a replacement, and why.

Replacements are predicted as the providers decide them, from the one rule table (tools/kubernetes_rules.py, which
the engine model in the tests reads too): pulumi-kubernetes on a name, namespace or forceNew field change,
pulumi-random on any input change, this project's dynamic providers on the inputs of ``DYNAMIC_REPLACES``; and as
the engine does, on ``replaceOnChanges``, a new URN (not through an alias) and a move to a provider that takes the
object for another cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tools.diff.report import Change, short_change
from tools.diff.resources import Pair, Resource
from tools.fields import IGNORED_INPUTS, FieldChange, covers, diff_values, pattern
from tools.kubernetes_rules import (
    ProviderFlags,
    changes_identity,
    deletes_before_replace,
    is_random,
    provider_replacement,
    quantity,
    refusal,
    replacing_inputs,
    replacing_rule,
)


@dataclass(frozen=True)
class StackContext:
    """What the rules of one stack need beyond the two resources."""

    base: Mapping[str, Resource]
    head: Mapping[str, Resource]
    head_config: Mapping[str, Any]
    stateful_namespaces: Mapping[str, list[str]]


def _provider_inputs(ref: str | None, resources: Mapping[str, Resource], config: Mapping[str, Any]) -> dict:
    """The inputs of the provider a resource names (None: the default provider, from the ``kubernetes:`` config)."""
    if ref:
        provider = resources.get(ref.rsplit("::", 1)[0])
        if provider is not None and isinstance(provider.inputs, dict):
            return dict(provider.inputs)
    return {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("kubernetes:")}


def _provider_flags(resource: Resource, ctx: StackContext) -> ProviderFlags:
    """The pulumi-kubernetes options of the resource's provider (explicit, or the default's stack config).

    Assumption: PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE / ..._SECRET_MUTABLE are not set where `pulumi up` runs.
    """
    return ProviderFlags.of(_provider_inputs(resource.provider, ctx.head, ctx.head_config))


def _ignored(change: FieldChange, patterns: Sequence[str]) -> bool:
    return any(covers(pattern(p), change.path) for p in patterns)


def _kubernetes_rules(
    old: Resource, new: Resource, fields: list[FieldChange], ctx: StackContext
) -> tuple[list[tuple[str, str, bool]], list[FieldChange]]:
    """([(cause, reason, the API server refuses it as an update)] of a replacement, the fields with API refusals
    marked) for a Kubernetes object (the rules: tools/kubernetes_rules.py)."""
    reasons: list[tuple[str, str, bool]] = []
    marked: list[FieldChange] = []
    flags = _provider_flags(new, ctx)
    for change in fields:
        replaced_by = replacing_rule(change, old.inputs, new.inputs, flags)
        if replaced_by is not None:
            refuses = replaced_by.api_refuses or refusal(change, old.inputs, new.inputs, flags) is not None
            why = (
                replaced_by.why
                if "pulumi-kubernetes" in replaced_by.why
                else f"{replaced_by.why}; pulumi-kubernetes replaces"
            )
            reasons.append((short_change(change), f"{short_change(change)}: {why}", refuses))
            marked.append(change)
            continue
        refused = refusal(change, old.inputs, new.inputs, flags)
        note = None
        if new.kind == "PersistentVolumeClaim" and change.path == ("spec", "resources", "requests", "storage"):
            before, after = quantity(change.old), quantity(change.new)
            if refused is None and before is not None and after is not None:
                note = "expansion: needs allowVolumeExpansion on the StorageClass"
        if new.kind == "Service" and change.path == ("spec", "type") and "ExternalName" in (change.old, change.new):
            note = "to or from ExternalName: the API releases or allocates the cluster IP"
        marked.append(FieldChange(change.path, change.old, change.new, refused=refused, note=note or change.note))
    return reasons, marked


def _provider_move(old: Resource, new: Resource, ctx: StackContext) -> str | None:
    """Why moving a Kubernetes object to another provider replaces it (the engine asks the new provider's
    DiffConfig, tools/kubernetes_rules.provider_replacement); None: it stays, and only its provider changes."""
    before = _provider_inputs(old.provider, ctx.base, ctx.head_config)
    after = _provider_inputs(new.provider, ctx.head, ctx.head_config)
    return provider_replacement(before, after)


def _options(old: Resource, new: Resource, *, provider_moves: bool = True) -> list[FieldChange]:
    pairs = (
        ("protect", old.protect, new.protect),
        ("retainOnDelete", old.retain, new.retain),
        ("provider", old.provider, new.provider) if provider_moves else ("provider", None, None),
        ("deleteBeforeReplace", old.delete_before_replace, new.delete_before_replace),
        ("ignoreChanges", list(old.ignore_changes), list(new.ignore_changes)),
        ("replaceOnChanges", list(old.replace_on_changes), list(new.replace_on_changes)),
    )
    return [FieldChange(("options", key), a, b) for key, a, b in pairs if a != b]


def deletes_first(change: Change, old: Resource, new: Resource) -> bool:
    """Whether the replacement deletes the old object first: the ``deleteBeforeReplace`` option when set, else
    pulumi-kubernetes' answer (tools/kubernetes_rules.deletes_before_replace) for the same resource."""
    if new.delete_before_replace is not None:
        return new.delete_before_replace
    return change.old_urn is None and deletes_before_replace(old.inputs, new.inputs)


def _identity(change: Change, pair: Pair) -> None:
    """A head resource paired with a base one of another URN: the same resource through an alias, else a
    replacement (the engine sees a delete and a create)."""
    old, new = pair.base, pair.head
    if pair.how == "alias":
        change.old_urn = old.urn
        change.notes.append(f"the same resource through an alias (no replacement): was {old.urn}")
    elif pair.how != "urn":
        change.old_urn = old.urn
        change.replace_because(
            "Pulumi resource identity changed",
            f"Pulumi resource identity changed, from {old.urn} to {new.urn} (paired by {pair.how})",
        )


def _kubernetes_object(
    change: Change, old: Resource, new: Resource, fields: list[FieldChange], ctx: StackContext
) -> list[FieldChange]:
    """The replacement reasons and notes of a Kubernetes object's change; returns its fields, refusals marked (a
    name or namespace change is the identity's, not a field's). An object without metadata.name goes by its Pulumi
    name here, so a new one of those is another object too; one that gains or loses metadata.name under the same
    text is another object all the same (pulumi-kubernetes names it itself, or no longer does)."""
    moved = [f for f in fields if changes_identity(f)]
    if moved or old.object_text != new.object_text:
        cause = ", ".join(short_change(f) for f in moved) or "object identity changed"
        names = f"{old.kind} {old.object_text} -> {new.kind} {new.object_text}"
        change.replace_because(
            cause,
            f"the Kubernetes object changed identity, {names if old.object_text != new.object_text else cause}: "
            "pulumi-kubernetes creates the new object, then deletes the old one",
        )
        fields = [f for f in fields if f not in moved]
    if old.inputs.get("apiVersion") != new.inputs.get("apiVersion"):
        change.notes.append("apiVersion changed: the same object at another version, updated in place (assumed)")
    reasons, fields = _kubernetes_rules(old, new, fields, ctx)
    for cause, reason, refuses in reasons:
        change.replace_because(cause, reason)
        change.immutable_field = change.immutable_field or refuses
    if change.reasons and deletes_first(change, old, new):
        change.notes.append("same name: pulumi-kubernetes deletes the old object before it creates the new one")
    return fields


def _other_provider(change: Change, new: Resource, fields: list[FieldChange]) -> None:
    """The replacement reasons of a pulumi-random or dynamic provider resource's change."""
    replacing = replacing_inputs(new.type, fields)
    if replacing:
        text = ", ".join(short_change(f) for f in replacing)
        why = (
            f"pulumi-random replaces on any input change: {text}"
            if is_random(new.type)
            else f"its provider replaces on {text}"
        )
        change.replace_because(text, why)


def _provider_moves(change: Change, old: Resource, new: Resource, ctx: StackContext) -> bool:
    """Whether a change of the resource's provider is a step of its own: False when the engine just moves a
    Kubernetes object to the new provider; a move that replaces it is a reason of ``change``."""
    if not (new.is_kubernetes and old.provider != new.provider):
        return True
    why = _provider_move(old, new, ctx)
    if why:
        change.replace_because(
            "provider changed", f"its provider changed and {why}: the engine replaces it, creating first"
        )
        return True
    return False


def compare(pair: Pair, ctx: StackContext) -> Change | None:
    """The change from ``pair.base`` to ``pair.head`` (None when nothing changes)."""
    old, new = pair.base, pair.head
    all_fields = [
        f
        for f in diff_values(old.inputs, new.inputs)
        if not (f.path and isinstance(f.path[0], str) and f.path[0] in IGNORED_INPUTS)
    ]
    ignored = [f for f in all_fields if _ignored(f, new.ignore_changes)]
    fields = [f for f in all_fields if f not in ignored]
    change = Change(action="update", label=new.label, urn=new.urn, type=new.type, name=new.name)
    _identity(change, pair)
    if ignored:
        change.notes.append("not applied (ignoreChanges): " + ", ".join(sorted({f.text for f in ignored})))
    if new.is_kubernetes and old.is_kubernetes:
        fields = _kubernetes_object(change, old, new, fields, ctx)
    else:
        _other_provider(change, new, fields)
    on_changes = [f for f in fields if _ignored(f, new.replace_on_changes)]
    if on_changes:
        text = ", ".join(short_change(f) for f in on_changes)
        change.replace_because(text, f"replaceOnChanges: {text}")
    provider_moves = _provider_moves(change, old, new, ctx)
    change.fields = fields + _options(old, new, provider_moves=provider_moves)
    if change.reasons:
        change.action = "replace"
    elif not change.fields and pair.how == "urn":
        return None  # nothing, or only what ignoreChanges keeps from being applied
    return change
