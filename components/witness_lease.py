"""A serving pod's witness lease, as pure object builders: the gate and the renewer (components/scripts/
witness-lease.sh ``acquire`` and ``hold``) with their volumes, and what the renewer may do in its own site's cluster.

The gate is an init container: it waits for the Lease, then fills ``serving`` (an emptyDir) with the config the
writers read, so a writer starts only where its site holds the Lease. The renewer is a native sidecar defined right
after it: it renews while the restore and the writers run, and its fence empties ``serving``, stops the writers
(``FENCED_WRITERS``; the pod shares its process namespace) and deletes the pod.

A pod that serves only where its site holds the Lease, but never holds it (Headplane: ``LeaseWiring.follows``), has
a follower (``follow``) in the gate's place and a watcher (``watch``) in the renewer's: they only read the Lease, and
the watcher fences as the renewer does, with no failsafe and no readiness to give up on.

A fenced renewer (components/scripts/witness-lease.sh ``hold`` with ``POD_NAME``) deletes its own pod, so that the
Deployment replaces it: a new gate waits for the Lease, a new restore reads the new holder's backup. A container the
kubelet restarts in place would skip both. The renewer also claims the site's failsafe Lease.

Least privilege: the pod's ServiceAccount gets a Role that allows ``get`` and ``patch`` on its site's failsafe
Lease, ``create`` on Leases and ``delete`` on pods of the namespace, nothing else. RBAC cannot name a pod it does
not know yet, so a ValidatingAdmissionPolicy narrows the delete to the caller's own pod: a token of that
ServiceAccount may delete a pod only when the API server bound it to that very pod (a projected token carries the
pod's name in ``authentication.kubernetes.io/pod-name``). A token copied out of the pod still names the pod it was
bound to, and stops working when that pod is gone. The renewer's delete also names the pod's uid, so a successor of
the same name is never deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ContainerArgsDict,
    EnvVarArgsDict,
    KeyToPathArgsDict,
    PodSpecArgs,
    PodSpecArgsDict,
    ResourceRequirementsArgsDict,
    VolumeArgs,
    VolumeArgsDict,
    VolumeMountArgsDict,
)

from headscale_ha.components.api_spelling import api_spelled, python_spelled
from headscale_ha.components.pod import container_security
from headscale_ha.components.settings import FENCED_WRITERS, FailoverSettings

#: The claim the API server adds to a token bound to a pod (Kubernetes 1.32+: ServiceAccountTokenPodNodeInfo).
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
#: The renewer's view of its own cluster: a projected token bound to the pod, the cluster's CA and the namespace,
#: the files LOCAL_DIR must hold.
LOCAL_VOLUME = "lease-local"
LOCAL_MOUNT = "/var/run/secrets/headscale-ha/lease"
#: A bound token the kubelet refreshes well before it expires (the script reads it again for every request).
TOKEN_SECONDS = 3600
#: The site's own API server, as a pod reaches it.
LOCAL_API_URL = "https://kubernetes.default.svc"
#: The witness's bearer token and CA (``token``, ``ca.crt``): a Secret the stack writes from its witness kubeconfig.
WITNESS_VOLUME = "lease-witness"
WITNESS_MOUNT = "/var/run/secrets/headscale-ha/witness"
#: With the failsafe, a directory per other site (``<site>/api-url``, ``token``, ``ca.crt``, ``namespace``): a Secret
#: of credentials for that site's failsafe Lease and nothing else.
PEERS_VOLUME = "lease-peers"
PEERS_MOUNT = "/var/run/secrets/headscale-ha/peers"
#: The gate's record (fencing counter, resourceVersion, when it renewed) that the renewer goes on from.
STATE_VOLUME = "lease-state"
STATE_MOUNT = "/run/lease"
#: Filled by the gate from the config mounts, emptied by the fence: the writers read their config from here only.
SERVING_VOLUME = "serving"
SERVING_MOUNT = "/serving"
#: The lease containers' own /tmp (the script's private work directory holds the request header with the token).
TMP_VOLUME = "lease-tmp"
SCRIPT_VOLUME = "lease-script"
SCRIPT_MOUNT = "/scripts/lease"
SCRIPT_FILE = "witness-lease.sh"
GATE_CONTAINER = "lease-gate"
RENEWER_CONTAINER = "lease-renewer"
#: A follower's: its gate (``follow``) and its watcher (``watch``).
FOLLOWER_CONTAINER = "lease-follower"
WATCHER_CONTAINER = "lease-watcher"
#: How often a waiting gate looks at the Lease (the bench's figures are at this value).
GATE_RETRY_SECONDS = 1


def lease_rules(lease: str) -> list[dict[str, Any]]:
    """What the script does to one Lease: reads it and writes it (conditional patches) by name, and creates it when
    it is missing. RBAC cannot name an object that is being created, so ``create`` covers every Lease of the
    namespace; reading or changing any other Lease is refused."""
    group = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}
    return [{**group, "resourceNames": [lease], "verbs": ["get", "patch"]}, {**group, "verbs": ["create"]}]


def lease_role(name: str, namespace: str, lease: str) -> dict[str, Any]:
    """A Role for the accounts that take or vouch through one Lease: each site's account on the witness (the Lease
    of ``tailnet.failover``), and each other site's account on a site's own cluster (its failsafe Lease)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": lease_rules(lease),
    }


