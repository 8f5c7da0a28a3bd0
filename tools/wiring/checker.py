"""The findings of one run, and the resolution of one reference: what every rule calls.

`Checker.ref` resolves a reference (and the data keys it names) against the model, enforces that an `optional: true`
reference is declared as an OptionalRef, and reports what does not resolve with the consequence the rule gives;
`Checker.report` records any other broken wiring a rule finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tools.wiring.manifest import api_group, as_dict, ref_label, ref_name, scope
from tools.wiring.model import Holder, RenderedSet, Target
from tools.wiring.operators import cnpg_is_replica
from tools.wiring.vocabulary import CNPG_GROUP


@dataclass(frozen=True)
class Finding:
    """One broken reference: where it is held, and what a cluster would do with it."""

    obj: str  # "Kind/namespace/name" of the object holding the reference
    path: str  # JSON-ish path inside it, e.g. "spec.template.spec.containers[0].env[3].valueFrom.secretKeyRef"
    message: str  # what is referenced, what is missing, and what would happen in a cluster

    def __str__(self) -> str:
        return f"{self.obj}: {self.path}: {self.message}"


class Checker:
    """The model a run checks, and the findings its rules report, in the order they report them."""

    def __init__(self, model: RenderedSet) -> None:
        self.model = model
        self.findings: list[Finding] = []

    def report(self, holder: Holder, path: str, message: str) -> None:
        self.findings.append(Finding(holder.ident, path, message))

    def ref(
        self,
        holder: Holder,
        path: str,
        kind: str,
        name: Any,
        *,
        consequence: str,
        namespace: str | None = None,
        optional: bool = False,
        keys: Sequence[tuple[Any, str]] = (),
        key_consequence: str = "",
    ) -> Target | None:
        """Resolve one reference (and the data keys it names); report what does not resolve."""
        name = ref_name(name)
        if name is None:
            return None
        namespace = scope(kind, namespace if namespace is not None else holder.namespace)
        target = self.model.resolve(kind, namespace, name)
        label = ref_label(kind, namespace, name, holder.namespace)
        declared = self.model.optional_keys(holder.namespace, holder.workload, name)
        if optional and declared is None:
            absent = " (and it is not rendered: pods run without it today)" if target is None else ""
            self.report(
                holder,
                path,
                f"optional reference to {label} is not declared: a pod would run silently without it{absent}; "
                "declare it as an OptionalRef saying how its absence shows, or drop `optional: true`",
            )
        if target is None:
            if not optional:
                self.report(holder, path, self.missing(kind, namespace, name, holder.namespace, consequence))
            return None
        later = (declared or frozenset()) if optional else frozenset()
        self._check_keys(holder, label, target, keys, later, key_consequence)
        return target

    def _check_keys(
        self,
        holder: Holder,
        label: str,
        target: Target,
        keys: Sequence[tuple[Any, str]],
        later: frozenset[str],
        key_consequence: str,
    ) -> None:
        """Each named key is in the target (when its keys are known), unless a running pod writes it later."""
        for key, key_path in keys:
            if key in later:
                continue  # written by a running pod; an optional source's missing key is skipped by the kubelet
            if target.keys is not None and isinstance(key, str) and key not in target.keys:
                held = ", ".join(sorted(target.keys)) or "no keys"
                origin = "" if target.source == "rendered" else f"; created by {target.source}"
                self.report(
                    holder, key_path, f"key '{key}' is not in {label} (it holds: {held}{origin}): {key_consequence}"
                )

    def missing(self, kind: str, namespace: str | None, name: str, here: str | None, consequence: str) -> str:
        """The message for a reference that resolves to nothing, with a hint where the object is elsewhere."""
        namespace = scope(kind, namespace)
        message = (
            f"{ref_label(kind, namespace, name, here)} is not rendered and not a documented external object: "
            f"{consequence}"
        )
        targets = self.model.targets
        elsewhere = sorted(str(k[1]) for k in targets if k[0] == kind and k[2] == name and k[1] != namespace)
        if elsewhere:
            message += f" (one is rendered in namespace '{elsewhere[0]}'; this reference looks in '{namespace}')"
        return message + self._cnpg_hint(kind, namespace, name)

    def _cnpg_hint(self, kind: str, namespace: str | None, name: str) -> str:
        """Why a rendered CloudNativePG Cluster does not create the `-app` / `-superuser` Secret named here."""
        if kind != "Secret":
            return ""
        for (other, other_ns, cluster), target in self.model.targets.items():
            if other != "Cluster" or other_ns != namespace or target.obj is None:
                continue
            if api_group(target.obj) != CNPG_GROUP:
                continue
            spec = as_dict(target.obj.get("spec"))
            if name == f"{cluster}-app":
                if cnpg_is_replica(cluster, spec):
                    why = "it is a replica cluster, and CloudNativePG creates no application Secret for a replica"
                else:
                    why = "its bootstrap names its own secret, or lacks database/owner"
                return f" (Cluster '{cluster}' does not create it: {why})"
            if name == f"{cluster}-superuser":
                return f" (Cluster '{cluster}' does not create it: enableSuperuserAccess is not true)"
        return ""
