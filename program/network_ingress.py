"""Default-deny ingress in every namespace the stack owns, and the allows: who reaches what, and why.

program/network.py adds default-deny egress and each workload's reach to these (with `networkPolicy.egress`).
The routers themselves admit nothing: tunnels are set up outbound (replies pass) or relayed by DERP, and their
health port is probed by the kubelet.
"""

from __future__ import annotations

from headscale_ha.components import (
    gateway_services,
    headplane_config,
    headscale_config,
    sqlite_to_postgres,
    subnet_routers,
)
from headscale_ha.components import headplane as headplane_module
from headscale_ha.components import headscale as headscale_module
from headscale_ha.components.alerts import EXPORTER_JOB
from headscale_ha.components.headscale_config import STUN_PORT
from headscale_ha.components.litestream import LITESTREAM_METRICS_PORT
from headscale_ha.components.monitoring import EXPORTER_PORT
from headscale_ha.components.network_policy import (
    Allow,
    NamespacePolicies,
    NetworkPoliciesArgs,
    Port,
    Protected,
    from_cidr,
    from_namespace,
    from_pods,
    ingress_peers,
)
from headscale_ha.components.pod import selector
from headscale_ha.components.postgres import DATABASE_CLUSTER
from headscale_ha.components.settings import DatabaseStage, Proxy
from headscale_ha.program.args import gateway_proxies, litestream_apps, routers_namespace
from headscale_ha.program.config import StackConfig

#: What CloudNativePG instances listen on: PostgreSQL, the instance manager's status API, the metrics exporter.
CNPG_POSTGRES_PORT, CNPG_STATUS_PORT, CNPG_METRICS_PORT = 5432, 8000, 9187


def database_proxies(config: StackConfig) -> list[Proxy]:
    """Gateway proxies that forward to this site's PostgreSQL (the replica path: a standby streams through them)."""
    namespace = config.namespace
    hosts = {
        f"{DATABASE_CLUSTER}-{service}{suffix}"
        for service in ("rw", "ro", "r")
        for suffix in ("", f".{namespace}", f".{namespace}.svc", f".{namespace}.svc.cluster.local")
    }
    return [
        proxy
        for proxy in gateway_proxies(config)
        if proxy.target_host.rstrip(".") in hosts and proxy.target_port == CNPG_POSTGRES_PORT
    ]


def _monitoring(config: StackConfig) -> tuple[dict[str, object], ...]:
    return (from_namespace(config.network_policy.monitoring_namespace),)


def _litestream_metrics(config: StackConfig) -> Allow:
    return Allow(
        ports=(Port(LITESTREAM_METRICS_PORT),), sources=_monitoring(config), why="the Litestream sidecar's metrics"
    )


def headscale_allows(config: StackConfig) -> Protected:
    """The public endpoint through the ingress data plane (and Headplane), metrics, and the embedded DERP's STUN."""
    public = ingress_peers(config.network_policy)
    headplane = [from_pods(selector(headplane_module.APP))] if config.headplane.enabled else []
    allows = [
        Allow(
            ports=(Port(headscale_config.HTTP_PORT),),
            sources=(*public, *headplane) if public else None,
            why="the public endpoint through the ingress data plane (any source when none is named), and Headplane",
        ),
        Allow(
            ports=(Port(headscale_config.METRICS_PORT),),
            sources=_monitoring(config),
            why="metrics, scraped by monitoring",
        ),
    ]
    if config.monitoring.enabled and headscale_module.APP in litestream_apps(config):
        allows.append(_litestream_metrics(config))
    if config.headscale.derp.embedded:
        allows.append(
            Allow(ports=(Port(STUN_PORT, "UDP"),), sources=None, why="the embedded DERP's STUN, from the internet")
        )
    return Protected(name=headscale_module.APP, pods=selector(headscale_module.APP), allows=tuple(allows))


def headplane_allows(config: StackConfig) -> Protected:
    """/admin through the ingress data plane, and the sidecar's metrics."""
    public = ingress_peers(config.network_policy)
    admin = Allow(
        ports=(Port(headplane_config.HTTP_PORT),),
        sources=tuple(public) or None,
        why="/admin through the ingress data plane (any source when none is named)",
    )
    metrics = [_litestream_metrics(config)] if config.monitoring.enabled else []
    return Protected(name=headplane_module.APP, pods=selector(headplane_module.APP), allows=(admin, *metrics))


