"""The model of the rendered set: what a reference can land on, who holds it, and the pod templates.

Built once per check from the rendered objects, the External objects the user provides and the declared
OptionalRefs: every rendered object is a target; so is whatever a rendered object makes a controller create
(cert-manager's Secret for a Certificate, CloudNativePG's Secrets, Services and ServiceAccount for a Cluster, a
StatefulSet's claims: see operators.py). The pod templates are the workloads' own and the pods operators run
(CloudNativePG's instances, VolSync's movers), which count for selectors but have no spec to check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from headscale_ha.program.externals import External, OptionalRef
from tools.wiring.manifest import api_group, as_dict, as_list, ident, namespace_of, nested, ref_name, scope
from tools.wiring.operators import certificate_keys, cnpg_secrets, cnpg_services
from tools.wiring.vocabulary import (
    BUILTIN_CLUSTER_ROLES,
    CERT_MANAGER_GROUP,
    CNPG_GROUP,
    CNPG_ROLES,
    CNPG_SERVICE_PORTS,
    POD_TEMPLATE_PATHS,
    VOLSYNC_GROUP,
    VOLSYNC_MOVER_LABELS,
    cnpg_instance_labels,
)

Key = tuple[str, str | None, str]  # (kind, namespace or None when cluster-scoped, name)


@dataclass(frozen=True)
class Target:
    """Something a reference can land on: rendered, provided by a rendered object, built in, or External."""

    source: str  # "rendered", or who creates it
    keys: frozenset[str] | None = None  # data keys; None = not known
    obj: Mapping[str, Any] | None = None  # the rendered object
    ports: frozenset[int | str] | None = None  # for Services the set does not render; None = not known


@dataclass(frozen=True)
class Holder:
    """The object holding references: its Finding name, its `Kind/name` and its namespace."""

    ident: str
    workload: str
    namespace: str | None

    @property
    def name(self) -> str:
        return self.workload.split("/", 1)[1]


@dataclass(frozen=True)
class PodTemplate:
    """A pod template of a rendered workload, or the pods an operator runs for a rendered object (spec None)."""

    holder: Holder
    kind: str
    labels: Mapping[str, Any]
    spec: Mapping[str, Any] | None
    path: str  # of the pod spec inside the holder
    claim_templates: frozenset[str] = frozenset()  # StatefulSet volumeClaimTemplates: mountable like volumes

    @property
    def namespace(self) -> str | None:
        return self.holder.namespace


@dataclass(frozen=True)
class DoubleOwner:
    """An object a controller creates from a rendered one (by `path` in `holder`) that the set also renders."""

    holder: Holder
    path: str
    kind: str
    name: str
    source: str  # who creates it


def data_keys(obj: Mapping[str, Any]) -> frozenset[str] | None:
    """Keys of a Secret (data + stringData) or ConfigMap (data + binaryData); None when the data is not known."""
    fields = {"Secret": ("data", "stringData"), "ConfigMap": ("data", "binaryData")}.get(str(obj.get("kind")))
    if fields is None:
        return None
    keys: set[str] = set()
    for field_name in fields:
        value = obj.get(field_name)
        if value is None:
            continue
        if not isinstance(value, dict):
            return None
        keys.update(k for k in value if isinstance(k, str))
    return frozenset(keys)


def containers(spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every container of a pod spec (init, app, ephemeral) with its path."""
    for field_name in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(as_list(spec.get(field_name))):
            if isinstance(container, dict):
                yield f"{path}.{field_name}[{i}]", container


