"""Layer 2 of the split gateway of one cluster: the gateway services behind one stable IP.

CoreDNS for the site's split-DNS zone and socat proxies, in a normal Deployment behind ONE LoadBalancer Service whose
IP comes from the Cilium pool and never changes. Split DNS and the tailnet kubeconfig point at that IP, never at a
per-replica tailnet IP of the subnet routers (layer 1, components/subnet_routers.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgsDict,
    PodSpecArgsDict,
    ServicePortArgsDict,
    ServiceSpecArgsDict,
)

from headscale_ha.components import gateway_config
from headscale_ha.components.gateway_config import render_corefile, render_hosts
from headscale_ha.components.pod import (
    Meta,
    checksum,
    container_security,
    labels,
    pod_security,
    resources,
    selector,
    spread,
    static_check_skips,
)
from headscale_ha.components.settings import ApiServer, ClusterSettings, ComputeResources, Proxy, ResourceAmounts
from headscale_ha.components.workload import disruption_budget

SERVICES = "tailnet-gateway"
DNS_PORT = 1053  # unprivileged in the pod; the Service answers on 53
COREFILE_DIR = "/etc/coredns-config"
HOSTS_DIR = "/etc/coredns-hosts"  # a directory mount, so CoreDNS sees ConfigMap updates and reloads
COREFILE_CONFIG_MAP = "tailnet-dns-corefile"
HOSTS_CONFIG_MAP = "tailnet-dns-hosts"
#: CoreDNS's `prometheus` plugin, for the PodMonitor (monitoring on).
DNS_METRICS_PORT = 9153
POOL_LABEL = "io.cilium/lb-pool"
_SMALL = ComputeResources(
    requests=ResourceAmounts(cpu="10m", memory="32Mi"), limits=ResourceAmounts(cpu="200m", memory="128Mi")
)


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


def socat_target(host: str, port: int) -> str:
    """socat's TCP client address; an IPv6 address goes in brackets, or its colons would read as the port's."""
    return f"TCP:[{host}]:{port}" if ":" in host else f"TCP:{host}:{port}"


def dns_records(zone: str, gateway_ip: str, hosts: Mapping[str, str]) -> dict[str, str]:
    """Names of the site's zone: `gateway` and `api` on the stable gateway IP, then `hosts` (name -> address)."""
    records = {f"gateway.{zone}": gateway_ip, f"api.{zone}": gateway_ip}
    records.update({f"{name}.{zone}": address for name, address in hosts.items()})
    return records


def endpoints(gateway_ip: str, proxies: Sequence[Proxy]) -> dict[str, str]:
    """`ip:port` of every service behind the gateway IP: DNS and each proxy."""
    return {"dns": f"{gateway_ip}:53", **{proxy.name: f"{gateway_ip}:{proxy.port}" for proxy in proxies}}


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
    cluster: ClusterSettings  # the cluster's placement rules
    load_balancer_source_ranges: tuple[str, ...] = ()  # CIDRs the LoadBalancer admits; empty: any source


def gateway_corefile(args: GatewayServicesArgs) -> str:
    """CoreDNS's Corefile: the site's zone from the hosts file, on the pod's unprivileged DNS port."""
    return render_corefile(
        zone=args.dns_zone,
        hosts_path=f"{HOSTS_DIR}/hosts",
        port=DNS_PORT,
        metrics_port=DNS_METRICS_PORT if args.metrics else None,
    )


def gateway_hosts(args: GatewayServicesArgs) -> str:
    """The zone's hosts file: `gateway` and `api` on the gateway IP, then the configured names."""
    return render_hosts(dns_records(args.dns_zone, args.gateway_ip, args.dns_hosts))


