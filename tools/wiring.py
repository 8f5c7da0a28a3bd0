"""Wiring check: the references BETWEEN rendered Kubernetes objects that the kubelet, the controllers and the API
server resolve at run time, and that a per-object schema check cannot see.

A pod that mounts a Secret nobody creates validates fine and then sits in ContainerCreating; a Service whose
selector matches no pod template applies cleanly and has no endpoints. This module resolves every such reference
against the rendered set, against what the set makes others create (cert-manager's Secret for a Certificate,
CloudNativePG's `-app` Secret and `-rw` Service, a StatefulSet's claims), and against `External` objects that are
documented as created by someone else. Anything else is a `Finding` that says what would happen in a cluster.

Pure: plain dicts in, findings out (the CLI alone reads YAML). `External` and `OptionalRef` are the program's
own list of what it expects from others (program/externals.py).
Usage: ``python -m tools.wiring FILES_OR_DIRS...`` prints the findings, then ``N objects, N findings``;
exit status 1 when there are findings.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headscale_ha.program.externals import External, OptionalRef

__all__ = ["External", "Finding", "OptionalRef", "check_wiring"]


@dataclass(frozen=True)
class Finding:
    """One broken reference: where it is held, and what a cluster would do with it."""

    obj: str  # "Kind/namespace/name" of the object holding the reference
    path: str  # JSON-ish path inside it, e.g. "spec.template.spec.containers[0].env[3].valueFrom.secretKeyRef"
    message: str  # what is referenced, what is missing, and what would happen in a cluster

    def __str__(self) -> str:
        return f"{self.obj}: {self.path}: {self.message}"


# --------------------------------------------------------------------------------------------------- vocabulary

#: Kinds that live outside namespaces: references to them carry no namespace.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "RuntimeClass",
        "IngressClass",
        "GatewayClass",
        "CustomResourceDefinition",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "APIService",
        "ClusterIssuer",
        "CiliumLoadBalancerIPPool",
        "CiliumClusterwideNetworkPolicy",
        "VolumeSnapshotClass",
    }
)

#: Where each workload kind keeps its pod template (labels live in the `metadata` beside `spec`).
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}

#: ClusterRoles the API server bootstraps in every cluster (plus every `system:` role).
BUILTIN_CLUSTER_ROLES = frozenset({"cluster-admin", "admin", "edit", "view"})

GATEWAY_GROUP = "gateway.networking.k8s.io"
#: Which listener protocols each route kind can attach to (Gateway API "Compatible" condition).
ROUTE_PROTOCOLS: dict[str, frozenset[str]] = {
    "HTTPRoute": frozenset({"HTTP", "HTTPS"}),
    "GRPCRoute": frozenset({"HTTP", "HTTPS"}),
    "TLSRoute": frozenset({"TLS"}),
    "TCPRoute": frozenset({"TCP", "TLS"}),
    "UDPRoute": frozenset({"UDP"}),
}

#: Data keys of the Secrets CloudNativePG generates for a role (`-app`, `-superuser`).
CNPG_USER_SECRET_KEYS = frozenset(
    {"username", "user", "password", "dbname", "host", "port", "pgpass", "uri", "jdbc-uri", "fqdn-uri", "fqdn-jdbc-uri"}
)
CNPG_SERVICE_PORTS: frozenset[int | str] = frozenset({5432, "postgres"})
#: Keys VolSync's restic mover requires in the repository Secret.
RESTIC_REQUIRED_KEYS = ("RESTIC_REPOSITORY", "RESTIC_PASSWORD")
TLS_KEYS = ("tls.crt", "tls.key")

# ------------------------------------------------------------------------------------------------------ helpers


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _get(value: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _name(value: Any) -> str | None:
    """A usable reference name; markers for unknown values (and empty strings) are not names."""
    return value if isinstance(value, str) and value else None


def _scope(kind: str, namespace: str | None) -> str | None:
    return None if kind in CLUSTER_SCOPED else namespace


def _namespace_of(obj: Mapping[str, Any]) -> str | None:
    kind = obj.get("kind")
    if kind in CLUSTER_SCOPED:
        return None
    return _name(_get(obj, "metadata", "namespace")) or "default"


def _ident(kind: str, namespace: str | None, name: str) -> str:
    return f"{kind}/{namespace}/{name}" if namespace is not None else f"{kind}/{name}"


def _group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    return api_version.rsplit("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""


def _label(kind: str, namespace: str | None, name: str, here: str | None) -> str:
    noun = "claim" if kind == "PersistentVolumeClaim" else kind
    return f"{noun} '{namespace}/{name}'" if namespace is not None and namespace != here else f"{noun} '{name}'"


def _is_true(value: Any) -> bool:
    return value is True


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against a label set; an empty selector matches all."""
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in _list(selector.get("matchExpressions")):
        key, operator = _get(expression, "key"), _get(expression, "operator")
        values = _list(_get(expression, "values"))
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _selector_text(selector: Mapping[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in _dict(selector.get("matchLabels")).items()]
    for expression in _list(selector.get("matchExpressions")):
        values = ",".join(str(v) for v in _list(_get(expression, "values")))
        parts.append(f"{_get(expression, 'key')} {_get(expression, 'operator')} ({values})".replace(" ()", ""))
    return "{" + ", ".join(parts) + "}"


def _hostnames_intersect(route: Sequence[Any], listener: Any) -> bool:
    """Gateway API hostname matching: a wildcard `*.a.b` stands for one or more leading labels."""
    if not isinstance(listener, str) or not listener or not route:
        return True

    def covers(wild: str, host: str) -> bool:
        return wild.startswith("*.") and host.endswith(wild[1:]) and len(host) > len(wild) - 1

    for host in route:
        if not isinstance(host, str):
            return True
        if host == listener or covers(listener, host) or covers(host, listener):
            return True
    return False


# -------------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class _Target:
    """Something a reference can land on: rendered, provided by a rendered object, built in, or External."""

    source: str  # "rendered", or who creates it
    keys: frozenset[str] | None = None  # data keys; None = not known
    obj: Mapping[str, Any] | None = None  # the rendered object
    ports: frozenset[int | str] | None = None  # for Services the set does not render; None = not known


@dataclass(frozen=True)
class _Holder:
    """The object holding references: its Finding name, its `Kind/name` and its namespace."""

    ident: str
    workload: str
    namespace: str | None


@dataclass(frozen=True)
class _PodTemplate:
    """A pod template of a rendered workload, or the pods an operator runs for a rendered object (spec None)."""

    holder: _Holder
    kind: str
    labels: Mapping[str, Any]
    spec: Mapping[str, Any] | None
    path: str  # of the pod spec inside the holder
    claim_templates: frozenset[str] = frozenset()  # StatefulSet volumeClaimTemplates: mountable like volumes

    @property
    def namespace(self) -> str | None:
        return self.holder.namespace


def _data_keys(obj: Mapping[str, Any]) -> frozenset[str] | None:
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


def _containers(spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field_name in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(_list(spec.get(field_name))):
            if isinstance(container, dict):
                yield f"{path}.{field_name}[{i}]", container


def _serving_containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Containers whose ports a Service can reach: app containers and native sidecars (restartable init)."""
    for container in _list(spec.get("containers")):
        if isinstance(container, dict):
            yield container
    for container in _list(spec.get("initContainers")):
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            yield container


def _cnpg_is_replica(name: str, spec: Mapping[str, Any]) -> bool:
    replica = _dict(spec.get("replica"))
    enabled = replica.get("enabled")
    if isinstance(enabled, bool):
        return enabled
    primary = replica.get("primary")
    return bool(primary) and primary != (replica.get("self") or name)


def _cnpg_creates_app_secret(name: str, spec: Mapping[str, Any]) -> bool:
    """CloudNativePG's ShouldCreateApplicationSecret: initdb (the default bootstrap) without its own secret, or
    recovery / pg_basebackup with database and owner and no secret, on a cluster that is not a replica."""
    bootstrap = _dict(spec.get("bootstrap"))
    methods = [m for m in ("initdb", "recovery", "pg_basebackup") if isinstance(bootstrap.get(m), dict)]
    if not methods or methods[0] == "initdb":
        return not _name(_get(bootstrap, "initdb", "secret", "name"))
    method = _dict(bootstrap.get(methods[0]))
    return (
        not _cnpg_is_replica(name, spec)
        and bool(method.get("database"))
        and bool(method.get("owner"))
        and not _name(_get(method, "secret", "name"))
    )


CNPG_ROLES = ("primary", "replica")
#: The labels VolSync puts on the pods of its mover Jobs (`utils.SetOwnedByVolSync` on the Job's template).
VOLSYNC_MOVER_LABELS = {"app.kubernetes.io/created-by": "volsync"}


def cnpg_instance_labels(cluster: str, role: str, inherited: Mapping[str, Any]) -> dict[str, Any]:
    """The labels CloudNativePG puts on an instance pod of ``cluster`` in ``role`` (besides its inherited ones)."""
    return {
        **inherited,
        "cnpg.io/cluster": cluster,
        "cnpg.io/podRole": "instance",
        "cnpg.io/instanceRole": role,
        "role": role,
    }


def _cnpg_secrets(name: str, spec: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """The Secrets CloudNativePG generates for a Cluster, with their keys."""
    secrets: dict[str, frozenset[str]] = {}
    if _cnpg_creates_app_secret(name, spec):
        secrets[f"{name}-app"] = CNPG_USER_SECRET_KEYS
    if _is_true(spec.get("enableSuperuserAccess")) and not _name(_get(spec, "superuserSecret", "name")):
        secrets[f"{name}-superuser"] = CNPG_USER_SECRET_KEYS
    certificates = _dict(spec.get("certificates"))
    if not (certificates.get("serverCASecret") and certificates.get("clientCASecret")):
        secrets[f"{name}-ca"] = frozenset({"ca.crt", "ca.key"})
    if not certificates.get("serverTLSSecret"):
        secrets[f"{name}-server"] = frozenset(TLS_KEYS)
    if not certificates.get("replicationTLSSecret"):
        secrets[f"{name}-replication"] = frozenset(TLS_KEYS)
    return secrets


def _cnpg_services(name: str, spec: Mapping[str, Any]) -> list[str]:
    disabled = {d for d in _list(_get(spec, "managed", "services", "disabledDefaultServices")) if isinstance(d, str)}
    services = [f"{name}-{suffix}" for suffix in ("rw", "ro", "r") if suffix == "rw" or suffix not in disabled]
    for extra in _list(_get(spec, "managed", "services", "additional")):
        extra_name = _name(_get(extra, "serviceTemplate", "metadata", "name"))
        if extra_name:
            services.append(extra_name)
    return services


def _certificate_keys(spec: Mapping[str, Any]) -> frozenset[str]:
    keys = {"tls.crt", "tls.key", "ca.crt"}
    for output in _list(spec.get("additionalOutputFormats")):
        keys.add({"DER": "key.der", "CombinedPEM": "tls-combined.pem"}.get(str(_get(output, "type")), ""))
    keystores = _dict(spec.get("keystores"))
    if _is_true(_get(keystores, "jks", "create")):
        keys.update({"keystore.jks", "truststore.jks"})
    if _is_true(_get(keystores, "pkcs12", "create")):
        keys.update({"keystore.p12", "truststore.p12"})
    return frozenset(keys - {""})


# ------------------------------------------------------------------------------------------------- the checker


class _Wiring:
    """Indexes the set once, then runs every rule; each rule appends Findings."""

    def __init__(
        self, objects: list[dict[str, Any]], externals: Iterable[External], optional: Iterable[OptionalRef]
    ) -> None:
        self.findings: list[Finding] = []
        self.objects: list[tuple[Mapping[str, Any], _Holder]] = []
        self.targets: dict[tuple[str, str | None, str], _Target] = {}
        self.templates: list[_PodTemplate] = []
        self.pods: dict[int, _PodTemplate] = {}  # by id() of the rendered workload object
        self.owners: dict[tuple[str, str | None, str], tuple[_Holder, str]] = {}  # who renders / makes each target
        self.externals = {(e.kind, _scope(e.kind, e.namespace), e.name): e for e in externals}
        self.optional = {(o.namespace, o.workload, o.name): o.runtime_keys for o in optional}
        for obj in objects:
            self._index(obj)
        for obj, holder in self.objects:
            self._index_provided(obj, holder)
        self._check_externals()

    # ---- indexing

    def _index(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind, name = obj.get("kind"), _name(_get(obj, "metadata", "name"))
        if not isinstance(kind, str) or name is None:
            return
        namespace = _namespace_of(obj)
        holder = _Holder(_ident(kind, namespace, name), f"{kind}/{name}", namespace)
        self.objects.append((obj, holder))
        self.targets[(kind, namespace, name)] = _Target("rendered", _data_keys(obj), obj)
        self.owners[(kind, namespace, name)] = (holder, "metadata.name")
        if kind in POD_TEMPLATE_PATHS and namespace is not None:
            template = _get(obj, *POD_TEMPLATE_PATHS[kind]) if POD_TEMPLATE_PATHS[kind] else obj
            claims = frozenset(
                n for t in _list(_get(obj, "spec", "volumeClaimTemplates")) if (n := _name(_get(t, "metadata", "name")))
            )
            path = ".".join([*POD_TEMPLATE_PATHS[kind], "spec"])
            spec = _get(template, "spec")
            self.pods[id(obj)] = _PodTemplate(
                holder,
                kind,
                _dict(_get(template, "metadata", "labels")),
                spec if isinstance(spec, dict) else {},
                path,
                claims if kind == "StatefulSet" else frozenset(),
            )
            self.templates.append(self.pods[id(obj)])

    def _provide(self, holder: _Holder, kind: str, name: str, target: _Target, why: str) -> None:
        key = (kind, _scope(kind, holder.namespace), name)
        existing = self.targets.get(key)
        if existing is not None and existing.source == "rendered":
            self.report(
                holder,
                why,
                f"{kind} '{name}' is created by {target.source} and also rendered by this program: two owners "
                "for one object, each overwriting (or adopting) the other's content; Pulumi would show drift on "
                "every run and deleting either side removes what the other relies on",
            )
            return
        if key not in self.targets:
            self.targets[key] = target
            self.owners[key] = (holder, why)

    def _check_externals(self) -> None:
        """An External the set renders, or makes a controller create, has two owners (or a stale declaration)."""
        for key, external in self.externals.items():
            target = self.targets.get(key)
            if target is None:
                continue
            holder, path = self.owners[key]
            declared = f"declared External (created by {external.created_by})"
            if target.source == "rendered":
                message = (
                    f"{key[0]} '{key[2]}' is rendered by this program but also {declared}: the declaration is "
                    "stale, or two owners write one object"
                )
            else:
                message = (
                    f"{key[0]} '{key[2]}' is created by {target.source} but also {declared}: two owners for one "
                    "object; whichever writes it first decides its content, and references resolve to the "
                    "controller's object, not the documented one"
                )
            self.report(holder, path, message)

    def _index_provided(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """What rendered objects make controllers create, so references to it resolve."""
        kind, name, group = str(obj["kind"]), holder.workload.split("/", 1)[1], _group(obj)
        spec = _dict(obj.get("spec"))
        if kind == "Certificate" and group == "cert-manager.io":
            secret = _name(spec.get("secretName"))
            if secret:
                source = f"cert-manager (Certificate {name})"
                self._provide(holder, "Secret", secret, _Target(source, _certificate_keys(spec)), "spec.secretName")
        elif kind == "Cluster" and group == "postgresql.cnpg.io":
            source = f"CloudNativePG (Cluster {name})"
            for secret, keys in _cnpg_secrets(name, spec).items():
                self._provide(holder, "Secret", secret, _Target(source, keys), "metadata.name")
            for service in _cnpg_services(name, spec):
                self._provide(holder, "Service", service, _Target(source, ports=CNPG_SERVICE_PORTS), "metadata.name")
            self._provide(holder, "ServiceAccount", name, _Target(source), "metadata.name")
            inherited = _dict(_get(spec, "inheritedMetadata", "labels"))
            for role in CNPG_ROLES:
                labels = cnpg_instance_labels(name, role, inherited)
                self.templates.append(_PodTemplate(holder, kind, labels, None, "spec"))
        elif kind == "ReplicationSource" and group == "volsync.backube":
            # VolSync runs a mover Job per sync; its pods carry the ownership label (policies select them by it).
            self.templates.append(_PodTemplate(holder, kind, VOLSYNC_MOVER_LABELS, None, "spec"))
        elif kind == "StatefulSet" and holder.namespace is not None:
            replicas = spec.get("replicas", 1)
            count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
            for template in _list(spec.get("volumeClaimTemplates")):
                claim = _name(_get(template, "metadata", "name"))
                for ordinal in range(count if claim else 0):
                    target = _Target(f"the StatefulSet controller (StatefulSet {name})")
                    self._provide(holder, "PersistentVolumeClaim", f"{claim}-{name}-{ordinal}", target, "spec")

    # ---- resolution and reporting

    def report(self, holder: _Holder, path: str, message: str) -> None:
        self.findings.append(Finding(holder.ident, path, message))

    def resolve(self, kind: str, namespace: str | None, name: str) -> _Target | None:
        namespace = _scope(kind, namespace)
        key = (kind, namespace, name)
        if key in self.targets:
            return self.targets[key]
        external = self.externals.get(key)
        if external is not None:
            return _Target(external.created_by, external.keys or None)
        if kind == "ServiceAccount" and name == "default":
            return _Target("the ServiceAccount controller (every namespace has 'default')")
        if kind == "ConfigMap" and name == "kube-root-ca.crt":
            return _Target("the root CA publisher (every namespace)", frozenset({"ca.crt"}))
        if kind == "ClusterRole" and (name in BUILTIN_CLUSTER_ROLES or name.startswith("system:")):
            return _Target("the API server's bootstrap policy")
        return None

    def missing(self, kind: str, namespace: str | None, name: str, here: str | None, consequence: str) -> str:
        namespace = _scope(kind, namespace)
        message = (
            f"{_label(kind, namespace, name, here)} is not rendered and not a documented external object: {consequence}"
        )
        elsewhere = sorted(str(k[1]) for k in self.targets if k[0] == kind and k[2] == name and k[1] != namespace)
        if elsewhere:
            message += f" (one is rendered in namespace '{elsewhere[0]}'; this reference looks in '{namespace}')"
        return message + self._cnpg_hint(kind, namespace, name)

    def _cnpg_hint(self, kind: str, namespace: str | None, name: str) -> str:
        """Why a rendered CloudNativePG Cluster does not create the `-app` / `-superuser` Secret named here."""
        if kind != "Secret":
            return ""
        for (other, other_ns, cluster), target in self.targets.items():
            if other != "Cluster" or other_ns != namespace or target.obj is None:
                continue
            if _group(target.obj) != "postgresql.cnpg.io":
                continue
            spec = _dict(target.obj.get("spec"))
            if name == f"{cluster}-app":
                if _cnpg_is_replica(cluster, spec):
                    why = "it is a replica cluster, and CloudNativePG creates no application Secret for a replica"
                else:
                    why = "its bootstrap names its own secret, or lacks database/owner"
                return f" (Cluster '{cluster}' does not create it: {why})"
            if name == f"{cluster}-superuser":
                return f" (Cluster '{cluster}' does not create it: enableSuperuserAccess is not true)"
        return ""

    def ref(
        self,
        holder: _Holder,
        path: str,
        kind: str,
        name: Any,
        *,
        consequence: str,
        namespace: str | None = None,
        optional: bool = False,
        keys: Sequence[tuple[Any, str]] = (),
        key_consequence: str = "",
    ) -> _Target | None:
        """Resolve one reference (and the data keys it names); report what does not resolve."""
        name = _name(name)
        if name is None:
            return None
        namespace = _scope(kind, namespace if namespace is not None else holder.namespace)
        target = self.resolve(kind, namespace, name)
        label = _label(kind, namespace, name, holder.namespace)
        if optional and (holder.namespace, holder.workload, name) not in self.optional:
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
        later = self.optional.get((holder.namespace, holder.workload, name), frozenset()) if optional else frozenset()
        for key, key_path in keys:
            if key in later:
                continue  # written by a running pod; an optional source's missing key is skipped by the kubelet
            if target.keys is not None and isinstance(key, str) and key not in target.keys:
                held = ", ".join(sorted(target.keys)) or "no keys"
                origin = "" if target.source == "rendered" else f"; created by {target.source}"
                self.report(
                    holder, key_path, f"key '{key}' is not in {label} (it holds: {held}{origin}): {key_consequence}"
                )
        return target

    # ---- rules

    def run(self) -> list[Finding]:
        rules = {
            "Service": self.check_service,
            "Ingress": self.check_ingress,
            "Gateway": self.check_gateway,
            "HTTPRoute": self.check_route,
            "GRPCRoute": self.check_route,
            "TLSRoute": self.check_route,
            "TCPRoute": self.check_route,
            "UDPRoute": self.check_route,
            "NetworkPolicy": self.check_network_policy,
            "PodDisruptionBudget": self.check_pdb,
            "RoleBinding": self.check_binding,
            "ClusterRoleBinding": self.check_binding,
            "PersistentVolumeClaim": self.check_claim,
            "StatefulSet": self.check_statefulset,
            "Cluster": self.check_cnpg_cluster,
            "ScheduledBackup": self.check_scheduled_backup,
            "ObjectStore": self.check_object_store,
            "ReplicationSource": self.check_volsync,
            "ReplicationDestination": self.check_volsync,
        }
        for obj, holder in self.objects:
            if id(obj) in self.pods:
                self.check_pod(self.pods[id(obj)])
            rule = rules.get(str(obj["kind"]))
            if rule is not None:
                rule(obj, holder)
        return self.findings

    # -- pods

    def check_pod(self, tpl: _PodTemplate) -> None:
        """Volumes, env, mounts, probes, pull secrets and the service account of one pod template."""
        spec, path, holder = _dict(tpl.spec), tpl.path, tpl.holder
        volumes: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for i, volume in enumerate(_list(spec.get("volumes"))):
            if isinstance(volume, dict) and _name(volume.get("name")):
                volumes[volume["name"]] = (f"{path}.volumes[{i}]", volume)
                self.check_volume(holder, f"{path}.volumes[{i}]", volume)
        used: set[str] = set()
        for container_path, container in _containers(spec, path):
            self.check_env(holder, container_path, container)
            self.check_probes(holder, container_path, container)
            for field_name in ("volumeMounts", "volumeDevices"):
                for k, mount in enumerate(_list(container.get(field_name))):
                    mount_name = _name(_get(mount, "name"))
                    if mount_name is None:
                        continue
                    used.add(mount_name)
                    mount_path = f"{container_path}.{field_name}[{k}]"
                    if mount_name not in volumes and mount_name not in tpl.claim_templates:
                        self.report(
                            holder,
                            f"{mount_path}.name",
                            f"mounts volume '{mount_name}', which the pod does not define: the API server would "
                            f"reject the {tpl.kind} ({field_name}[{k}].name: Not found)",
                        )
                    elif mount_name in volumes and _name(_get(mount, "subPath")):
                        self.check_sub_path(holder, mount_path, mount, volumes[mount_name], tpl.namespace)
        for volume_name, (volume_path, _volume) in volumes.items():
            if volume_name not in used:
                self.report(
                    holder,
                    volume_path,
                    f"volume '{volume_name}' is mounted by no container: dead wiring, yet the kubelet must still "
                    "set it up (and find what it references) before the pod can start",
                )
        for k, pull in enumerate(_list(spec.get("imagePullSecrets"))):
            self.ref(
                holder,
                f"{path}.imagePullSecrets[{k}]",
                "Secret",
                _get(pull, "name"),
                consequence="the kubelet would pull without it (FailedToRetrieveImagePullSecret); "
                "a private image would end in ImagePullBackOff",
            )
        account = _name(spec.get("serviceAccountName")) or _name(spec.get("serviceAccount")) or "default"
        self.ref(
            holder,
            f"{path}.serviceAccountName",
            "ServiceAccount",
            account,
            consequence="ServiceAccount admission would reject every pod (error looking up service account): "
            f"the {tpl.kind} would create none",
        )

    def check_volume(self, holder: _Holder, path: str, volume: Mapping[str, Any]) -> None:
        secret, config_map, claim = volume.get("secret"), volume.get("configMap"), volume.get("persistentVolumeClaim")
        if isinstance(secret, dict):
            self._volume_source(holder, f"{path}.secret", "Secret", secret, secret.get("secretName"))
        if isinstance(config_map, dict):
            self._volume_source(holder, f"{path}.configMap", "ConfigMap", config_map, config_map.get("name"))
        for j, source in enumerate(_list(_get(volume, "projected", "sources"))):
            for field_name, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
                ref = _get(source, field_name)
                if isinstance(ref, dict):
                    source_path = f"{path}.projected.sources[{j}].{field_name}"
                    self._volume_source(holder, source_path, kind, ref, ref.get("name"))
        if isinstance(claim, dict):
            self.ref(
                holder,
                f"{path}.persistentVolumeClaim",
                "PersistentVolumeClaim",
                claim.get("claimName"),
                consequence="the pod would stay Pending (FailedMount / unbound claim)",
            )

    def _volume_source(self, holder: _Holder, path: str, kind: str, source: Mapping[str, Any], name: Any) -> None:
        noun = kind.lower()
        items = [(_get(item, "key"), f"{path}.items[{k}].key") for k, item in enumerate(_list(source.get("items")))]
        self.ref(
            holder,
            path,
            kind,
            name,
            optional=_is_true(source.get("optional")),
            consequence=f'the pod would stay in ContainerCreating (FailedMount: {noun} "{name}" not found)',
            keys=items,
            key_consequence="the pod would stay in ContainerCreating (FailedMount: the item's key is missing)",
        )

    def check_env(self, holder: _Holder, path: str, container: Mapping[str, Any]) -> None:
        fail = "the container would not start (CreateContainerConfigError)"
        for k, env in enumerate(_list(container.get("env"))):
            for field_name, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                ref = _get(env, "valueFrom", field_name)
                if isinstance(ref, dict):
                    ref_path = f"{path}.env[{k}].valueFrom.{field_name}"
                    self.ref(
                        holder,
                        ref_path,
                        kind,
                        ref.get("name"),
                        optional=_is_true(ref.get("optional")),
                        consequence=fail,
                        keys=[(ref.get("key"), f"{ref_path}.key")],
                        key_consequence=f"{fail}, or, if optional, ${_get(env, 'name')} would silently be unset",
                    )
        for k, env_from in enumerate(_list(container.get("envFrom"))):
            for field_name, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                ref = _get(env_from, field_name)
                if isinstance(ref, dict):
                    self.ref(
                        holder,
                        f"{path}.envFrom[{k}].{field_name}",
                        kind,
                        ref.get("name"),
                        optional=_is_true(ref.get("optional")),
                        consequence=fail,
                    )

    def _volume_files(self, namespace: str | None, volume: Mapping[str, Any]) -> set[str] | None:
        """The file paths a read-only projected volume will hold; None when not known offline."""
        sources: list[tuple[str, Mapping[str, Any], Any]] = []
        if isinstance(volume.get("secret"), dict):
            sources.append(("Secret", volume["secret"], volume["secret"].get("secretName")))
        elif isinstance(volume.get("configMap"), dict):
            sources.append(("ConfigMap", volume["configMap"], volume["configMap"].get("name")))
        elif isinstance(volume.get("downwardAPI"), dict):
            sources.append(("", volume["downwardAPI"], None))
        elif isinstance(volume.get("projected"), dict):
            for source in _list(volume["projected"].get("sources")):
                for field_name, kind in (("secret", "Secret"), ("configMap", "ConfigMap"), ("downwardAPI", "")):
                    ref = _get(source, field_name)
                    if isinstance(ref, dict):
                        sources.append((kind, ref, ref.get("name")))
                for field_name in ("serviceAccountToken", "clusterTrustBundle"):
                    token_path = _get(source, field_name, "path")
                    if isinstance(token_path, str):
                        sources.append(("", {"items": [{"path": token_path}]}, None))
        else:
            return None
        files: set[str] = set()
        for kind, ref, name in sources:
            items = _list(ref.get("items"))
            if items or not kind:
                files.update(p for item in items if isinstance(p := _get(item, "path"), str))
                continue
            target = self.resolve(kind, namespace, name) if _name(name) else None
            if target is None or target.keys is None:
                return None
            files.update(target.keys)
        return files

    def check_sub_path(
        self,
        holder: _Holder,
        mount_path: str,
        mount: Mapping[str, Any],
        volume: tuple[str, Mapping[str, Any]],
        namespace: str | None,
    ) -> None:
        """A subPath into a configMap/secret/projected volume must name a file (or directory) the volume holds."""
        sub_path = str(mount["subPath"]).strip("/")
        files = self._volume_files(namespace, volume[1])
        if files is None:
            return
        if sub_path in files or any(f.startswith(sub_path + "/") for f in files):
            return
        listed = ", ".join(sorted(files)) or "nothing"
        self.report(
            holder,
            f"{mount_path}.subPath",
            f"subPath '{sub_path}' is not in volume '{mount['name']}' (it holds: {listed}): the kubelet cannot "
            "create it in a read-only volume, so the container would not start (CreateContainerConfigError)",
        )

    def check_probes(self, holder: _Holder, path: str, container: Mapping[str, Any]) -> None:
        """Probe and lifecycle-hook ports given by name must be port names of the same container."""
        names = {p.get("name") for p in _list(container.get("ports")) if isinstance(p, dict)}
        handlers = [
            (f"{probe}", _get(container, probe)) for probe in ("livenessProbe", "readinessProbe", "startupProbe")
        ]
        handlers += [(f"lifecycle.{hook}", _get(container, "lifecycle", hook)) for hook in ("postStart", "preStop")]
        for handler_path, handler in handlers:
            for action in ("httpGet", "tcpSocket", "grpc"):
                port = _get(handler, action, "port")
                if isinstance(port, str) and port not in names:
                    declared = ", ".join(sorted(str(n) for n in names if n)) or "none"
                    self.report(
                        holder,
                        f"{path}.{handler_path}.{action}.port",
                        f"port '{port}' is not a port name of container '{container.get('name')}' (it names: "
                        f"{declared}): the kubelet cannot resolve it, so the {handler_path} fails every time",
                    )

    # -- services and traffic

    def _selected(self, namespace: str | None, matches: Any) -> list[_PodTemplate]:
        return [t for t in self.templates if t.namespace == namespace and matches(t.labels)]

    def check_service(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """Selector → pod templates; every target port → a declared container port of those templates."""
        spec = _dict(obj.get("spec"))
        selector = spec.get("selector")
        if spec.get("type") == "ExternalName" or not isinstance(selector, dict) or not selector:
            return
        selected = self._selected(holder.namespace, lambda labels: all(labels.get(k) == v for k, v in selector.items()))
        if not selected:
            self.report(
                holder,
                "spec.selector",
                f"selector {_selector_text({'matchLabels': selector})} matches no pod template in namespace "
                f"'{holder.namespace}': the Service would have no endpoints (connections refused)",
            )
            return
        workloads = sorted({t.holder.workload for t in selected})
        if len(workloads) > 1:
            self.report(
                holder,
                "spec.selector",
                f"selector {_selector_text({'matchLabels': selector})} matches the pods of {', '.join(workloads)}: "
                "the Service would send its traffic to all of them (give each workload labels of its own)",
            )
        if any(t.spec is None for t in selected):
            return  # an operator's pods: their ports are not known offline
        owners = ", ".join(t.holder.workload for t in selected)
        headless = spec.get("clusterIP") == "None"
        for i, port in enumerate(_list(spec.get("ports"))):
            if not isinstance(port, dict):
                continue
            protocol = port.get("protocol") or "TCP"
            target = port.get("targetPort", port.get("port"))
            declared = [
                p
                for t in selected
                for c in _serving_containers(_dict(t.spec))
                for p in _list(c.get("ports"))
                if isinstance(p, dict) and (p.get("protocol") or "TCP") == protocol
            ]
            if isinstance(target, str):
                if not any(p.get("name") == target for p in declared):
                    self.report(
                        holder,
                        f"spec.ports[{i}].targetPort",
                        f"no container of the pod templates it selects ({owners}) declares a {protocol} port named "
                        f"'{target}': the endpoints would carry no address for this port, so connections to "
                        f"port {port.get('port')} fail",
                    )
            elif (
                isinstance(target, int)
                and not isinstance(target, bool)
                and not headless
                and not any(p.get("containerPort") == target for p in declared)
            ):
                defaulted = "" if "targetPort" in port else " (targetPort defaults to port)"
                self.report(
                    holder,
                    f"spec.ports[{i}].targetPort",
                    f"no container of the pod templates it selects ({owners}) declares containerPort "
                    f"{target}/{protocol}{defaulted}: traffic to port {port.get('port')} would go to a port "
                    "nothing declares it listens on",
                )

    def _service_backend(
        self, holder: _Holder, path: str, name: Any, namespace: str | None, port: Any, consequence: str
    ) -> None:
        target = self.ref(holder, path, "Service", name, namespace=namespace, consequence=consequence)
        if target is None or not isinstance(port, int | str) or isinstance(port, bool):
            return
        if target.obj is not None:
            ports = _list(_get(target.obj, "spec", "ports"))
            known: frozenset[int | str] | None = frozenset(
                v for p in ports for v in (_get(p, "port"), _get(p, "name")) if isinstance(v, int | str)
            )
        else:
            known = target.ports
        if known is not None and port not in known:
            listed = ", ".join(sorted(str(p) for p in known)) or "none"
            self.report(
                holder,
                f"{path}.port",
                f"Service '{name}' has no port {port!r} (it has: {listed}): {consequence}",
            )

    def check_ingress(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        spec = _dict(obj.get("spec"))
        backends = [("spec.defaultBackend", spec.get("defaultBackend"))]
        for i, rule in enumerate(_list(spec.get("rules"))):
            for j, http_path in enumerate(_list(_get(rule, "http", "paths"))):
                backends.append((f"spec.rules[{i}].http.paths[{j}].backend", _get(http_path, "backend")))
        for path, backend in backends:
            service = _get(backend, "service")
            if isinstance(service, dict):
                port = _get(service, "port", "number") or _get(service, "port", "name")
                consequence = "the ingress controller would answer requests for this path with 503"
                self._service_backend(holder, f"{path}.service", service.get("name"), None, port, consequence)
        for k, tls in enumerate(_list(spec.get("tls"))):
            self.ref(
                holder,
                f"spec.tls[{k}].secretName",
                "Secret",
                _get(tls, "secretName"),
                consequence="the ingress controller would serve its default (untrusted) certificate",
                keys=[(key, f"spec.tls[{k}].secretName") for key in TLS_KEYS],
                key_consequence="the ingress controller cannot load the certificate",
            )

    def _granted(
        self, from_kind: str, from_ns: str | None, to_group: str, to_kind: str, to_ns: str | None, to_name: str
    ) -> bool:
        """A ReferenceGrant in the target namespace allowing this cross-namespace reference (or a documented one)."""
        if any(k == "ReferenceGrant" and ns == to_ns for (k, ns, _n) in self.externals):
            return True
        for (kind, namespace, _), target in self.targets.items():
            if kind != "ReferenceGrant" or namespace != to_ns or target.obj is None:
                continue
            spec = _dict(target.obj.get("spec"))
            allowed_from = any(
                _get(f, "group") == GATEWAY_GROUP and _get(f, "kind") == from_kind and _get(f, "namespace") == from_ns
                for f in _list(spec.get("from"))
            )
            allowed_to = any(
                (_get(t, "group") or "") == to_group
                and _get(t, "kind") == to_kind
                and (_get(t, "name") in (None, "", to_name))
                for t in _list(spec.get("to"))
            )
            if allowed_from and allowed_to:
                return True
        return False

    def _cross_namespace(
        self, holder: _Holder, path: str, from_kind: str, to_group: str, to_kind: str, to_ns: str, name: str
    ) -> None:
        if to_ns != holder.namespace and not self._granted(from_kind, holder.namespace, to_group, to_kind, to_ns, name):
            self.report(
                holder,
                path,
                f"refers to {to_kind} '{to_ns}/{name}' in another namespace and no ReferenceGrant in '{to_ns}' "
                "allows it: the controller would report ResolvedRefs=False (RefNotPermitted)",
            )

    def check_route(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """Gateway API route: parents (and the listener it attaches to) and backends resolve."""
        if _group(obj) != GATEWAY_GROUP:
            return
        kind, spec = str(obj["kind"]), _dict(obj.get("spec"))
        for i, parent in enumerate(_list(spec.get("parentRefs"))):
            if (_get(parent, "group") or GATEWAY_GROUP) == GATEWAY_GROUP and (_get(parent, "kind") or "Gateway") == (
                "Gateway"
            ):
                self._parent(holder, f"spec.parentRefs[{i}]", kind, spec, _dict(parent))
        for i, rule in enumerate(_list(spec.get("rules"))):
            refs = [
                (f"spec.rules[{i}].backendRefs[{j}]", ref) for j, ref in enumerate(_list(_get(rule, "backendRefs")))
            ]
            for j, route_filter in enumerate(_list(_get(rule, "filters"))):
                mirror = _get(route_filter, "requestMirror", "backendRef")
                refs.append((f"spec.rules[{i}].filters[{j}].requestMirror.backendRef", mirror))
            for path, ref in refs:
                if not isinstance(ref, dict):
                    continue
                if (ref.get("group") or "") != "" or (ref.get("kind") or "Service") != "Service":
                    continue
                namespace = _name(ref.get("namespace")) or holder.namespace
                name = _name(ref.get("name"))
                if name is None or namespace is None:
                    continue
                consequence = (
                    f"the route would report ResolvedRefs=False (BackendNotFound) and fail requests for rule {i}"
                )
                if ref.get("port") is None:
                    self.report(holder, f"{path}.port", f"backendRef to Service '{name}' has no port: {consequence}")
                self._service_backend(holder, path, name, namespace, ref.get("port"), consequence)
                self._cross_namespace(holder, path, kind, "", "Service", namespace, name)

    def _parent(
        self, holder: _Holder, path: str, kind: str, spec: Mapping[str, Any], parent: Mapping[str, Any]
    ) -> None:
        namespace = _name(parent.get("namespace")) or holder.namespace
        name = _name(parent.get("name"))
        if name is None:
            return
        target = self.ref(
            holder,
            path,
            "Gateway",
            name,
            namespace=namespace,
            consequence="the route would never be Accepted: no traffic reaches its backends",
        )
        if target is None or target.obj is None:
            return
        listeners = [lst for lst in _list(_get(target.obj, "spec", "listeners")) if isinstance(lst, dict)]
        section, port = parent.get("sectionName"), parent.get("port")
        candidates = [
            lst
            for lst in listeners
            if (section is None or lst.get("name") == section) and (port is None or lst.get("port") == port)
        ]
        if not candidates:
            names = ", ".join(f"{lst.get('name')}:{lst.get('port')}" for lst in listeners) or "none"
            wanted = f"named '{section}'" if section is not None else ""
            wanted += f"{' and ' if wanted else ''}on port {port}" if port is not None else ""
            self.report(
                holder,
                f"{path}.sectionName" if section is not None else path,
                f"Gateway '{name}' has no listener {wanted} (listeners: {names}): the route would not be "
                "Accepted (NoMatchingParent)",
            )
            return
        reasons = []
        for listener in candidates:
            reason = self._refuses(kind, spec, listener, namespace, holder.namespace)
            if reason is None:
                return
            reasons.append(f"{listener.get('name')}: {reason}")
        self.report(
            holder,
            path,
            f"no listener of Gateway '{name}' would accept this {kind} ({'; '.join(reasons)}): the route would "
            "not be Accepted and no traffic reaches its backends",
        )

    @staticmethod
    def _refuses(
        kind: str, spec: Mapping[str, Any], listener: Mapping[str, Any], gateway_ns: str | None, route_ns: str | None
    ) -> str | None:
        """Why a listener would not take the route (Gateway API attachment rules), or None."""
        protocol = listener.get("protocol")
        allowed_kinds = [k for k in _list(_get(listener, "allowedRoutes", "kinds")) if isinstance(k, dict)]
        if allowed_kinds:
            if not any(
                (k.get("group") or GATEWAY_GROUP) == GATEWAY_GROUP and k.get("kind") == kind for k in allowed_kinds
            ):
                return f"allowedRoutes.kinds excludes {kind} (NotAllowedByListeners)"
        elif kind in ROUTE_PROTOCOLS and protocol not in ROUTE_PROTOCOLS[kind]:
            return f"protocol {protocol} does not carry {kind} (NotAllowedByListeners)"
        origin = _get(listener, "allowedRoutes", "namespaces", "from") or "Same"
        if origin == "Same" and route_ns != gateway_ns:
            return f"it only takes routes from namespace '{gateway_ns}' (NotAllowedByListeners)"
        if origin == "None":
            return "it takes no routes (NotAllowedByListeners)"
        hostnames = _list(spec.get("hostnames"))
        if not _hostnames_intersect(hostnames, listener.get("hostname")):
            return f"hostname {listener.get('hostname')} matches none of {hostnames} (NoMatchingListenerHostname)"
        return None

    def check_gateway(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """Listener certificates resolve (cert-manager's Secrets count) and hold a key pair."""
        if _group(obj) != GATEWAY_GROUP:
            return
        for i, listener in enumerate(_list(_get(obj, "spec", "listeners"))):
            for j, ref in enumerate(_list(_get(listener, "tls", "certificateRefs"))):
                if not isinstance(ref, dict):
                    continue
                if (ref.get("group") or "") != "" or (ref.get("kind") or "Secret") != "Secret":
                    continue
                path = f"spec.listeners[{i}].tls.certificateRefs[{j}]"
                namespace = _name(ref.get("namespace")) or holder.namespace
                name = _name(ref.get("name"))
                if name is None or namespace is None:
                    continue
                self.ref(
                    holder,
                    path,
                    "Secret",
                    name,
                    namespace=namespace,
                    consequence=f"listener '{_get(listener, 'name')}' would be ResolvedRefs=False "
                    "(InvalidCertificateRef): TLS on it would not be served",
                    keys=[(key, path) for key in TLS_KEYS],
                    key_consequence="the listener cannot load the certificate (InvalidCertificateRef)",
                )
                self._cross_namespace(holder, path, "Gateway", "", "Secret", namespace, name)

    # -- selectors

    def _check_selects(self, holder: _Holder, path: str, selector: Any, consequence: str) -> None:
        if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            return
        if not self._selected(holder.namespace, lambda labels: selector_matches(selector, labels)):
            self.report(
                holder,
                path,
                f"selector {_selector_text(selector)} matches no pod template in namespace '{holder.namespace}': "
                f"{consequence}",
            )

    def check_network_policy(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        self._check_selects(
            holder,
            "spec.podSelector",
            _get(obj, "spec", "podSelector"),
            "the policy would apply to no pod, so the isolation it describes protects nothing",
        )

    def check_pdb(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        self._check_selects(
            holder,
            "spec.selector",
            _get(obj, "spec", "selector"),
            "the budget would cover no pod, so drains evict the workload it was meant to protect",
        )

    # -- RBAC

    def check_binding(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        role_ref = _dict(obj.get("roleRef"))
        role_kind = role_ref.get("kind")
        if role_kind in ("Role", "ClusterRole"):
            self.ref(
                holder,
                "roleRef",
                str(role_kind),
                role_ref.get("name"),
                consequence="the binding would grant nothing: its subjects get 403 Forbidden",
            )
        for k, subject in enumerate(_list(obj.get("subjects"))):
            if _get(subject, "kind") != "ServiceAccount":
                continue
            namespace = _name(_get(subject, "namespace")) or holder.namespace
            if namespace is None:
                continue
            self.ref(
                holder,
                f"subjects[{k}]",
                "ServiceAccount",
                _get(subject, "name"),
                namespace=namespace,
                consequence="the binding grants to an account no pod runs as",
            )

    # -- storage

    def check_claim(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """A pre-bound claim: its PersistentVolume exists, is reserved for it, and agrees on the storage class."""
        spec = _dict(obj.get("spec"))
        volume = self.ref(
            holder,
            "spec.volumeName",
            "PersistentVolume",
            spec.get("volumeName"),
            consequence="the claim would stay Pending, waiting for that volume",
        )
        if volume is None or volume.obj is None:
            return
        pv_spec = _dict(volume.obj.get("spec"))
        claim_ref = pv_spec.get("claimRef")
        name = holder.workload.split("/", 1)[1]
        if isinstance(claim_ref, dict):
            reserved = (claim_ref.get("namespace"), claim_ref.get("name"))
            if reserved != (holder.namespace, name):
                self.report(
                    holder,
                    "spec.volumeName",
                    f"PersistentVolume '{spec['volumeName']}' is reserved (claimRef) for "
                    f"'{reserved[0]}/{reserved[1]}': this claim would stay Pending",
                )
        if (
            "storageClassName" in spec
            and "storageClassName" in pv_spec
            and spec["storageClassName"] != pv_spec["storageClassName"]
        ):
            self.report(
                holder,
                "spec.storageClassName",
                f"storageClassName {spec['storageClassName']!r} differs from PersistentVolume "
                f"'{spec['volumeName']}' ({pv_spec['storageClassName']!r}): the claim would never bind",
            )

    def check_statefulset(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """The governing Service exists and is headless: that is what gives the pods stable DNS names."""
        service_name = _get(obj, "spec", "serviceName")
        consequence = "the pods would get no stable DNS names (<pod>.<service>)"
        target = self.ref(holder, "spec.serviceName", "Service", service_name, consequence=consequence)
        if target is not None and target.obj is not None and _get(target.obj, "spec", "clusterIP") != "None":
            self.report(
                holder,
                "spec.serviceName",
                f"Service '{service_name}' is not headless (clusterIP: None): {consequence}",
            )

    # -- CloudNativePG, barman-cloud, VolSync

    def check_cnpg_cluster(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """Secrets and object stores a Cluster reads; external cluster names; no reading its own generated secrets."""
        if _group(obj) != "postgresql.cnpg.io":
            return
        spec, name = _dict(obj.get("spec")), holder.workload.split("/", 1)[1]
        stall = "CloudNativePG would not reconcile the Cluster (secret not found): no instance would start"
        refs: list[tuple[str, Any, Any]] = [("spec.superuserSecret", _get(spec, "superuserSecret", "name"), None)]
        for method in ("initdb", "recovery", "pg_basebackup"):
            refs.append((f"spec.bootstrap.{method}.secret", _get(spec, "bootstrap", method, "secret", "name"), None))
        for field_name in ("serverTLSSecret", "serverCASecret", "clientCASecret", "replicationTLSSecret"):
            refs.append((f"spec.certificates.{field_name}", _get(spec, "certificates", field_name), None))
        for k, role in enumerate(_list(_get(spec, "managed", "roles"))):
            refs.append((f"spec.managed.roles[{k}].passwordSecret", _get(role, "passwordSecret", "name"), None))
        for field_name in ("accessKeyId", "secretAccessKey", "region", "sessionToken"):
            ref = _get(spec, "backup", "barmanObjectStore", "s3Credentials", field_name)
            path = f"spec.backup.barmanObjectStore.s3Credentials.{field_name}"
            refs.append((path, _get(ref, "name"), _get(ref, "key")))
        own = _cnpg_secrets(name, spec)
        external_names = set()
        for k, external in enumerate(_list(spec.get("externalClusters"))):
            external_names.add(_get(external, "name"))
            for field_name in ("sslKey", "sslCert", "sslRootCert", "password"):
                ref = _get(external, field_name)
                path = f"spec.externalClusters[{k}].{field_name}"
                secret = _name(_get(ref, "name"))
                refs.append((path, secret, _get(ref, "key")))
                if secret in own:
                    self.report(
                        holder,
                        path,
                        f"Secret '{secret}' has the name CloudNativePG uses for a Secret it generates for this "
                        f"Cluster itself, not for source cluster '{_get(external, 'name')}': unless the source's copy "
                        "is in place before the Cluster is created (and is complete enough to serve as this "
                        "cluster's own), the operator generates its own under this name and the connection to the "
                        "source fails authentication / certificate verification; give the copy a distinct name",
                    )
            store = _get(external, "plugin", "parameters", "barmanObjectName")
            self._object_store(holder, f"spec.externalClusters[{k}].plugin.parameters.barmanObjectName", store)
        for path, secret, key in refs:
            self.ref(
                holder,
                path,
                "Secret",
                secret,
                consequence=stall,
                keys=[(key, f"{path}.key")] if key is not None else [],
                key_consequence=stall,
            )
        for k, plugin in enumerate(_list(spec.get("plugins"))):
            self._object_store(holder, f"spec.plugins[{k}].parameters.barmanObjectName", _get(plugin, "parameters"))
        for path in ("spec.bootstrap.recovery.source", "spec.bootstrap.pg_basebackup.source", "spec.replica.source"):
            source = _get(spec, *path.split(".")[1:])
            if _name(source) and source not in external_names:
                self.report(
                    holder,
                    path,
                    f"'{source}' is not the name of an entry in spec.externalClusters "
                    f"({', '.join(sorted(str(n) for n in external_names)) or 'none'}): the webhook would reject the "
                    "Cluster, or the operator would not bootstrap it",
                )

    def _object_store(self, holder: _Holder, path: str, parameters_or_name: Any) -> None:
        name = parameters_or_name
        if isinstance(parameters_or_name, dict):
            name = parameters_or_name.get("barmanObjectName")
        self.ref(
            holder,
            path,
            "ObjectStore",
            name,
            consequence="the barman-cloud plugin would fail WAL archiving / restore (ObjectStore not found)",
        )

    def check_scheduled_backup(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        """The cluster exists and has what the backup method needs."""
        if _group(obj) != "postgresql.cnpg.io":
            return
        spec = _dict(obj.get("spec"))
        name = _get(spec, "cluster", "name")
        target = self.ref(
            holder, "spec.cluster", "Cluster", name, consequence="every scheduled backup would fail: no base backups"
        )
        if target is None or target.obj is None:
            return
        cluster_spec = _dict(target.obj.get("spec"))
        method = spec.get("method") or "barmanObjectStore"
        missing = None
        if method == "plugin":
            plugin = _get(spec, "pluginConfiguration", "name")
            if plugin not in {_get(p, "name") for p in _list(cluster_spec.get("plugins"))}:
                missing = f"no spec.plugins entry named '{plugin}'"
        elif method == "barmanObjectStore" and not _get(cluster_spec, "backup", "barmanObjectStore"):
            missing = "no spec.backup.barmanObjectStore"
        elif method == "volumeSnapshot" and not _get(cluster_spec, "backup", "volumeSnapshot"):
            missing = "no spec.backup.volumeSnapshot"
        if missing:
            self.report(
                holder,
                "spec.method",
                f"method '{method}' but Cluster '{name}' has {missing}: every scheduled backup would fail",
            )

    def check_object_store(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        if _group(obj) != "barmancloud.cnpg.io":
            return
        configuration = _dict(_get(obj, "spec", "configuration"))
        fail = "the barman-cloud plugin could not reach the store: WAL archiving and backups would fail"
        selectors = [
            ("s3Credentials", ("accessKeyId", "secretAccessKey", "region", "sessionToken")),
            ("azureCredentials", ("connectionString", "storageAccount", "storageKey", "storageSasToken")),
            ("googleCredentials", ("applicationCredentials",)),
        ]
        refs = [
            (f"spec.configuration.{group}.{field_name}", _get(configuration, group, field_name))
            for group, fields in selectors
            for field_name in fields
        ]
        refs.append(("spec.configuration.endpointCA", configuration.get("endpointCA")))
        for path, ref in refs:
            if isinstance(ref, dict):
                self.ref(
                    holder,
                    path,
                    "Secret",
                    ref.get("name"),
                    consequence=fail,
                    keys=[(ref.get("key"), f"{path}.key")],
                    key_consequence=fail,
                )

    def check_volsync(self, obj: Mapping[str, Any], holder: _Holder) -> None:
        if _group(obj) != "volsync.backube":
            return
        spec = _dict(obj.get("spec"))
        field_name = "sourcePVC" if obj.get("kind") == "ReplicationSource" else "destinationPVC"
        self.ref(
            holder,
            f"spec.{field_name}",
            "PersistentVolumeClaim",
            spec.get(field_name),
            consequence="VolSync would never start a mover: no snapshots of this volume",
        )
        repository = _get(spec, "restic", "repository")
        fail = "the restic mover would fail on every run: no snapshots"
        self.ref(
            holder,
            "spec.restic.repository",
            "Secret",
            repository,
            consequence=fail,
            keys=[(key, "spec.restic.repository") for key in RESTIC_REQUIRED_KEYS],
            key_consequence=fail,
        )


def check_wiring(
    objects: list[dict[str, Any]],
    *,
    externals: Iterable[External] = (),
    optional_refs: Iterable[OptionalRef] = (),
) -> list[Finding]:
    """Every reference between `objects` that a cluster would fail to resolve, in object order."""
    return _Wiring(objects, externals, optional_refs).run()


# ------------------------------------------------------------------------------------------------------- CLI


def load_objects(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Kubernetes objects from YAML files and directories (searched recursively); `kind: List` is unwrapped."""
    import yaml  # only the CLI reads YAML: the check itself stays stdlib-only

    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        files.extend(sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path])
    objects: list[dict[str, Any]] = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "List":
                objects.extend(item for item in _list(doc.get("items")) if isinstance(item, dict))
            elif isinstance(doc, dict):
                objects.append(doc)
    return objects


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print((__doc__ or "").strip())
        return 0 if args else 2
    objects = load_objects(args)
    findings = check_wiring(objects)
    for finding in findings:
        print(finding)
    print(f"{len(objects)} objects, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
