"""Layer 1 of the split gateway of one cluster: HA subnet routers.

Tailscale-only pods, one StatefulSet of one pod per replica, one replica per node (anti-affinity), each with its own
state Secret so a restart keeps its node identity; they advertise the cluster CIDRs and the tailnet LB pool,
approved by the policy's autoApprovers. Layer 2, behind one stable IP, is components/gateway_services.py: split DNS
and the tailnet kubeconfig point at that IP, never at a per-replica tailnet IP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    EnvVarArgsDict,
    PodSecurityContextArgsDict,
    PodSpecArgsDict,
    SecurityContextArgsDict,
)
from pulumi_kubernetes.meta.v1 import ObjectMetaArgsDict
from pulumi_kubernetes.rbac.v1 import PolicyRuleArgsDict

from headscale_ha.components.pod import (
    Meta,
    container_security,
    labels,
    pod_security,
    resources,
    selector,
    spread,
    static_check_skips,
)
from headscale_ha.components.settings import ClusterSettings, ComputeResources, ResourceAmounts, RouterMode, Site
from headscale_ha.components.workload import disruption_budget

ROUTERS = "subnet-router"
AUTHKEY_SECRET = "subnet-router-authkey"  # prefix: replica N reads Secret `subnet-router-authkey-N` only
AUTHKEY_DIR = "/etc/tailscale-authkey"  # the key Secret, mounted whole: kubelet refreshes it after each `pulumi up`
AUTHKEY_FILE = "authkey"  # the one data key of a replica's key Secret
#: Tells each replica's pods apart (its StatefulSet's selector); every replica shares the app label.
ORDINAL_LABEL = "headscale-ha/router-ordinal"
SKIP_AWAIT = "pulumi.com/skipAwait"
KEY_SOURCE_ANNOTATION = "headscale-ha/auth-key-source"
HEALTH_PORT = 9002  # containerboot's /healthz (TS_ENABLE_HEALTH_CHECK)
ROOT_ANNOTATION = "headscale-ha/runs-as-root"
_ROUTER = ComputeResources(
    requests=ResourceAmounts(cpu="20m", memory="64Mi"), limits=ResourceAmounts(cpu="1", memory="256Mi")
)


def advertised_routes(site: Site) -> list[str]:
    """What a site's routers advertise: its cluster CIDRs and its tailnet LB pool (sorted, unique)."""
    return sorted({*site.routes, site.lb_pool})


def router_key_name(ordinal: int | str) -> str:
    """The name of the enrolment key of router replica ``ordinal`` (its expiry metric's `name` label)."""
    return f"authkey-{ordinal}"


def router_name(ordinal: int) -> str:
    """Replica ``ordinal``'s StatefulSet, ServiceAccount, Role and state Secret (its pod is `<name>-0`)."""
    return f"{ROUTERS}-{ordinal}"


def router_key_secret(ordinal: int) -> str:
    """The Secret holding replica ``ordinal``'s enrolment key (data key AUTHKEY_FILE), mounted by that replica only."""
    return f"{AUTHKEY_SECRET}-{ordinal}"


def router_check_reasons(mode: RouterMode) -> dict[str, str]:
    """Static checks the routers are exempt from, and why (checkov ids)."""
    reasons = {
        "CKV_K8S_38": "containerboot keeps each replica's node state in its own Secret through the API: the token "
        "is needed, and its Role can touch exactly those Secrets",
    }
    if mode is RouterMode.KERNEL:
        why = "kernel-mode routing needs root with NET_ADMIN (routes, tun); opted into with gateway.routers.mode"
        reasons |= {"CKV_K8S_23": why, "CKV_K8S_25": why, "CKV_K8S_40": why}
    return reasons


def key_check(namespace: str, ordinal: int, key_dir: str = AUTHKEY_DIR) -> str:
    """The router's entrypoint: point containerboot at the key file of its own mounted Secret (never the pod spec,
    never the key itself in an environment a process listing shows: containerboot hands TS_AUTHKEY to `tailscale up
    --authkey=`, which reads a `file:` value from the file, tailscale 1.82 cmd/tailscale/cli/up.go); say in the log
    when it is absent; then run containerboot."""
    message = (
        f"subnet-router: no pre-auth key for {router_name(ordinal)} (Secret {namespace}/{router_key_secret(ordinal)}, "
        f"key {AUTHKEY_FILE}, is missing or empty); a replica that never enrolled stays not ready. "
        "Set bootstrapApiKey (the stack mints one single-use key per replica) or routerAuthKeys, then pulumi up: "
        "see the stack output nextSteps."
    )
    return (
        f'key_file="{key_dir}/{AUTHKEY_FILE}"; '
        'if [ -s "$key_file" ]; then TS_AUTHKEY="file:$key_file"; export TS_AUTHKEY; '
        f'else echo "{message}" >&2; fi; '
        "exec /usr/local/bin/containerboot"
    )