def renewer_role(name: str, namespace: str, failsafe_lease: str | None) -> dict[str, Any]:
    """The Role of the serving pod's ServiceAccount: its site's failsafe Lease (None: a follower's, which has none),
    and pod deletes, in its namespace (the admission policy of :func:`own_pod_policy` narrows the deletes to the pod
    itself)."""
    rules = lease_rules(failsafe_lease) if failsafe_lease is not None else []
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [*rules, {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}],
    }


def renewer_role_binding(name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Binds :func:`renewer_role` to the serving pod's ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


def own_pod_policy(name: str, namespace: str, service_account: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding: the ServiceAccount may delete only the pod its token is bound
    to. Cluster-scoped, so ``name`` must be unique in the cluster (one per stack and namespace)."""
    user = f"system:serviceaccount:{namespace}:{service_account}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
                ],
            },
            "matchConditions": [
                {"name": "the-serving-pods-account", "expression": f"request.userInfo.username == '{user}'"}
            ],
            "validations": [
                {
                    "expression": (
                        f"'{POD_NAME_CLAIM}' in request.userInfo.extra"
                        f" && request.userInfo.extra['{POD_NAME_CLAIM}'] == [request.name]"
                    ),
                    "message": f"{user} may delete only the pod its token is bound to",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return policy, binding


def local_volume() -> VolumeArgsDict:
    """LOCAL_DIR for the renewer alone: a token bound to the pod, the cluster's CA and the pod's namespace."""
    return {
        "name": LOCAL_VOLUME,
        "projected": {
            "sources": [
                {"service_account_token": {"path": "token", "expiration_seconds": TOKEN_SECONDS}},
                {"config_map": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downward_api": {"items": [{"path": "namespace", "field_ref": {"field_path": "metadata.namespace"}}]}},
            ],
            "default_mode": 0o440,
        },
    }


def own_pod_env() -> list[EnvVarArgsDict]:
    """POD_NAME and POD_UID from the downward API: the pod a fenced renewer deletes."""
    return [
        {"name": "POD_NAME", "value_from": {"field_ref": {"field_path": "metadata.name"}}},
        {"name": "POD_UID", "value_from": {"field_ref": {"field_path": "metadata.uid"}}},
    ]


@dataclass(frozen=True, kw_only=True)
class LeaseWiring:
    """What the gate and the renewer of one site's serving pod need."""

    site: str  # this site's name: the first part of the holder's identity, and its directory's name to the others
    failover: FailoverSettings  # the Lease, its timing and the failsafe (the same at every site)
    witness_api_url: pulumi.Input[str]  # the witness API server, https:// (plain: its CA and token are secrets)
    witness_secret: str  # the Secret with the witness's token and ca.crt
    peers_secret: str  # with the failsafe: the Secret with a directory of credentials per other site
    peers: tuple[str, ...]  # the other sites, each a directory of the peers Secret
    image: str  # a shell-and-curl image (the position recorder's)
    script_config_map: str  # the ConfigMap holding SCRIPT_FILE
    serve_from: str  # the directory of config files the gate copies into SERVING_MOUNT
    serve_from_mounts: tuple[VolumeMountArgsDict, ...]  # the gate's mounts of that directory's files
    resources: ResourceRequirementsArgsDict  # each lease container's requests and limits
    #: The processes a fence stops, in order, by name (the script's STOP): the pod's writers.
    writers: tuple[str, ...] = FENCED_WRITERS
    #: The pod follows its site's holder (``follow``/``watch``) instead of holding the Lease (``acquire``/``hold``).
    follows: bool = False

    @property
    def commands(self) -> tuple[str, str]:
        """The gate's and the sidecar's script commands."""
        return ("follow", "watch") if self.follows else ("acquire", "hold")

    @property
    def failsafe_lease(self) -> str:
        """The failsafe's Lease in each site's own namespace."""
        return f"{self.failover.lease}-failsafe"


def lease_volumes(wiring: LeaseWiring) -> list[VolumeArgsDict]:
    """Every volume the gate and the renewer mount, besides the config files the gate copies. The peers Secret's
    keys are ``<site>.<file>`` (a site name has no dot), each mounted as ``<site>/<file>``."""
    script: KeyToPathArgsDict = {"key": SCRIPT_FILE, "path": SCRIPT_FILE}
    volumes: list[VolumeArgsDict] = [
        {"name": SERVING_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "4Mi"}},
        {"name": STATE_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
        {"name": TMP_VOLUME, "empty_dir": {"medium": "Memory", "size_limit": "1Mi"}},
        {"name": WITNESS_VOLUME, "secret": {"secret_name": wiring.witness_secret, "default_mode": 0o440}},
        local_volume(),
        {"name": SCRIPT_VOLUME, "config_map": {"name": wiring.script_config_map, "items": [script]}},
    ]
    if wiring.failover.failsafe and not wiring.follows:
        files = [(peer, part) for peer in wiring.peers for part in ("api-url", "token", "ca.crt", "namespace")]
        items: list[KeyToPathArgsDict] = [{"key": f"{peer}.{part}", "path": f"{peer}/{part}"} for peer, part in files]
        volumes.append(
            {
                "name": PEERS_VOLUME,
                "secret": {"secret_name": wiring.peers_secret, "items": items, "default_mode": 0o440},
            }
        )
    return volumes


def lease_environment(wiring: LeaseWiring, command: str) -> list[EnvVarArgsDict]:
    """The script's environment for a gate (``acquire``, ``follow``) or its sidecar (``hold``, ``watch``); IDENTITY
    names the pod."""
    failover = wiring.failover
    script_environment = {**failover.script_environment(), "STOP": " ".join(wiring.writers)}
    env: list[EnvVarArgsDict] = [
        *own_pod_env(),
        {"name": "API_URL", "value": wiring.witness_api_url},
        {"name": "NAMESPACE", "value": failover.witness_namespace},
        {"name": "LEASE", "value": failover.lease},
        {"name": "IDENTITY", "value": f"{wiring.site}/$(POD_NAME)"},
        *({"name": key, "value": value} for key, value in script_environment.items()),
        {"name": "RETRY_SECONDS", "value": str(GATE_RETRY_SECONDS)},
        {"name": "STATE_DIR", "value": STATE_MOUNT},
        {"name": "TOKEN_FILE", "value": f"{WITNESS_MOUNT}/token"},
        {"name": "CA_FILE", "value": f"{WITNESS_MOUNT}/ca.crt"},
        {"name": "SERVE_DIR", "value": SERVING_MOUNT},
        {"name": "LOCAL_API_URL", "value": LOCAL_API_URL},
        {"name": "LOCAL_DIR", "value": LOCAL_MOUNT},
    ]
    if failover.failsafe and not wiring.follows:
        env.append({"name": "FAILSAFE_LEASE", "value": wiring.failsafe_lease})
    if command in ("acquire", "follow"):  # a gate stops nothing and reads no other site
        env = [e for e in env if e["name"] not in ("STOP", "STOP_GRACE_SECONDS")]
        env.append({"name": "SERVE_FROM", "value": wiring.serve_from})
    elif failover.failsafe and not wiring.follows:
        env.append({"name": "PEERS_DIR", "value": PEERS_MOUNT})
    return env


def _lease_container(
    wiring: LeaseWiring,
    name: str,
    command: str,
    mounts: list[VolumeMountArgsDict],
    more_env: Sequence[EnvVarArgsDict] = (),
) -> ContainerArgsDict:
    return {
        "name": name,
        "image": wiring.image,
        "command": ["/bin/sh", f"{SCRIPT_MOUNT}/{SCRIPT_FILE}", command],
        "env": [*lease_environment(wiring, command), *more_env],
        "volume_mounts": [
            {"name": SCRIPT_VOLUME, "mount_path": SCRIPT_MOUNT, "read_only": True},
            {"name": STATE_VOLUME, "mount_path": STATE_MOUNT},
            {"name": SERVING_VOLUME, "mount_path": SERVING_MOUNT},
            {"name": WITNESS_VOLUME, "mount_path": WITNESS_MOUNT, "read_only": True},
            {"name": LOCAL_VOLUME, "mount_path": LOCAL_MOUNT, "read_only": True},
            {"name": TMP_VOLUME, "mount_path": "/tmp"},
            *mounts,
        ],
        "resources": wiring.resources,
        "security_context": container_security(),
    }


def gate_container(wiring: LeaseWiring) -> ContainerArgsDict:
    """The first init container: done once this site holds the Lease (a follower's: once it has held it for a lease)
    and ``serving`` holds the config."""
    name = FOLLOWER_CONTAINER if wiring.follows else GATE_CONTAINER
    return _lease_container(wiring, name, wiring.commands[0], list(wiring.serve_from_mounts))


def renewer_container(wiring: LeaseWiring, ready_url: str | None = None) -> ContainerArgsDict:
    """The native sidecar right after the gate: it renews before the restore starts and stops after the writers,
    so that on a pod's stop it releases the Lease only once they have exited. With ``ready_url`` (the writer's
    readiness, in the pod), it gives the Lease up to another site when that has not answered within
    ``readyWithinSeconds`` of the take. A follower's watcher has neither the failsafe nor a readiness to wait for."""
    if wiring.follows:
        return {**_lease_container(wiring, WATCHER_CONTAINER, "watch", []), "restart_policy": "Always"}
    peers: list[VolumeMountArgsDict] = (
        [{"name": PEERS_VOLUME, "mount_path": PEERS_MOUNT, "read_only": True}] if wiring.failover.failsafe else []
    )
    ready: list[EnvVarArgsDict] = []
    if ready_url is not None:
        within = str(wiring.failover.ready_within_seconds)
        ready = [{"name": "READY_URL", "value": ready_url}, {"name": "READY_WITHIN_SECONDS", "value": within}]
    return {**_lease_container(wiring, RENEWER_CONTAINER, "hold", peers, ready), "restart_policy": "Always"}


def ready_url(pod_spec: PodSpecArgsDict) -> str | None:
    """The readiness URL of the pod's first container with an HTTP readiness probe, as the pod's own containers
    reach it (its network is theirs): ``http://127.0.0.1:<port><path>``, a named port resolved. Read from the spec
    as the cluster gets it."""
    for container in api_spelled(pod_spec, PodSpecArgs).get("containers", []):
        probe = container.get("readinessProbe", {}).get("httpGet")
        if probe is None:
            continue
        port = probe["port"]
        if isinstance(port, str):
            port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == port), None)
        if port is None:  # a probe on a port the container does not name: the API server refuses the pod anyway
            continue
        scheme = probe.get("scheme", "HTTP").lower()
        return f"{scheme}://127.0.0.1:{port}{probe.get('path', '/')}"
    return None


