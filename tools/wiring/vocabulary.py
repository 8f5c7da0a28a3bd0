"""The facts the wiring check relies on: which kinds are cluster-scoped, where each workload kind keeps its pod
template, what the API server bootstraps, Gateway API attachment, and what the operators the program uses
(CloudNativePG, cert-manager, VolSync) name, label and require.

Data only, beside the one function that states CloudNativePG's instance labels: the model (model.py,
operators.py) and the rules read these; tools/pod_security.py and the network-policy model in the tests use the same
pod-template table and operator labels, so there is one of each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
TLS_KEYS = ("tls.crt", "tls.key")

GATEWAY_GROUP = "gateway.networking.k8s.io"
#: Which listener protocols each route kind can attach to (Gateway API "Compatible" condition).
ROUTE_PROTOCOLS: dict[str, frozenset[str]] = {
    "HTTPRoute": frozenset({"HTTP", "HTTPS"}),
    "GRPCRoute": frozenset({"HTTP", "HTTPS"}),
    "TLSRoute": frozenset({"TLS"}),
    "TCPRoute": frozenset({"TCP", "TLS"}),
    "UDPRoute": frozenset({"UDP"}),
}

CERT_MANAGER_GROUP = "cert-manager.io"

CNPG_GROUP = "postgresql.cnpg.io"
#: The barman-cloud plugin's ObjectStore.
BARMAN_CLOUD_GROUP = "barmancloud.cnpg.io"
#: Data keys of the Secrets CloudNativePG generates for a role (`-app`, `-superuser`).
CNPG_USER_SECRET_KEYS = frozenset(
    {"username", "user", "password", "dbname", "host", "port", "pgpass", "uri", "jdbc-uri", "fqdn-uri", "fqdn-jdbc-uri"}
)
CNPG_SERVICE_PORTS: frozenset[int | str] = frozenset({5432, "postgres"})
CNPG_ROLES = ("primary", "replica")


def cnpg_instance_labels(cluster: str, role: str, inherited: Mapping[str, Any]) -> dict[str, Any]:
    """The labels CloudNativePG puts on an instance pod of ``cluster`` in ``role`` (besides its inherited ones)."""
    return {
        **inherited,
        "cnpg.io/cluster": cluster,
        "cnpg.io/podRole": "instance",
        "cnpg.io/instanceRole": role,
        "role": role,
    }


VOLSYNC_GROUP = "volsync.backube"
#: Keys VolSync's restic mover requires in the repository Secret.
RESTIC_REQUIRED_KEYS = ("RESTIC_REPOSITORY", "RESTIC_PASSWORD")
#: The labels VolSync puts on the pods of its mover Jobs (`utils.SetOwnedByVolSync` on the Job's template).
VOLSYNC_MOVER_LABELS = {"app.kubernetes.io/created-by": "volsync"}