@dataclass(frozen=True, kw_only=True)
class SubnetRoutersArgs:
    """What the subnet routers of one site need; nothing here knows a stack file."""

    namespace: str  # where the StatefulSets, their state Secrets and RBAC live (kernel mode needs `privileged` PSA)
    replicas: int  # router replicas; more than one spreads them one per node and adds a PodDisruptionBudget
    image: str  # the tailscale image (containerboot)
    mode: RouterMode  # `kernel` (root + NET_ADMIN, tun) or `userspace` (restricted, no tun)
    routes: tuple[str, ...]  # CIDRs advertised (TS_ROUTES), in this order
    tag: str  # the ACL tag the routers join with; the policy's autoApprovers approve their routes by it
    login_server: str  # the control server URL (`https://<public hostname>`)
    hostname_prefix: str  # tailnet node names are `<prefix>-subnet-router-<ordinal>`
    cluster: ClusterSettings  # the cluster's placement rules (worker nodes, excluded nodes, toleration of node loss)
    key_source: str | None = None  # where the keys come from (e.g. `minted`); None: no key yet, so Pulumi
    # does not wait for readiness. A pod annotation carries it, so the pods roll when a source appears.
    key_secrets: tuple[pulumi.Resource, ...] = ()  # the resources that write the keys; the routers start after them