def gateway_service_spec(args: GatewayServicesArgs) -> ServiceSpecArgsDict:
    """The LoadBalancer Service's spec: DNS on 53 (UDP and TCP) and each proxy's port."""
    ports: list[ServicePortArgsDict] = [
        {"name": "dns-udp", "port": 53, "target_port": DNS_PORT, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "target_port": DNS_PORT, "protocol": "TCP"},
        *({"name": p.name, "port": p.port, "target_port": p.port, "protocol": "TCP"} for p in args.proxies),
    ]
    spec: ServiceSpecArgsDict = {
        "type": "LoadBalancer",
        # Cluster: the clients are router pods inside the cluster, which the policy does not touch; for
        # traffic arriving from outside, any node forwards to wherever the gateway pods run.
        "external_traffic_policy": "Cluster",
        "selector": selector(SERVICES),
        "ports": ports,
    }
    if args.load_balancer_source_ranges:
        spec["load_balancer_source_ranges"] = list(args.load_balancer_source_ranges)
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
        child = pulumi.ResourceOptions(parent=self)
        meta: Meta = {"namespace": args.namespace, "labels": labels(SERVICES, "gateway")}
        corefile = gateway_corefile(args)
        k8s.core.v1.ConfigMap(
            f"{name}-corefile",
            metadata={**meta, "name": COREFILE_CONFIG_MAP},
            data={"Corefile": corefile},
            opts=child,
        )
        k8s.core.v1.ConfigMap(
            f"{name}-hosts",
            metadata={**meta, "name": HOSTS_CONFIG_MAP},
            data={"hosts": gateway_hosts(args)},
            opts=child,
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
        self.deployment = self._deployment(name, args, meta, corefile)
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                **meta,
                "name": SERVICES,
                "labels": {**meta["labels"], POOL_LABEL: args.pool_label},
                # The stable address everything on the tailnet uses for this site (split DNS, kubeconfig).
                "annotations": {"lbipam.cilium.io/ips": args.gateway_ip},
            },
            spec=gateway_service_spec(args),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.pool]),
        )
        if args.replicas > 1:
            disruption_budget(f"{name}-pdb", SERVICES, args.namespace, child)
        self._register_names(args)

    def _deployment(self, name: str, args: GatewayServicesArgs, meta: Meta, corefile: str) -> k8s.apps.v1.Deployment:
        """CoreDNS and the proxies, rolled when the Corefile changes (the hosts file is reloaded in place)."""
        pod_spec = self._pod_spec(args)
        return k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={**meta, "name": SERVICES, "annotations": static_check_skips(pod_spec)},
            spec={
                "replicas": args.replicas,
                "selector": {"match_labels": selector(SERVICES)},
                "template": {
                    "metadata": {
                        "labels": labels(SERVICES, "gateway"),
                        "annotations": {"checksum/config": checksum(corefile)},
                    },
                    "spec": pod_spec,
                },
            },
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _register_names(self, args: GatewayServicesArgs) -> None:
        """The names other programs need, as attributes and as the registered outputs."""
        self.namespace = args.namespace
        self.service_name = SERVICES
        self.corefile_config_map = COREFILE_CONFIG_MAP
        self.hosts_config_map = HOSTS_CONFIG_MAP
        self.pool_name = args.pool_name
        self.ip = args.gateway_ip
        self.dns_zone = args.dns_zone
        self.endpoints = endpoints(args.gateway_ip, args.proxies)
        self.register_outputs(
            {
                "namespace": args.namespace,
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
    def _pod_spec(args: GatewayServicesArgs) -> PodSpecArgsDict:
        dns: ContainerArgsDict = {
            "name": "coredns",
            "image": args.coredns_image,
            "args": ["-conf", f"{COREFILE_DIR}/Corefile"],
            "ports": [
                {"name": "dns-udp", "container_port": DNS_PORT, "protocol": "UDP"},
                {"name": "dns-tcp", "container_port": DNS_PORT, "protocol": "TCP"},
                *([{"name": "metrics", "container_port": DNS_METRICS_PORT, "protocol": "TCP"}] if args.metrics else []),
            ],
            "liveness_probe": {
                "http_get": {"path": "/health", "port": gateway_config.HEALTH_PORT},
                "period_seconds": 15,
            },
            "readiness_probe": {
                "http_get": {"path": "/ready", "port": gateway_config.READY_PORT},
                "period_seconds": 10,
            },
            "resources": resources(_SMALL),
            "security_context": container_security(),
            "volume_mounts": [
                {"name": "corefile", "mount_path": COREFILE_DIR, "read_only": True},
                {"name": "hosts", "mount_path": HOSTS_DIR, "read_only": True},
            ],
        }
        socat: list[ContainerArgsDict] = [
            {
                "name": f"proxy-{proxy.name}",
                "image": args.socat_image,
                "args": [
                    f"TCP-LISTEN:{proxy.port},fork,reuseaddr",
                    socat_target(proxy.target_host, proxy.target_port),
                ],
                "ports": [{"name": proxy.name[:15], "container_port": proxy.port, "protocol": "TCP"}],
                "readiness_probe": {"tcp_socket": {"port": proxy.port}, "period_seconds": 10},
                "liveness_probe": {"tcp_socket": {"port": proxy.port}, "period_seconds": 20, "failure_threshold": 3},
                "resources": resources(_SMALL),
                "security_context": container_security(),
            }
            for proxy in args.proxies
        ]
        spec: PodSpecArgsDict = {
            "automount_service_account_token": False,
            "enable_service_links": False,
            "security_context": pod_security(),
            **spread(args.cluster, SERVICES, args.replicas),
            "containers": [dns, *socat],
            "volumes": [
                {"name": "corefile", "config_map": {"name": COREFILE_CONFIG_MAP}},
                {"name": "hosts", "config_map": {"name": HOSTS_CONFIG_MAP}},
            ],
        }
        return spec