#: Where the gate finds the config volumes it serves: one directory per volume, copied under the same name into
#: ``serving``.
SERVE_FROM_MOUNT = "/serve-from"


def serve_from_mounts(served: Mapping[str, str]) -> tuple[VolumeMountArgsDict, ...]:
    """The gate's mounts of each served volume (volume name -> its directory in ``serving``), whole and read-only."""
    return tuple(
        {"name": volume, "mount_path": f"{SERVE_FROM_MOUNT}/{directory}", "read_only": True}
        for volume, directory in served.items()
    )


def _through_serving(mount: dict[str, Any], served: Mapping[str, str]) -> dict[str, Any]:
    """A mount of a served volume (as the API spells it), moved to the same path in ``serving``: where the gate
    copied it. After a fence the directory (or file) is gone, and the kubelet mounts an empty directory in its
    place: nothing restarted in place finds its config."""
    directory = served.get(mount["name"])
    if directory is None:
        return mount
    sub_path = f"{directory}/{mount['subPath']}" if "subPath" in mount else directory
    return {**mount, "name": SERVING_VOLUME, "subPath": sub_path, "readOnly": True}


def gated_pod_spec(
    pod_spec: PodSpecArgsDict, wiring: LeaseWiring, served: Mapping[str, str], service_account: str
) -> PodSpecArgsDict:
    """``pod_spec`` behind the lease: the gate and the renewer first, every container reading the ``served``
    volumes (volume name -> its directory in ``serving``) through ``serving`` only, the process namespace shared
    (the fence signals the writers) and the renewer's ServiceAccount. ``wiring`` must serve from
    ``SERVE_FROM_MOUNT`` with ``serve_from_mounts(served)``."""
    if wiring.serve_from != SERVE_FROM_MOUNT or tuple(wiring.serve_from_mounts) != serve_from_mounts(served):
        raise ValueError("wiring: the gate must copy exactly the served volumes (serve_from_mounts(served))")

    # The pod's own containers are read, and rewritten, as the cluster gets them.
    spec = api_spelled(pod_spec, PodSpecArgs)

    def read_through_serving(container: dict[str, Any]) -> ContainerArgsDict:
        mounts = [_through_serving(mount, served) for mount in container.get("volumeMounts", [])]
        return python_spelled({**container, "volumeMounts": mounts}, ContainerArgs)

    return {
        **pod_spec,
        "service_account_name": service_account,
        "share_process_namespace": True,
        "init_containers": [
            gate_container(wiring),
            renewer_container(wiring, ready_url(pod_spec)),
            *(read_through_serving(container) for container in spec.get("initContainers", [])),
        ],
        "containers": [read_through_serving(container) for container in spec["containers"]],
        "volumes": [*python_spelled(spec["volumes"], VolumeArgs), *lease_volumes(wiring)],
    }