class SubnetRouters(pulumi.ComponentResource):
    """Tailscale subnet routers; see the module docstring.

    Each replica is a StatefulSet of one pod (`subnet-router-<N>`, pod `subnet-router-<N>-0`) with a ServiceAccount
    and Role of its own, so its token can touch only its own state Secret and its pod mounts only its own key
    Secret: one router cannot read another's node key or unused pre-auth key, nor wipe its state. Pulumi updates
    the replicas one after the other (each waits for the previous one's rollout), so a change keeps the others
    routing, as one StatefulSet's rolling update would.

    Outputs (also attributes): `namespace`; `statefulSets` (`statefulset_names`), one per replica;
    `stateSecrets` (`state_secret_names`), one Secret per replica holding its node state; `authKeySecrets`
    (`auth_key_secrets`), the Secret each replica reads its pre-auth key from (file `authkey`); `replicas`;
    `routes`, what they advertise.
    """

    statefulsets: list[k8s.apps.v1.StatefulSet]
    state_secrets: list[k8s.core.v1.SecretPatch]
    namespace: str
    statefulset_names: list[str]
    state_secret_names: list[str]
    auth_key_secrets: list[str]
    routes: list[str]

    def __init__(self, name: str, args: SubnetRoutersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:gateway:SubnetRouters", name, None, opts)
        self._name, self._args = name, args
        child = pulumi.ResourceOptions(parent=self)
        self.state_secrets, self.statefulsets = [], []
        previous: pulumi.Resource | None = None
        for ordinal in range(args.replicas):
            state = self._state_secret(ordinal)
            access = self._access(ordinal)
            previous = self._statefulset(ordinal, [state, *access, *args.key_secrets, *_opt(previous)])
            self.state_secrets.append(state)
            self.statefulsets.append(previous)
        if args.replicas > 1:
            disruption_budget(f"{name}-pdb", ROUTERS, args.namespace, child)
        self.namespace = args.namespace
        self.statefulset_names = [router_name(n) for n in range(args.replicas)]
        self.state_secret_names = list(self.statefulset_names)
        self.auth_key_secrets = [router_key_secret(n) for n in range(args.replicas)]
        self.routes = list(args.routes)
        self.register_outputs(
            {
                "namespace": self.namespace,
                "statefulSets": self.statefulset_names,
                "stateSecrets": self.state_secret_names,
                "authKeySecrets": self.auth_key_secrets,
                "replicas": args.replicas,
                "routes": self.routes,
            }
        )

    def _meta(self, ordinal: int | None = None) -> Meta:
        extra = {} if ordinal is None else {ORDINAL_LABEL: str(ordinal)}
        return {"namespace": self._args.namespace, "labels": {**labels(ROUTERS, "gateway"), **extra}}

    def _state_secret(self, ordinal: int) -> k8s.core.v1.SecretPatch:
        """The replica's state Secret, named after it: tailscale keeps its node key there. Applied server-side (a
        Patch resource) with no data: Pulumi owns only the labels and never touches what tailscale writes.
        Retained: a destroy or a scale-down must not force a re-enrolment, and the apply adopts a retained one when
        the replica comes back (a plain create would fail: AlreadyExists)."""
        return k8s.core.v1.SecretPatch(
            f"{self._name}-state-{ordinal}",
            metadata={
                **self._meta(ordinal),
                "name": router_name(ordinal),
                "annotations": {"pulumi.com/patchForce": "true"},
            },
            type="Opaque",
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )

    def _access(self, ordinal: int) -> list[pulumi.Resource]:
        """The replica's governing headless Service (the StatefulSet's serviceName, selecting its pod alone), its
        ServiceAccount, and a Role (bound to that account alone) on its own state Secret only."""
        child = pulumi.ResourceOptions(parent=self)
        own = router_name(ordinal)
        meta: ObjectMetaArgsDict = {**self._meta(ordinal), "name": own}
        headless = k8s.core.v1.Service(
            f"{self._name}-headless-{ordinal}",
            metadata=meta,
            spec={"cluster_ip": "None", "selector": self._selector(ordinal), "ports": [{"name": "none", "port": 1}]},
            opts=child,
        )
        account = k8s.core.v1.ServiceAccount(
            f"{self._name}-account-{ordinal}", metadata=meta, automount_service_account_token=False, opts=child
        )
        rule: PolicyRuleArgsDict = {
            "api_groups": [""],
            "resources": ["secrets"],
            "resource_names": [own],
            "verbs": ["get", "update", "patch"],
        }
        role = k8s.rbac.v1.Role(f"{self._name}-role-{ordinal}", metadata=meta, rules=[rule], opts=child)
        binding = k8s.rbac.v1.RoleBinding(
            f"{self._name}-binding-{ordinal}",
            metadata=meta,
            role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": own},
            subjects=[{"kind": "ServiceAccount", "name": own, "namespace": self._args.namespace}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        return [headless, account, role, binding]

    @staticmethod
    def _selector(ordinal: int) -> dict[str, str]:
        return {**selector(ROUTERS), ORDINAL_LABEL: str(ordinal)}

    def _statefulset(self, ordinal: int, after: list[pulumi.Resource]) -> k8s.apps.v1.StatefulSet:
        args = self._args
        pod_spec = self._pod_spec(args, ordinal)
        annotations = static_check_skips(pod_spec, router_check_reasons(args.mode))
        if args.key_source is None:
            # Without a key the routers cannot become ready until the next `pulumi up` mints one: do not wait.
            annotations[SKIP_AWAIT] = "true"
        own = router_name(ordinal)
        return k8s.apps.v1.StatefulSet(
            f"{self._name}-statefulset-{ordinal}",
            metadata={**self._meta(ordinal), "name": own, "annotations": annotations},
            spec={
                "replicas": 1,
                "service_name": own,
                "selector": {"match_labels": self._selector(ordinal)},
                "template": {
                    "metadata": {
                        "labels": self._meta(ordinal)["labels"],
                        "annotations": {
                            # A router reads its key file only when it starts: when a key source appears, the
                            # pods roll and the ones that never enrolled pick their key up.
                            KEY_SOURCE_ANNOTATION: args.key_source or "none",
                            **({ROOT_ANNOTATION: "kernel-networking"} if args.mode is RouterMode.KERNEL else {}),
                        },
                    },
                    "spec": pod_spec,
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=after, **_layout_move(self._name, ordinal)),
        )

    @staticmethod
    def _pod_spec(args: SubnetRoutersArgs, ordinal: int) -> PodSpecArgsDict:
        kernel = args.mode is RouterMode.KERNEL
        own = router_name(ordinal)
        extra_args = f"--login-server={args.login_server} --advertise-tags={args.tag} --accept-dns=false"
        env: list[EnvVarArgsDict] = [
            {"name": "TS_KUBE_SECRET", "value": own},
            {"name": "TS_HOSTNAME", "value": f"{args.hostname_prefix}-{own}"},
            # The key is not in the pod spec: key_check reads this replica's own key Secret. Log in only while
            # the node has no state: an enrolled replica never presents its (used, single-use) key again.
            {"name": "TS_AUTH_ONCE", "value": "true"},
            {"name": "TS_ENABLE_HEALTH_CHECK", "value": "true"},
            {"name": "TS_LOCAL_ADDR_PORT", "value": f"[::]:{HEALTH_PORT}"},
            {"name": "TS_ROUTES", "value": ",".join(args.routes)},
            {"name": "TS_USERSPACE", "value": "false" if kernel else "true"},
            {"name": "TS_EXTRA_ARGS", "value": extra_args},
            {"name": "TS_SOCKET", "value": "/tmp/tailscaled.sock"},
        ]
        security, pod_context = _router_security(kernel)
        return {
            "service_account_name": own,
            "automount_service_account_token": True,  # containerboot stores the node state in its Secret
            "enable_service_links": False,
            "security_context": pod_context,
            **spread(args.cluster, ROUTERS, args.replicas),
            "containers": [
                {
                    "name": "tailscale",
                    "image": args.image,
                    "command": ["/bin/sh", "-c", key_check(args.namespace, ordinal)],
                    "env": env,
                    "ports": [{"name": "health", "container_port": HEALTH_PORT, "protocol": "TCP"}],
                    # Alive while tailscaled's local server answers; readiness (below) also needs the tailnet.
                    "liveness_probe": {"tcp_socket": {"port": "health"}, "period_seconds": 20, "failure_threshold": 3},
                    # /healthz answers 200 only once the node has its tailnet addresses: no key, no readiness.
                    "readiness_probe": {
                        "http_get": {"path": "/healthz", "port": "health"},
                        "period_seconds": 10,
                        "failure_threshold": 3,
                    },
                    "resources": resources(_ROUTER),
                    "security_context": security,
                    "volume_mounts": [
                        {"name": "tmp", "mount_path": "/tmp"},
                        {"name": "authkey", "mount_path": AUTHKEY_DIR, "read_only": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "empty_dir": {"size_limit": "64Mi"}},
                {
                    # Optional by design: the first `pulumi up` runs before Headscale can mint keys. Without its
                    # key the pod logs why (see key_check) and stays not ready; an enrolled replica keeps its state.
                    # Mounted whole, not by subPath, so kubelet swaps in the key the next `pulumi up` mints.
                    "name": "authkey",
                    "secret": {"secret_name": router_key_secret(ordinal), "optional": True, "default_mode": 0o440},
                },
            ],
        }


def router_key_secrets(
    name: str, namespace: str, keys: Sequence[pulumi.Input[str]], opts: pulumi.ResourceOptions
) -> list[k8s.core.v1.Secret]:
    """One Secret per router replica (`subnet-router-authkey-<N>`, data key `authkey`) holding its enrolment key:
    each replica's pod mounts its own and no other (see SubnetRouters)."""
    return [
        k8s.core.v1.Secret(
            f"{name}-{ordinal}",
            metadata={
                "name": router_key_secret(ordinal),
                "namespace": namespace,
                "labels": {**labels(ROUTERS, "auth"), ORDINAL_LABEL: str(ordinal)},
            },
            type="Opaque",
            string_data={AUTHKEY_FILE: pulumi.Output.secret(key)},
            opts=opts,
        )
        for ordinal, key in enumerate(keys)
    ]


def _opt(resource: pulumi.Resource | None) -> list[pulumi.Resource]:
    return [] if resource is None else [resource]


def _layout_move(name: str, ordinal: int) -> dict[str, Any]:
    """Up to release 0.1.0 the replicas were one StatefulSet `subnet-router` (Pulumi name `<name>-statefulset`).
    Replica 0 takes that resource over through an alias, and is replaced delete-first: the old pods stop before any
    new one starts, so two pods never run on one node identity (the state Secrets keep their names); replicas 1 and
    up follow replica 0. A one-time outage of the routes while the new pods start, paid on that upgrade only."""
    if ordinal != 0:
        return {}
    return {"aliases": [pulumi.Alias(name=f"{name}-statefulset")], "delete_before_replace": True}


def _router_security(kernel: bool) -> tuple[SecurityContextArgsDict, PodSecurityContextArgsDict]:
    """The container's and the pod's security contexts: restricted, or (kernel mode) root with NET_ADMIN only."""
    if not kernel:
        return container_security(), pod_security()
    security: SecurityContextArgsDict = {
        "allow_privilege_escalation": False,
        "read_only_root_filesystem": True,
        "run_as_user": 0,
        "run_as_non_root": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        "seccomp_profile": {"type": "RuntimeDefault"},
    }
    return security, {"seccomp_profile": {"type": "RuntimeDefault"}}
