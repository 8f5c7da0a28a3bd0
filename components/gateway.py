"""The split gateway of one cluster: HA subnet routers, and gateway services behind one stable IP.

Layer 1, `SubnetRouters`: tailscale-only pods in a StatefulSet, one per node (anti-affinity), each with its own
state Secret so a restart keeps its node identity; they advertise the cluster CIDRs and the tailnet LB pool,
approved by the policy's autoApprovers. Layer 2, `GatewayServices`: CoreDNS for the site's split-DNS zone and
socat proxies, in a normal Deployment behind ONE LoadBalancer Service whose IP comes from the Cilium pool and
never changes. Split DNS and the tailnet kubeconfig point at that IP, never at a per-replica tailnet IP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.gateway_config import render_corefile, render_hosts
from components.pod import (
    checksum,
    container_security,
    labels,
    pod_security,
    resources,
    scheduling,
    selector,
    static_check_skips,
)
from components.settings import ApiServer, Cluster, ComputeResources, Proxy, ResourceAmounts, RouterMode, Site

ROUTERS = "subnet-router"
SERVICES = "tailnet-gateway"
DNS_PORT = 1053  # unprivileged in the pod; the Service answers on 53
COREFILE_DIR = "/etc/coredns-config"
HOSTS_DIR = "/etc/coredns-hosts"  # a directory mount, so CoreDNS sees ConfigMap updates and reloads
COREFILE_CONFIG_MAP = "tailnet-dns-corefile"
HOSTS_CONFIG_MAP = "tailnet-dns-hosts"
AUTHKEY_SECRET = "subnet-router-authkey"
AUTHKEY_DIR = "/etc/tailscale-authkey"  # the key Secret, mounted whole: kubelet refreshes it after each `pulumi up`
SKIP_AWAIT = "pulumi.com/skipAwait"
KEY_SOURCE_ANNOTATION = "headscale-ha/auth-key-source"
#: CoreDNS's `prometheus` plugin, for the PodMonitor (monitoring on).
DNS_METRICS_PORT = 9153
HEALTH_PORT = 9002  # containerboot's /healthz (TS_ENABLE_HEALTH_CHECK)
POOL_LABEL = "io.cilium/lb-pool"
ROOT_ANNOTATION = "headscale-ha/runs-as-root"
_SMALL = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="32Mi"), limits=ResourceAmounts(cpu="200m", memory="128Mi")
)
_ROUTER = ComputeResources(
    requests=ResourceAmounts(cpu="20m", memory="64Mi"), limits=ResourceAmounts(cpu="1", memory="256Mi")
)


def advertised_routes(site: Site) -> list[str]:
    """What a site's routers advertise: its cluster CIDRs and its tailnet LB pool (sorted, unique)."""
    return sorted({*site.routes, site.lb_pool})


def default_proxies(api_server: ApiServer) -> list[Proxy]:
    """The proxies a Talos/Cilium cluster needs: kube-api and talos to the API server, clustermesh etcd."""
    return [
        Proxy(name="kube-api", port=6443, target_host=api_server.host, target_port=api_server.port),
        Proxy(name="talos", port=50000, target_host=api_server.host, target_port=50000),
        Proxy(
            name="clustermesh",
            port=2379,
            target_host="clustermesh-apiserver.kube-system.svc.cluster.local",
            target_port=2379,
        ),
    ]


def router_key_name(ordinal: int | str) -> str:
    """The data key (and file) holding the enrolment key of the router replica with this StatefulSet ordinal."""
    return f"authkey-{ordinal}"


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


def key_check(namespace: str, secret: str = AUTHKEY_SECRET, key_dir: str = AUTHKEY_DIR) -> str:
    """The router's entrypoint: take the key of this pod's ordinal from the mounted Secret, into containerboot's
    environment only (never the pod spec); say in the log when it is absent; then run containerboot."""
    message = (
        f"subnet-router: no pre-auth key for $POD_NAME (Secret {namespace}/{secret}, "
        f"key {router_key_name('$ordinal')}, is missing or empty); a replica that never enrolled stays not ready. "
        "Set bootstrapApiKey (the stack mints one single-use key per replica) or routerAuthKeys, then pulumi up: "
        "see the stack output nextSteps."
    )
    return (
        'ordinal="${POD_NAME##*-}"; '
        f'key_file="{key_dir}/{router_key_name("${ordinal}")}"; '
        'if [ -s "$key_file" ]; then TS_AUTHKEY="$(cat "$key_file")"; export TS_AUTHKEY; '
        f'else echo "{message}" >&2; fi; '
        "exec /usr/local/bin/containerboot"
    )