def exporter_allows(config: StackConfig) -> Protected:
    why = "the state exporter's metrics"
    allows = (Allow(ports=(Port(EXPORTER_PORT),), sources=_monitoring(config), why=why),)
    return Protected(name=EXPORTER_JOB, pods=selector(EXPORTER_JOB), allows=allows)


def database_allows(config: StackConfig) -> Protected:
    """PostgreSQL for Headscale, the migration Job and the replica path's proxy; replication between instances;
    the operator; metrics."""
    instances = {"cnpg.io/cluster": DATABASE_CLUSTER}
    clients = [from_pods(selector(headscale_module.APP))]
    if config.database.stage is DatabaseStage.MIGRATING:
        clients.append(from_pods(selector(sqlite_to_postgres.JOB)))
    if database_proxies(config):
        clients.append(from_pods(selector(gateway_services.SERVICES), config.gateway.namespace))
    postgres, status = Port(CNPG_POSTGRES_PORT), Port(CNPG_STATUS_PORT)
    operator = from_namespace(config.network_policy.cnpg_operator_namespace)
    allows = (
        Allow(
            ports=(postgres,),
            sources=tuple(clients),
            why="Headscale, the migration Job, and the gateway proxy of the replica path",
        ),
        Allow(
            ports=(postgres, status),
            sources=(from_pods(instances),),
            why="replication and pg_rewind between instances, and CNPG's join Jobs",
        ),
        Allow(
            ports=(postgres, status),
            sources=(operator,),
            why="the CloudNativePG operator (instance manager status, and the database itself)",
        ),
        Allow(ports=(Port(CNPG_METRICS_PORT),), sources=_monitoring(config), why="metrics"),
    )
    return Protected(name=DATABASE_CLUSTER, pods=instances, allows=allows)


def gateway_allows(config: StackConfig) -> Protected:
    """The gateway's DNS and proxies, for tailnet clients through the routers; CoreDNS's metrics.

    A userspace router opens the connection itself (netstack), a kernel router forwards it masqueraded to its pod
    IP (tailscale's default --snat-subnet-routes); without SNAT the source stays the client's tailnet address,
    which no pod of the cluster has (the config refuses site routes overlapping the tailnet prefixes), so those
    prefixes are admitted for kernel routers too.
    """
    routers_ns = routers_namespace(config)
    kernel = routers_ns != config.gateway.namespace
    router_sources = [from_pods(selector(subnet_routers.ROUTERS), routers_ns if kernel else None)]
    if kernel:
        router_sources += [from_cidr(config.tailnet.prefixes.v4), from_cidr(config.tailnet.prefixes.v6)]
    ports = (
        Port(gateway_services.DNS_PORT, "UDP"),
        Port(gateway_services.DNS_PORT, "TCP"),
        *(Port(proxy.port) for proxy in gateway_proxies(config)),
    )
    metrics = Allow(
        ports=(Port(gateway_services.DNS_METRICS_PORT),), sources=_monitoring(config), why="CoreDNS's metrics"
    )
    return Protected(
        name=gateway_services.SERVICES,
        pods=selector(gateway_services.SERVICES),
        allows=(
            Allow(ports=ports, sources=tuple(router_sources), why="tailnet clients, via the routers"),
            *([metrics] if config.monitoring.enabled else []),
        ),
    )


def ingress_policies(config: StackConfig) -> NetworkPoliciesArgs:
    """Default-deny ingress in every namespace the stack owns; the allows say who reaches what, and why."""
    protected = [headscale_allows(config)]
    if config.headplane.enabled:
        protected.append(headplane_allows(config))
    if config.monitoring.enabled:
        protected.append(exporter_allows(config))
    if config.database.stage is not DatabaseStage.SQLITE:
        protected.append(database_allows(config))
    namespaces = [
        NamespacePolicies(namespace=config.namespace, protected=tuple(protected)),
        NamespacePolicies(namespace=config.gateway.namespace, protected=(gateway_allows(config),)),
    ]
    routers_ns = routers_namespace(config)
    if routers_ns != config.gateway.namespace:
        namespaces.append(NamespacePolicies(namespace=routers_ns))
    return NetworkPoliciesArgs(namespaces=tuple(namespaces))
