"""The split gateway of one cluster: HA subnet routers, and gateway services behind one stable IP.

Layer 1, `SubnetRouters`: tailscale-only pods in a StatefulSet, one per node (anti-affinity), each with its own
state Secret so a restart keeps its node identity; they advertise the cluster CIDRs and the tailnet LB pool,
approved by the policy's autoApprovers. Layer 2, `GatewayServices`: CoreDNS for the site's split-DNS zone and
socat proxies, in a normal Deployment behind ONE LoadBalancer Service whose IP comes from the Cilium pool and
never changes. Split DNS and the tailnet kubeconfig point at that IP, never at a per-replica tailnet IP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.gateway_config import render_corefile, render_hosts
from components.pod import checksum, container_security, labels, pod_security, resources, scheduling, selector
from components.settings import ComputeResources, Proxy, ResourceAmounts, RouterMode
from policy.render import router_tag
from program.config import StackConfig

ROUTERS = "subnet-router"
SERVICES = "tailnet-gateway"
DNS_PORT = 1053  # unprivileged in the pod; the Service answers on 53
COREFILE_DIR = "/etc/coredns-config"
HOSTS_DIR = "/etc/coredns-hosts"  # a directory mount, so CoreDNS sees ConfigMap updates and reloads
AUTHKEY_SECRET = "subnet-router-authkey"
SKIP_AWAIT = "pulumi.com/skipAwait"
KEY_SOURCE_ANNOTATION = "headscale-ha/auth-key-source"
HEALTH_PORT = 9002  # containerboot's /healthz (TS_ENABLE_HEALTH_CHECK)
POOL_LABEL = "io.cilium/lb-pool"
ROOT_ANNOTATION = "headscale-ha/runs-as-root"
_SMALL = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="32Mi"), limits=ResourceAmounts(cpu="200m", memory="128Mi")
)
_ROUTER = ComputeResources(
    requests=ResourceAmounts(cpu="20m", memory="64Mi"), limits=ResourceAmounts(cpu="1", memory="256Mi")
)


def advertised_routes(config: StackConfig) -> list[str]:
    """What this site's routers advertise: its cluster CIDRs and its tailnet LB pool (sorted, unique)."""
    return sorted({*config.site.routes, config.site.lb_pool})


def proxies(config: StackConfig) -> list[Proxy]:
    """The configured proxies, or the defaults: kube-api and talos to the API server, clustermesh etcd."""
    if config.gateway.services.proxies is not None:
        return list(config.gateway.services.proxies)
    api = config.cluster.api_server
    assert api is not None  # enforced by the config's cross-key rules
    return [
        Proxy(name="kube-api", port=6443, target_host=api.host, target_port=api.port),
        Proxy(name="talos", port=50000, target_host=api.host, target_port=50000),
        Proxy(
            name="clustermesh",
            port=2379,
            target_host="clustermesh-apiserver.kube-system.svc.cluster.local",
            target_port=2379,
        ),
    ]


def routers_namespace(config: StackConfig) -> str:
    """Kernel-mode routers run as root with NET_ADMIN, which only `privileged` admits: they get a namespace of
    their own, so the gateway services (and userspace routers) stay `restricted`."""
    if config.gateway.routers.mode is RouterMode.KERNEL:
        return f"{config.gateway.namespace}-routers"
    return config.gateway.namespace


def key_source(config: StackConfig) -> str:
    """Where the routers' enrolment key comes from: `minted` (bootstrapApiKey), `configured` (routerAuthKey) or
    `none` yet."""
    if config.bootstrap_api_key is not None:
        return "minted"
    return "configured" if config.router_auth_key is not None else "none"


def key_check(namespace: str) -> str:
    """The router's entrypoint: say in the log when the enrolment key is absent, then run containerboot."""
    message = (
        f"subnet-router: no pre-auth key (Secret {namespace}/{AUTHKEY_SECRET}, key authkey, is missing or empty); "
        "a replica that never enrolled stays not ready. Set bootstrapApiKey (the stack mints the key) or "
        "routerAuthKey, then pulumi up: see the stack output nextSteps."
    )
    return f'if [ -z "${{TS_AUTHKEY:-}}" ]; then echo "{message}" >&2; fi; exec /usr/local/bin/containerboot'


def dns_records(config: StackConfig) -> dict[str, str]:
    """Names of the site's zone, all on the stable gateway IP unless configured otherwise."""
    zone, ip = config.dns_zone, config.site.gateway_ip
    records = {f"gateway.{zone}": ip, f"api.{zone}": ip}
    records.update({f"{name}.{zone}": address for name, address in config.gateway.services.dns_hosts.items()})
    return records