def dns_records(zone: str, gateway_ip: str, hosts: Mapping[str, str]) -> dict[str, str]:
    """Names of the site's zone: `gateway` and `api` on the stable gateway IP, then `hosts` (name -> address)."""
    records = {f"gateway.{zone}": gateway_ip, f"api.{zone}": gateway_ip}
    records.update({f"{name}.{zone}": address for name, address in hosts.items()})
    return records


def endpoints(gateway_ip: str, proxies: Sequence[Proxy]) -> dict[str, str]:
    """`ip:port` of every service behind the gateway IP: DNS and each proxy."""
    return {"dns": f"{gateway_ip}:53", **{proxy.name: f"{gateway_ip}:{proxy.port}" for proxy in proxies}}


def spread(cluster: Cluster, app: str, replicas: int) -> dict[str, Any]:
    """The cluster's scheduling rules, plus one replica per node when there are several."""
    placement = scheduling(cluster)
    if replicas > 1:
        placement["affinity"]["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": selector(app)}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    return placement


def _disruption_budget(
    name: str, app: str, namespace: str, opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget:
    return k8s.policy.v1.PodDisruptionBudget(
        name,
        metadata={"name": app, "namespace": namespace, "labels": labels(app, "gateway")},
        spec={"maxUnavailable": 1, "selector": {"matchLabels": selector(app)}},
        opts=opts,
    )


@dataclass(frozen=True, kw_only=True)
class SubnetRoutersArgs:
    """What the subnet routers of one site need; nothing here knows a stack file."""

    namespace: str  # where the StatefulSet, its state Secrets and RBAC live (kernel mode needs `privileged` PSA)
    replicas: int  # router pods; more than one spreads them one per node and adds a PodDisruptionBudget
    image: str  # the tailscale image (containerboot)
    mode: RouterMode  # `kernel` (root + NET_ADMIN, tun) or `userspace` (restricted, no tun)
    routes: tuple[str, ...]  # CIDRs advertised (TS_ROUTES), in this order
    tag: str  # the ACL tag the routers join with; the policy's autoApprovers approve their routes by it
    login_server: str  # the control server URL (`https://<public hostname>`)
    hostname_prefix: str  # tailnet node names are `<prefix>-<pod name>`
    cluster: Cluster  # the cluster's placement rules (worker nodes, excluded nodes, toleration of node loss)
    auth_key_secret: str = AUTHKEY_SECRET  # Secret in `namespace` holding one pre-auth key per ordinal (`authkey-N`)
    key_source: str | None = None  # where that key comes from (e.g. `minted`); None: no key yet, so Pulumi
    # does not wait for readiness. A pod annotation carries it, so the pods roll when a source appears.
    key_secret: pulumi.Resource | None = None  # the resource that writes the key; the routers start after it


@dataclass(frozen=True, kw_only=True)
class GatewayServicesArgs:
    """What the gateway services of one site need: CoreDNS for its zone and the TCP proxies, behind one IP."""

    namespace: str  # where the Deployment, its ConfigMaps and the LoadBalancer Service live
    replicas: int  # CoreDNS/socat pods; more than one spreads them one per node and adds a PodDisruptionBudget
    coredns_image: str  # CoreDNS image
    metrics: bool = False  # CoreDNS serves Prometheus metrics on DNS_METRICS_PORT (port `metrics`)
    socat_image: str  # socat image, one container per proxy
    proxies: tuple[Proxy, ...]  # TCP ports on the gateway IP and where each forwards to
    dns_zone: str  # the split-DNS zone CoreDNS answers for
    dns_hosts: Mapping[str, str]  # extra names in the zone (relative name -> address)
    gateway_ip: str  # the Service's fixed IP (Cilium LB IPAM); `gateway.<zone>` and `api.<zone>` point at it
    lb_pool: str  # CIDR of the CiliumLoadBalancerIPPool that hands out `gateway_ip`
    pool_name: str  # name of that (cluster-scoped) pool
    pool_label: str  # value of the `io.cilium/lb-pool` label by which the pool selects the Service
    cluster: Cluster  # the cluster's placement rules
    load_balancer_source_ranges: tuple[str, ...] = ()  # CIDRs the LoadBalancer admits; empty: any source


class SubnetRouters(pulumi.ComponentResource):
    """Tailscale subnet routers; see the module docstring.

    Outputs (also attributes): `namespace`; `statefulSet` (`statefulset_name`), the StatefulSet's name;
    `stateSecrets` (`state_secret_names`), one Secret per replica holding its node state; `authKeySecret`
    (`auth_key_secret`), the Secret each router reads the pre-auth key of its ordinal from (`authkey-<N>`, a
    mounted file); `replicas`; `routes`, what they advertise.
    """

    statefulset: k8s.apps.v1.StatefulSet
    state_secrets: list[k8s.core.v1.SecretPatch]
    namespace: str
    statefulset_name: str
    state_secret_names: list[str]
    auth_key_secret: str
    routes: list[str]

    def __init__(self, name: str, args: SubnetRoutersArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:gateway:SubnetRouters", name, None, opts)
        namespace = args.namespace
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(ROUTERS, "gateway")}
        replicas = args.replicas
        state_names = [f"{ROUTERS}-{index}" for index in range(replicas)]
        # One state Secret per replica, named after its pod: tailscale keeps its node key there, so RBAC can name
        # exactly these Secrets. Applied server-side (a Patch resource) with no data: Pulumi owns only the labels and
        # never touches what tailscale writes. Retained: a destroy or a scale-down must not force a re-enrolment, and
        # the apply adopts a retained one when the replica comes back (a plain create would fail: AlreadyExists).
        self.state_secrets = [
            k8s.core.v1.SecretPatch(
                f"{name}-state-{index}",
                metadata={**meta, "name": state, "annotations": {"pulumi.com/patchForce": "true"}},
                type="Opaque",
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
            for index, state in enumerate(state_names)
        ]
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata={**meta, "name": ROUTERS}, automount_service_account_token=False, opts=child
        )
        role = k8s.rbac.v1.Role(
            f"{name}-role",
            metadata={**meta, "name": ROUTERS},
            rules=[
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": state_names,
                    "verbs": ["get", "update", "patch"],
                }
            ],
            opts=child,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata={**meta, "name": ROUTERS},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROUTERS},
            subjects=[{"kind": "ServiceAccount", "name": ROUTERS, "namespace": namespace}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        headless = k8s.core.v1.Service(
            f"{name}-headless",
            metadata={**meta, "name": ROUTERS},
            spec={"clusterIP": "None", "selector": selector(ROUTERS), "ports": [{"name": "none", "port": 1}]},
            opts=child,
        )
        has_key = args.key_source is not None
        pod_spec = self._pod_spec(args)
        annotations = static_check_skips(pod_spec, router_check_reasons(args.mode))
        if not has_key:
            # Without a key the routers cannot become ready until the next `pulumi up` mints one: do not wait.
            annotations[SKIP_AWAIT] = "true"
        self.statefulset = k8s.apps.v1.StatefulSet(
            f"{name}-statefulset",
            metadata={**meta, "name": ROUTERS, "annotations": annotations},
            spec={
                "replicas": replicas,
                "serviceName": ROUTERS,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": selector(ROUTERS)},
                "template": {
                    "metadata": {
                        "labels": labels(ROUTERS, "gateway"),
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
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*self.state_secrets, headless, *([args.key_secret] if args.key_secret else [])],
            ),
        )
        if replicas > 1:
            _disruption_budget(f"{name}-pdb", ROUTERS, namespace, child)
        self.namespace = namespace
        self.statefulset_name = ROUTERS
        self.state_secret_names = state_names
        self.auth_key_secret = args.auth_key_secret
        self.routes = list(args.routes)
        self.register_outputs(
            {
                "namespace": namespace,
                "statefulSet": ROUTERS,
                "stateSecrets": state_names,
                "authKeySecret": args.auth_key_secret,
                "replicas": replicas,
                "routes": self.routes,
            }
        )

    @staticmethod
    def _pod_spec(args: SubnetRoutersArgs) -> dict[str, Any]:
        kernel = args.mode is RouterMode.KERNEL
        extra_args = f"--login-server={args.login_server} --advertise-tags={args.tag} --accept-dns=false"
        env = [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TS_KUBE_SECRET", "value": "$(POD_NAME)"},
            {"name": "TS_HOSTNAME", "value": f"{args.hostname_prefix}-$(POD_NAME)"},
            # The key is not in the pod spec: key_check reads this pod's `authkey-<ordinal>` file. Log in only
            # while the node has no state: an enrolled replica never presents its (used, single-use) key again.
            {"name": "TS_AUTH_ONCE", "value": "true"},
            {"name": "TS_ENABLE_HEALTH_CHECK", "value": "true"},
            {"name": "TS_LOCAL_ADDR_PORT", "value": f"[::]:{HEALTH_PORT}"},
            {"name": "TS_ROUTES", "value": ",".join(args.routes)},
            {"name": "TS_USERSPACE", "value": "false" if kernel else "true"},
            {"name": "TS_EXTRA_ARGS", "value": extra_args},
            {"name": "TS_SOCKET", "value": "/tmp/tailscaled.sock"},
        ]
        if kernel:
            # Kernel networking needs root with NET_ADMIN (routes, tun); nothing else is added.
            security: dict[str, Any] = {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsUser": 0,
                "runAsNonRoot": False,
                "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            }
            pod_context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
        else:
            security = container_security()
            pod_context = pod_security()
        spec: dict[str, Any] = {
            "serviceAccountName": ROUTERS,
            "automountServiceAccountToken": True,  # containerboot stores the node state in its Secret
            "enableServiceLinks": False,
            "securityContext": pod_context,
            **spread(args.cluster, ROUTERS, args.replicas),
            "containers": [
                {
                    "name": "tailscale",
                    "image": args.image,
                    "command": ["/bin/sh", "-c", key_check(args.namespace, args.auth_key_secret)],
                    "env": env,
                    "ports": [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
                    # Alive while tailscaled's local server answers; readiness (below) also needs the tailnet.
                    "livenessProbe": {"tcpSocket": {"port": "health"}, "periodSeconds": 20, "failureThreshold": 3},
                    # /healthz answers 200 only once the node has its tailnet addresses: no key, no readiness.
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": "health"},
                        "periodSeconds": 10,
                        "failureThreshold": 3,
                    },
                    "resources": resources(_ROUTER),
                    "securityContext": security,
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "authkey", "mountPath": AUTHKEY_DIR, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                {
                    # Optional by design: the first `pulumi up` runs before Headscale can mint keys. Without its
                    # key the pod logs why (see key_check) and stays not ready; an enrolled replica keeps its state.
                    # Mounted whole, not by subPath, so kubelet swaps in the keys the next `pulumi up` mints.
                    "name": "authkey",
                    "secret": {"secretName": args.auth_key_secret, "optional": True, "defaultMode": 0o440},
                },
            ],
        }
        return spec


class GatewayServices(pulumi.ComponentResource):
    """CoreDNS and TCP proxies behind one LoadBalancer Service with a fixed IP from the Cilium pool.

    Outputs (also attributes): `namespace`; `service` (`service_name`), the LoadBalancer Service;
    `corefileConfigMap` and `hostsConfigMap` (`corefile_config_map`, `hosts_config_map`), CoreDNS's configuration;
    `pool` (`pool_name`), the CiliumLoadBalancerIPPool; `ip`, the fixed gateway IP; `dnsZone`; `endpoints`,
    `ip:port` of DNS and of every proxy.
    """

    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    pool: k8s.apiextensions.CustomResource
    namespace: str
    service_name: str
    corefile_config_map: str
    hosts_config_map: str
    pool_name: str
    ip: str
    dns_zone: str
    endpoints: dict[str, str]

    def __init__(self, name: str, args: GatewayServicesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:gateway:GatewayServices", name, None, opts)
        namespace = args.namespace
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(SERVICES, "gateway")}
        corefile = render_corefile(
            zone=args.dns_zone,
            hosts_path=f"{HOSTS_DIR}/hosts",
            port=DNS_PORT,
            metrics_port=DNS_METRICS_PORT if args.metrics else None,
        )
        hosts = render_hosts(dns_records(args.dns_zone, args.gateway_ip, args.dns_hosts))
        k8s.core.v1.ConfigMap(
            f"{name}-corefile",
            metadata={**meta, "name": COREFILE_CONFIG_MAP},
            data={"Corefile": corefile},
            opts=child,
        )
        k8s.core.v1.ConfigMap(
            f"{name}-hosts", metadata={**meta, "name": HOSTS_CONFIG_MAP}, data={"hosts": hosts}, opts=child
        )
        self.pool = k8s.apiextensions.CustomResource(
            f"{name}-pool",
            api_version="cilium.io/v2",
            kind="CiliumLoadBalancerIPPool",
            metadata={"name": args.pool_name, "labels": labels(SERVICES, "gateway")},
            spec={
                "blocks": [{"cidr": args.lb_pool}],
                "serviceSelector": {"matchLabels": {POOL_LABEL: args.pool_label}},
            },
            opts=child,
        )
        replicas = args.replicas
        services_pod_spec = self._pod_spec(args)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={**meta, "name": SERVICES, "annotations": static_check_skips(services_pod_spec)},
            spec={
                "replicas": replicas,
                "selector": {"matchLabels": selector(SERVICES)},
                "template": {
                    "metadata": {
                        "labels": labels(SERVICES, "gateway"),
                        "annotations": {"checksum/config": checksum(corefile)},
                    },
                    "spec": services_pod_spec,
                },
            },
            opts=child,
        )
        ports = [
            {"name": "dns-udp", "port": 53, "targetPort": DNS_PORT, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "targetPort": DNS_PORT, "protocol": "TCP"},
            *({"name": p.name, "port": p.port, "targetPort": p.port, "protocol": "TCP"} for p in args.proxies),
        ]
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                **meta,
                "name": SERVICES,
                "labels": {**meta["labels"], POOL_LABEL: args.pool_label},
                # The stable address everything on the tailnet uses for this site (split DNS, kubeconfig).
                "annotations": {"lbipam.cilium.io/ips": args.gateway_ip},
            },
            spec={
                "type": "LoadBalancer",
                # Cluster: the clients are router pods inside the cluster, which the policy does not touch; for
                # traffic arriving from outside, any node forwards to wherever the gateway pods run.
                "externalTrafficPolicy": "Cluster",
                "selector": selector(SERVICES),
                "ports": ports,
                **(
                    {"loadBalancerSourceRanges": list(args.load_balancer_source_ranges)}
                    if args.load_balancer_source_ranges
                    else {}
                ),
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.pool]),
        )
        if replicas > 1:
            _disruption_budget(f"{name}-pdb", SERVICES, namespace, child)
        self.namespace = namespace
        self.service_name = SERVICES
        self.corefile_config_map = COREFILE_CONFIG_MAP
        self.hosts_config_map = HOSTS_CONFIG_MAP
        self.pool_name = args.pool_name
        self.ip = args.gateway_ip
        self.dns_zone = args.dns_zone
        self.endpoints = endpoints(args.gateway_ip, args.proxies)
        self.register_outputs(
            {
                "namespace": namespace,
                "service": SERVICES,
                "corefileConfigMap": COREFILE_CONFIG_MAP,
                "hostsConfigMap": HOSTS_CONFIG_MAP,
                "pool": args.pool_name,
                "ip": args.gateway_ip,
                "dnsZone": args.dns_zone,
                "endpoints": self.endpoints,
            }
        )

    @staticmethod
    def _pod_spec(args: GatewayServicesArgs) -> dict[str, Any]:
        dns = {
            "name": "coredns",
            "image": args.coredns_image,
            "args": ["-conf", f"{COREFILE_DIR}/Corefile"],
            "ports": [
                {"name": "dns-udp", "containerPort": DNS_PORT, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
                *([{"name": "metrics", "containerPort": DNS_METRICS_PORT, "protocol": "TCP"}] if args.metrics else []),
            ],
            "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 15},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 10},
            "resources": resources(_SMALL),
            "securityContext": container_security(),
            "volumeMounts": [
                {"name": "corefile", "mountPath": COREFILE_DIR, "readOnly": True},
                {"name": "hosts", "mountPath": HOSTS_DIR, "readOnly": True},
            ],
        }
        socat = [
            {
                "name": f"proxy-{proxy.name}",
                "image": args.socat_image,
                "args": [
                    f"TCP-LISTEN:{proxy.port},fork,reuseaddr",
                    f"TCP:{proxy.target_host}:{proxy.target_port}",
                ],
                "ports": [{"name": proxy.name[:15], "containerPort": proxy.port, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": proxy.port}, "periodSeconds": 10},
                "livenessProbe": {"tcpSocket": {"port": proxy.port}, "periodSeconds": 20, "failureThreshold": 3},
                "resources": resources(_SMALL),
                "securityContext": container_security(),
            }
            for proxy in args.proxies
        ]
        spec: dict[str, Any] = {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security(),
            **spread(args.cluster, SERVICES, args.replicas),
            "containers": [dns, *socat],
            "volumes": [
                {"name": "corefile", "configMap": {"name": COREFILE_CONFIG_MAP}},
                {"name": "hosts", "configMap": {"name": HOSTS_CONFIG_MAP}},
            ],
        }
        return spec
