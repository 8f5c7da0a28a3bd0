"""Two dumps compared stack by stack: for each stack its resources paired, each pair's change, what a change
loses, what it does to the workloads and the policy, and the outputs and config that change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.diff.changes import StackContext, compare
from tools.diff.effects import policy_changes, policy_document, workload_effect
from tools.diff.findings import findings_for, stateful_namespaces
from tools.diff.report import Change, Finding, Report, StackDiff, show_value
from tools.diff.resources import Pair, Resource, match_resources
from tools.fields import ABSENT, OUTPUT_RECORD_KEYS, diff_values


def _resources(entry: Mapping[str, Any] | None) -> dict[str, Resource]:
    return {r["urn"]: Resource.from_dump(r) for r in (entry or {}).get("resources") or []}


def _stack_name(entry: Mapping[str, Any]) -> str:
    return entry["stack"] if entry.get("role", "site") == "site" else f"{entry['stack']} (identity)"


def _config_changes(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    lines = []
    old, new = base.get("secureConfig") or {}, head.get("secureConfig") or {}
    for key in sorted(set(old) | set(new)):
        if key not in old:
            lines.append(f"{key}: secure value added")
        elif key not in new:
            lines.append(f"{key}: secure value removed")
        elif old[key] != new[key]:
            lines.append(f"{key}: secure value changed (its ciphertext; re-encrypting the same value shows here too)")
    old, new = base.get("kubernetesConfig") or {}, head.get("kubernetesConfig") or {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            lines.append(f"{key}: {show_value(old.get(key, ABSENT))} -> {show_value(new.get(key, ABSENT))}")
    return lines


def _describe_effects(change: Change, pair: Pair, recovery: Any) -> None:
    """The workload effect and the policy rules of an update (a replacement says enough on its own)."""
    if change.action != "update" or not (pair.base.is_kubernetes and pair.head.is_kubernetes):
        return
    change.effect = workload_effect(pair.base.inputs, pair.head.inputs, [f.path for f in change.fields], recovery)
    for item in change.fields:
        old, new = policy_document(item.old), policy_document(item.new)
        if old is not None and new is not None:
            change.policy += policy_changes(old, new)


def diff_stack(name: str, base: Mapping[str, Any] | None, head: Mapping[str, Any] | None) -> StackDiff:
    """Compare one stack's dumps (either may be None: a stack file added or removed)."""
    result = StackDiff(name=name)
    if head is not None and head.get("error"):
        result.errors.append(f"does not plan in the working tree: {head['error']}")
        return result
    if base is not None and base.get("error"):
        result.notes.append(f"the base does not plan ({base['error']}): not compared; the head plans")
        return result
    if base is None:
        result.notes.append("new stack: its stack file is new in the working tree")
    if head is None:
        count = len((base or {}).get("resources") or [])
        result.notes.append(
            f"stack file removed: this repository no longer manages the deployed stack; removing the file destroys "
            f"nothing (`pulumi destroy` of the stack would delete its {count} resources)"
        )
        return result
    old_resources, new_resources = _resources(base), _resources(head)
    ctx = StackContext(
        base=old_resources,
        head=new_resources,
        head_config=head.get("kubernetesConfig") or {},
        stateful_namespaces=stateful_namespaces(old_resources),
    )
    pairs, deleted, created = match_resources(old_resources, new_resources)
    recovery = (head.get("outputs") or {}).get("recovery")
    # Findings by URN: a dump lists resources in registration order, which varies between runs.
    findings: list[tuple[str, list[Finding]]] = []
    for pair in pairs:
        change = compare(pair, ctx)
        if change is not None:
            _describe_effects(change, pair, recovery)
            result.changes.append(change)
            findings.append((change.urn, findings_for(change, pair.base, pair.head, ctx)))
    for resource in deleted:
        change = Change("delete", resource.label, resource.urn, resource.type, resource.name)
        if resource.retain:
            change.notes.append("retainOnDelete: Pulumi forgets it, the object (or the patched fields) stays")
        if resource.protect:
            change.notes.append("protected: `pulumi up` refuses to delete it until `pulumi state unprotect`")
        result.changes.append(change)
        findings.append((change.urn, findings_for(change, resource, None, ctx)))
    result.findings = [f for _, found in sorted(findings, key=lambda item: item[0]) for f in found]
    for resource in created:
        result.changes.append(Change("create", resource.label, resource.urn, resource.type, resource.name))
    if base is not None:
        result.outputs = diff_values(
            base.get("outputs") or {}, head.get("outputs") or {}, keys=OUTPUT_RECORD_KEYS, align=True
        )
        result.config = _config_changes(base, head)
    return result


def diff_dumps(base: Mapping[str, Any], head: Mapping[str, Any], stacks: Sequence[str] | None = None) -> Report:
    """Compare two dumps stack by stack (every stack asked for in either, or those named in ``stacks``)."""
    report = Report(
        base_label=str(base.get("label", "base")),
        head_label=str(head.get("label", "head")),
        notes=sorted({*base.get("notes", []), *head.get("notes", [])}),
    )
    old: Mapping[str, Mapping[str, Any]] = base.get("stacks") or {}
    new: Mapping[str, Mapping[str, Any]] = head.get("stacks") or {}
    entries = {k: new.get(k) or old.get(k) or {} for k in {**old, **new}}  # the head's entry, else the base's
    keys = [k for k, entry in entries.items() if entry.get("requested", True)]
    if stacks:
        names = {entry["stack"]: k for k, entry in entries.items()}
        missing = [s for s in stacks if s not in names]
        if missing:
            report.errors.append(f"no stack named {', '.join(missing)} in the base or the head")
        keys = [k for k in keys if entries[k]["stack"] in stacks]
    order = {"identity": 0, "site": 1}
    for key in sorted(keys, key=lambda k: (order.get(entries[k].get("role", "site"), 2), k)):
        stack = diff_stack(_stack_name(entries[key]), old.get(key), new.get(key))
        if stack.changed:
            report.stacks.append(stack)
    return report