def endpoints(config: StackConfig) -> dict[str, str]:
    ip = config.site.gateway_ip
    return {"dns": f"{ip}:53", **{proxy.name: f"{ip}:{proxy.port}" for proxy in proxies(config)}}


def spread(config: StackConfig, app: str, replicas: int) -> dict[str, Any]:
    """The cluster's scheduling rules, plus one replica per node when there are several."""
    placement = scheduling(config.cluster)
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
class GatewayArgs:
    config: StackConfig
    namespace: str
    key_secret: pulumi.Resource | None = None  # the routers' enrolment key; they start after it exists


class SubnetRouters(pulumi.ComponentResource):
    """Tailscale subnet routers; see the module docstring."""

    statefulset: k8s.apps.v1.StatefulSet
    state_secrets: list[k8s.core.v1.Secret]

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:gateway:SubnetRouters", name, None, opts)
        config, namespace = args.config, args.namespace
        routers = config.gateway.routers
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(ROUTERS, "gateway")}
        replicas = routers.replicas
        state_names = [f"{ROUTERS}-{index}" for index in range(replicas)]
        # One state Secret per replica, named after its pod: tailscale keeps its node key there. Pulumi creates
        # them empty and never touches what tailscale writes, so RBAC can name exactly these Secrets.
        self.state_secrets = [
            k8s.core.v1.Secret(
                f"{name}-state-{index}",
                metadata={**meta, "name": state},
                type="Opaque",
                # Retained: they hold each router's node key; a destroy must not force a re-enrolment.
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["data", "stringData"], retain_on_delete=True),
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
        has_key = key_source(config) != "none"
        self.statefulset = k8s.apps.v1.StatefulSet(
            f"{name}-statefulset",
            # Without a key the routers cannot become ready until the next `pulumi up` mints one: do not wait.
            metadata={**meta, "name": ROUTERS, **({} if has_key else {"annotations": {SKIP_AWAIT: "true"}})},
            spec={
                "replicas": replicas,
                "serviceName": ROUTERS,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": selector(ROUTERS)},
                "template": {
                    "metadata": {
                        "labels": labels(ROUTERS, "gateway"),
                        "annotations": {
                            # A router reads TS_AUTHKEY only when it starts: when a key source appears, the pods
                            # roll and the ones that never enrolled pick the key up.
                            KEY_SOURCE_ANNOTATION: key_source(config),
                            **({ROOT_ANNOTATION: "kernel-networking"} if routers.mode is RouterMode.KERNEL else {}),
                        },
                    },
                    "spec": self._pod_spec(config, replicas, namespace),
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*self.state_secrets, headless, *([args.key_secret] if args.key_secret else [])],
            ),
        )
        if replicas > 1:
            _disruption_budget(f"{name}-pdb", ROUTERS, namespace, child)
        self.register_outputs({"replicas": replicas, "routes": advertised_routes(config)})

    @staticmethod
    def _pod_spec(config: StackConfig, replicas: int, namespace: str) -> dict[str, Any]:
        routers = config.gateway.routers
        kernel = routers.mode is RouterMode.KERNEL
        extra_args = (
            f"--login-server=https://{config.tailnet.public_hostname} "
            f"--advertise-tags={router_tag(config.site.name)} --accept-dns=false"
        )
        env = [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TS_KUBE_SECRET", "value": "$(POD_NAME)"},
            {"name": "TS_HOSTNAME", "value": f"{config.site.name}-$(POD_NAME)"},
            {
                # Optional by design: the first `pulumi up` runs before Headscale can mint a key. Without one the
                # pod logs why (see key_check) and stays not ready; a replica already enrolled keeps its state.
                "name": "TS_AUTHKEY",
                "valueFrom": {"secretKeyRef": {"name": AUTHKEY_SECRET, "key": "authkey", "optional": True}},
            },
            {"name": "TS_ENABLE_HEALTH_CHECK", "value": "true"},
            {"name": "TS_LOCAL_ADDR_PORT", "value": f"[::]:{HEALTH_PORT}"},
            {"name": "TS_ROUTES", "value": ",".join(advertised_routes(config))},
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
            **spread(config, ROUTERS, replicas),
            "containers": [
                {
                    "name": "tailscale",
                    "image": routers.image,
                    "command": ["/bin/sh", "-c", key_check(namespace)],
                    "env": env,
                    "ports": [{"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"}],
                    # /healthz answers 200 only once the node has its tailnet addresses: no key, no readiness.
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": "health"},
                        "periodSeconds": 10,
                        "failureThreshold": 3,
                    },
                    "resources": resources(_ROUTER),
                    "securityContext": security,
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
        }
        return spec


class GatewayServices(pulumi.ComponentResource):
    """CoreDNS and TCP proxies behind one LoadBalancer Service with a fixed IP from the Cilium pool."""

    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    pool: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:gateway:GatewayServices", name, None, opts)
        config, namespace = args.config, args.namespace
        services = config.gateway.services
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": namespace, "labels": labels(SERVICES, "gateway")}
        corefile = render_corefile(zone=config.dns_zone, hosts_path=f"{HOSTS_DIR}/hosts", port=DNS_PORT)
        hosts = render_hosts(dns_records(config))
        k8s.core.v1.ConfigMap(
            f"{name}-corefile",
            metadata={**meta, "name": "tailnet-dns-corefile"},
            data={"Corefile": corefile},
            opts=child,
        )
        k8s.core.v1.ConfigMap(
            f"{name}-hosts", metadata={**meta, "name": "tailnet-dns-hosts"}, data={"hosts": hosts}, opts=child
        )
        self.pool = k8s.apiextensions.CustomResource(
            f"{name}-pool",
            api_version="cilium.io/v2",
            kind="CiliumLoadBalancerIPPool",
            metadata={"name": f"tailnet-{config.site.name}", "labels": labels(SERVICES, "gateway")},
            spec={
                "blocks": [{"cidr": config.site.lb_pool}],
                "serviceSelector": {"matchLabels": {POOL_LABEL: config.gateway.pool_label}},
            },
            opts=child,
        )
        replicas = services.replicas
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={**meta, "name": SERVICES},
            spec={
                "replicas": replicas,
                "selector": {"matchLabels": selector(SERVICES)},
                "template": {
                    "metadata": {
                        "labels": labels(SERVICES, "gateway"),
                        "annotations": {"checksum/config": checksum(corefile)},
                    },
                    "spec": self._pod_spec(config, replicas),
                },
            },
            opts=child,
        )
        ports = [
            {"name": "dns-udp", "port": 53, "targetPort": DNS_PORT, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "targetPort": DNS_PORT, "protocol": "TCP"},
            *({"name": p.name, "port": p.port, "targetPort": p.port, "protocol": "TCP"} for p in proxies(config)),
        ]
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                **meta,
                "name": SERVICES,
                "labels": {**meta["labels"], POOL_LABEL: config.gateway.pool_label},
                # The stable address everything on the tailnet uses for this site (split DNS, kubeconfig).
                "annotations": {"lbipam.cilium.io/ips": config.site.gateway_ip},
            },
            spec={
                "type": "LoadBalancer",
                "externalTrafficPolicy": "Cluster",
                "selector": selector(SERVICES),
                "ports": ports,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.pool]),
        )
        if replicas > 1:
            _disruption_budget(f"{name}-pdb", SERVICES, namespace, child)
        self.register_outputs({"ip": config.site.gateway_ip, "endpoints": endpoints(config)})

    @staticmethod
    def _pod_spec(config: StackConfig, replicas: int) -> dict[str, Any]:
        services = config.gateway.services
        dns = {
            "name": "coredns",
            "image": services.coredns_image,
            "args": ["-conf", f"{COREFILE_DIR}/Corefile"],
            "ports": [
                {"name": "dns-udp", "containerPort": DNS_PORT, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
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
                "image": services.socat_image,
                "args": [
                    f"TCP-LISTEN:{proxy.port},fork,reuseaddr",
                    f"TCP:{proxy.target_host}:{proxy.target_port}",
                ],
                "ports": [{"name": proxy.name[:15], "containerPort": proxy.port, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": proxy.port}, "periodSeconds": 10},
                "resources": resources(_SMALL),
                "securityContext": container_security(),
            }
            for proxy in proxies(config)
        ]
        spec: dict[str, Any] = {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security(),
            **spread(config, SERVICES, replicas),
            "containers": [dns, *socat],
            "volumes": [
                {"name": "corefile", "configMap": {"name": "tailnet-dns-corefile"}},
                {"name": "hosts", "configMap": {"name": "tailnet-dns-hosts"}},
            ],
        }
        return spec
