"""GatewayServices as the component package exposes it: the split gateway's CoreDNS and TCP proxies behind one
LoadBalancer IP, from plain inputs.

A facade over the Python component of components/gateway_services.py: it validates every input first (the same
value types and replica rule as the stack config, plus the few checks that stand between a typo and a pod that
fails without saying why), then builds that component as its only child, under the same name.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
import ipaddress
import re
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
from pulumi.errors import InputPropertyError
from pydantic import Field, model_validator

from headscale_ha.components import gateway_services
from headscale_ha.components.config_types import Cidr, DnsLabel, Fqdn, Image, IPAddress, IPv4
from headscale_ha.components.settings import ClusterSettings, FieldProblem, FieldProblemsError, Proxy, SettingsModel
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import problem, required, schema_path, settings_of, within_nodes

#: A name relative to the site's zone (`nas`, `printer.lab`): dot-separated DNS labels.
_RELATIVE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$")

#: Ports a proxy must not take, and who holds them: the Service's DNS port, and the ports CoreDNS listens on in
#: the pod the socat containers share (a socat on one of them fails to bind, or CoreDNS does, with no hint why).
_RESERVED_PORTS = {
    53: "the Service's DNS port",
    gateway_services.DNS_PORT: "CoreDNS's port in the pod",
    8080: "CoreDNS's health port in the pod",
    8181: "CoreDNS's readiness port in the pod",
    gateway_services.DNS_METRICS_PORT: "CoreDNS's metrics port in the pod",
}


class GatewayServicesArgs(TypedDict):
    """CoreDNS for the site's split-DNS zone and the TCP proxies, behind one LoadBalancer Service with a fixed IP."""

    namespace: str
    """Namespace of the Deployment, its ConfigMaps and the LoadBalancer Service."""
    replicas: int
    (
        "CoreDNS/socat pods, 1 to 10 and at most `cluster.nodes`; more than one spreads them one per node and adds "
        "a PodDisruptionBudget."
    )
    coredns_image: str
    """CoreDNS image, pinned to an exact version."""
    metrics: NotRequired[bool]
    """CoreDNS serves Prometheus metrics on port 9153 (container port `metrics`). Default: `false`."""
    socat_image: str
    """socat image, pinned to an exact version; one container per proxy."""
    proxies: list[types.Proxy]
    (
        "TCP ports on the gateway IP and where each forwards to; names and ports unique, and none on 53, 1053, "
        "8080, 8181 or 9153 (DNS, and CoreDNS's ports in the shared pod)."
    )
    dns_zone: str
    """The split-DNS zone CoreDNS answers for (e.g. `hydra.tn.example.org`)."""
    dns_hosts: dict[str, str]
    """Extra names in the zone: relative name → IP address; `gateway` and `api` are added for the gateway IP."""
    gateway_ip: str
    """The Service's fixed IPv4 address (Cilium LB IPAM), inside `lbPool`; `gateway.<zone>` and `api.<zone>`."""
    lb_pool: str
    """CIDR of the CiliumLoadBalancerIPPool that hands out `gatewayIp`."""
    pool_name: str
    """Name of that (cluster-scoped) pool, e.g. `tailnet-<site>`."""
    pool_label: str
    """Value of the `io.cilium/lb-pool` label by which the pool selects the Service."""
    cluster: types.Cluster
    """The cluster's placement rules."""
    load_balancer_source_ranges: NotRequired[list[str]]
    """CIDRs the LoadBalancer admits (`loadBalancerSourceRanges`). Default: empty, any source."""


class _ServicesInputs(SettingsModel):
    """The plain inputs of GatewayServices, checked with the stack config's value types and rules."""

    namespace: DnsLabel
    replicas: int = Field(ge=1, le=10)
    coredns_image: Image
    metrics: bool = False
    socat_image: Image
    # The Corefile and hosts file are rendered from these: a bad zone or address leaves CoreDNS answering nothing.
    dns_zone: Fqdn
    dns_hosts: dict[str, IPAddress]
    gateway_ip: IPv4
    lb_pool: Cidr
    pool_name: str = Field(min_length=1)
    pool_label: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    load_balancer_source_ranges: list[Cidr] = Field(default_factory=list)

    @model_validator(mode="after")
    def _gateway_in_pool(self) -> "_ServicesInputs":
        """Cilium assigns only addresses of the pool: one outside leaves the Service pending, silently."""
        if _ip_in(self.gateway_ip, self.lb_pool):
            return self
        raise FieldProblemsError(
            [
                FieldProblem(
                    ("gatewayIp",),
                    f"is outside lbPool {self.lb_pool}, which hands it out: pick an address inside it",
                    self.gateway_ip,
                )
            ]
        )