def serving_containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Containers whose ports a Service can reach: app containers and native sidecars (restartable init)."""
    for container in as_list(spec.get("containers")):
        if isinstance(container, dict):
            yield container
    for container in as_list(spec.get("initContainers")):
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            yield container


class RenderedSet:
    """The rendered objects indexed once: targets by (kind, namespace, name), their owners, the pod templates."""

    def __init__(
        self, objects: list[dict[str, Any]], externals: Iterable[External], optional: Iterable[OptionalRef]
    ) -> None:
        self.objects: list[tuple[Mapping[str, Any], Holder]] = []
        self.targets: dict[Key, Target] = {}
        self.templates: list[PodTemplate] = []
        self.pods: dict[int, PodTemplate] = {}  # by id() of the rendered workload object
        self.owners: dict[Key, tuple[Holder, str]] = {}  # who renders / makes each target, and where it says so
        self.double_owned: list[DoubleOwner] = []
        self.externals = {(e.kind, scope(e.kind, e.namespace), e.name): e for e in externals}
        self.optional = {(o.namespace, o.workload, o.name): o.runtime_keys for o in optional}
        for obj in objects:
            self._index(obj)
        for obj, holder in self.objects:
            self._index_provided(obj, holder)

    def optional_keys(self, namespace: str | None, workload: str, name: str) -> frozenset[str] | None:
        """The runtime keys of the declared optional reference (None: not declared). A declared workload ending in
        `*` covers every workload whose "Kind/name" starts with what precedes it: a Job named from its spec. A
        cluster-scoped holder (no namespace) has none: an OptionalRef names a namespace."""
        if namespace is None:
            return None
        exact = self.optional.get((namespace, workload, name))
        if exact is not None:
            return exact
        for (ns, declared, ref), keys in self.optional.items():
            if ns == namespace and ref == name and declared.endswith("*") and workload.startswith(declared[:-1]):
                return keys
        return None

    # ---- indexing

    def _index(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind, name = obj.get("kind"), ref_name(nested(obj, "metadata", "name"))
        if not isinstance(kind, str) or name is None:
            return
        namespace = namespace_of(obj)
        holder = Holder(ident(kind, namespace, name), f"{kind}/{name}", namespace)
        self.objects.append((obj, holder))
        self.targets[(kind, namespace, name)] = Target("rendered", data_keys(obj), obj)
        self.owners[(kind, namespace, name)] = (holder, "metadata.name")
        if kind in POD_TEMPLATE_PATHS and namespace is not None:
            self._index_pod_template(obj, holder, kind)

    def _index_pod_template(self, obj: Mapping[str, Any], holder: Holder, kind: str) -> None:
        template = nested(obj, *POD_TEMPLATE_PATHS[kind]) if POD_TEMPLATE_PATHS[kind] else obj
        claim_templates = as_list(nested(obj, "spec", "volumeClaimTemplates"))
        claims = frozenset(n for t in claim_templates if (n := ref_name(nested(t, "metadata", "name"))))
        path = ".".join([*POD_TEMPLATE_PATHS[kind], "spec"])
        spec = nested(template, "spec")
        self.pods[id(obj)] = PodTemplate(
            holder,
            kind,
            as_dict(nested(template, "metadata", "labels")),
            spec if isinstance(spec, dict) else {},
            path,
            claims if kind == "StatefulSet" else frozenset(),
        )
        self.templates.append(self.pods[id(obj)])

    def _provide(self, holder: Holder, kind: str, name: str, target: Target, why: str) -> None:
        key = (kind, scope(kind, holder.namespace), name)
        existing = self.targets.get(key)
        if existing is not None and existing.source == "rendered":
            self.double_owned.append(DoubleOwner(holder, why, kind, name, target.source))
            return
        if key not in self.targets:
            self.targets[key] = target
            self.owners[key] = (holder, why)

    def _index_provided(self, obj: Mapping[str, Any], holder: Holder) -> None:
        """What rendered objects make controllers create, so references to it resolve."""
        kind, group = str(obj["kind"]), api_group(obj)
        spec = as_dict(obj.get("spec"))
        if kind == "Certificate" and group == CERT_MANAGER_GROUP:
            secret = ref_name(spec.get("secretName"))
            if secret:
                source = f"cert-manager (Certificate {holder.name})"
                self._provide(holder, "Secret", secret, Target(source, certificate_keys(spec)), "spec.secretName")
        elif kind == "Cluster" and group == CNPG_GROUP:
            self._provide_cnpg(holder, spec)
        elif kind == "ReplicationSource" and group == VOLSYNC_GROUP:
            # VolSync runs a mover Job per sync; its pods carry the ownership label (policies select them by it).
            self.templates.append(PodTemplate(holder, kind, VOLSYNC_MOVER_LABELS, None, "spec"))
        elif kind == "StatefulSet" and holder.namespace is not None:
            self._provide_claims(holder, spec)

    def _provide_cnpg(self, holder: Holder, spec: Mapping[str, Any]) -> None:
        name = holder.name
        source = f"CloudNativePG (Cluster {name})"
        for secret, keys in cnpg_secrets(name, spec).items():
            self._provide(holder, "Secret", secret, Target(source, keys), "metadata.name")
        for service in cnpg_services(name, spec):
            self._provide(holder, "Service", service, Target(source, ports=CNPG_SERVICE_PORTS), "metadata.name")
        self._provide(holder, "ServiceAccount", name, Target(source), "metadata.name")
        inherited = as_dict(nested(spec, "inheritedMetadata", "labels"))
        for role in CNPG_ROLES:
            labels = cnpg_instance_labels(name, role, inherited)
            self.templates.append(PodTemplate(holder, "Cluster", labels, None, "spec"))

    def _provide_claims(self, holder: Holder, spec: Mapping[str, Any]) -> None:
        """The StatefulSet controller's claims: `<template>-<set>-<ordinal>` for each replica."""
        name = holder.name
        replicas = spec.get("replicas", 1)
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        for template in as_list(spec.get("volumeClaimTemplates")):
            claim = ref_name(nested(template, "metadata", "name"))
            for ordinal in range(count if claim else 0):
                target = Target(f"the StatefulSet controller (StatefulSet {name})")
                self._provide(holder, "PersistentVolumeClaim", f"{claim}-{name}-{ordinal}", target, "spec")

    # ---- lookups

    def resolve(self, kind: str, namespace: str | None, name: str) -> Target | None:
        """What a reference lands on: rendered or provided, External, or what every cluster has; None if nothing."""
        namespace = scope(kind, namespace)
        key = (kind, namespace, name)
        if key in self.targets:
            return self.targets[key]
        external = self.externals.get(key)
        if external is not None:
            return Target(external.created_by, external.keys or None)
        if kind == "ServiceAccount" and name == "default":
            return Target("the ServiceAccount controller (every namespace has 'default')")
        if kind == "ConfigMap" and name == "kube-root-ca.crt":
            return Target("the root CA publisher (every namespace)", frozenset({"ca.crt"}))
        if kind == "ClusterRole" and (name in BUILTIN_CLUSTER_ROLES or name.startswith("system:")):
            return Target("the API server's bootstrap policy")
        return None

    def selected(self, namespace: str | None, matches: Callable[[Mapping[str, Any]], bool]) -> list[PodTemplate]:
        """The pod templates of ``namespace`` whose labels ``matches`` accepts."""
        return [t for t in self.templates if t.namespace == namespace and matches(t.labels)]