def _ip_in(address: str, network: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(network)


def _proxies(values: Any) -> tuple[Proxy, ...]:
    """Each proxy validated as the stack validates it; then what the Service and the shared pod need of them all."""
    if not isinstance(values, list):
        raise problem("must be a list of proxies", values, "proxies")
    proxies = tuple(settings_of(Proxy, value, "proxies", index) for index, value in enumerate(values))
    names: dict[str, int] = {}
    ports: dict[int, int] = {}
    for index, proxy in enumerate(proxies):
        # The Service's port names and the containers' port names (cut to 15 characters) must be unique.
        short = proxy.name[:15]
        if short in names:
            raise problem(
                f"repeats proxies[{names[short]}].name in its first 15 characters (the container port name): "
                "give each proxy its own name",
                proxy.name,
                *("proxies", index, "name"),
            )
        if proxy.port in _RESERVED_PORTS:
            raise problem(
                f"is {_RESERVED_PORTS[proxy.port]}: pick another port", proxy.port, *("proxies", index, "port")
            )
        if proxy.port in ports:
            raise problem(
                f"is already the port of proxies[{ports[proxy.port]}]: each proxy needs its own port",
                proxy.port,
                *("proxies", index, "port"),
            )
        names[short], ports[proxy.port] = index, index
    return proxies


def _dns_hosts(hosts: Mapping[str, str]) -> dict[str, str]:
    """The extra names: each becomes a line `<address> <name>.<zone>` of CoreDNS's hosts file, which skips a line
    it cannot read without a word."""
    for name in hosts:
        if not _RELATIVE_NAME.match(name):
            at = schema_path("dns_hosts")
            raise InputPropertyError(
                at,
                f"{at}: {name!r} is not a name relative to the zone: dot-separated DNS labels (lowercase letters, "
                "digits and '-')",
            )
    return dict(hosts)


class GatewayServices(pulumi.ComponentResource):
    """CoreDNS and TCP proxies (socat) in one Deployment behind one LoadBalancer Service, whose IP comes from a
    CiliumLoadBalancerIPPool this component creates and never changes: split DNS and the tailnet kubeconfig point
    at it, never at a per-replica tailnet IP."""

    namespace: pulumi.Output[str]
    """Namespace of the gateway services."""
    service: pulumi.Output[str]
    """The LoadBalancer Service holding the gateway IP."""
    corefile_config_map: pulumi.Output[str]
    """The ConfigMap with CoreDNS's Corefile."""
    hosts_config_map: pulumi.Output[str]
    """The ConfigMap with the zone's hosts file."""
    pool: pulumi.Output[str]
    """The CiliumLoadBalancerIPPool handing out the gateway IP."""
    ip: pulumi.Output[str]
    """The fixed gateway IP: the split-DNS nameserver, and the address of `gateway.<zone>` and `api.<zone>`."""
    dns_zone: pulumi.Output[str]
    """The split-DNS zone CoreDNS answers for."""
    endpoints: pulumi.Output[dict[str, str]]
    """`ip:port` of DNS (key `dns`) and of every proxy (by its name)."""

    @staticmethod
    def component_args(
        args: GatewayServicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> gateway_services.GatewayServicesArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        plain = settings_of(_ServicesInputs, {k: v for k, v in args.items() if k not in ("cluster", "proxies")})
        dns_hosts = _dns_hosts(plain.dns_hosts)
        proxies = _proxies(required(args, "proxies"))
        cluster = settings_of(ClusterSettings, required(args, "cluster"), "cluster")
        within_nodes(plain.replicas, cluster, "replicas")
        return gateway_services.GatewayServicesArgs(
            namespace=plain.namespace,
            replicas=plain.replicas,
            coredns_image=plain.coredns_image,
            metrics=plain.metrics,
            socat_image=plain.socat_image,
            proxies=proxies,
            dns_zone=plain.dns_zone,
            dns_hosts=dns_hosts,
            gateway_ip=plain.gateway_ip,
            lb_pool=plain.lb_pool,
            pool_name=plain.pool_name,
            pool_label=plain.pool_label,
            cluster=cluster,
            load_balancer_source_ranges=tuple(plain.load_balancer_source_ranges),
        )

    def __init__(self, name: str, args: GatewayServicesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:GatewayServices", name, None, opts)
        services = gateway_services.GatewayServices(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "namespace": services.namespace,
                "service": services.service_name,
                "corefile_config_map": services.corefile_config_map,
                "hosts_config_map": services.hosts_config_map,
                "pool": services.pool_name,
                "ip": services.ip,
                "dns_zone": services.dns_zone,
                "endpoints": services.endpoints,
            },
        )
