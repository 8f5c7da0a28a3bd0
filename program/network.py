"""The NetworkPolicies of a stack: the ingress allows of program/network_ingress.py, plus default-deny egress and
what each workload may reach, derived from the same config the workloads are rendered from (docs/security.md).

Who reaches what, and why nothing else:

- Headscale: DNS; every DERP map URL; the OIDC issuer (discovery, token, keys); PostgreSQL in the postgres stage;
  the API server for its position recorder; with automatic failover, the API server (the lease renewer), the
  witness's and, with the failsafe, each other site's (their servers as the kubeconfigs name them).
- Headplane: DNS; Headscale's HTTP port (its in-cluster API URL); the OIDC issuer.
- The migration Job: DNS; PostgreSQL; the OIDC issuer (`headscale configtest` sets up the OIDC provider).
- CloudNativePG (instances and Jobs): DNS; the API server (instance manager, barman-cloud sidecar); each other
  (5432, 8000); the object store; the active site's PostgreSQL when streaming.
- VolSync movers: DNS; the restic repository (`volsyncCidrs`, else the internet on 443).
- The gateway's proxies: each proxy's target on its port; DNS when a target is a name (CoreDNS forwards nowhere).
- The subnet routers: DNS; the API server (state Secrets); the control server (443) and DERP relays (443, 80);
  STUN 3478/udp; peers (any UDP port); the gateway's DNS and proxies; the site's routes with `routersReachRoutes`.

The state exporter and the restore rehearsals reach nothing: they read the NFS claim, which the kubelet mounts on
the node. So do the Litestream sidecars and init containers (a `file` replica on that mount): no pod opens a
connection to the NFS server, so none may.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from headscale_ha.components import gateway_services as services_module
from headscale_ha.components import headplane as headplane_module
from headscale_ha.components import headscale as headscale_module
from headscale_ha.components import headscale_config, sqlite_to_postgres, subnet_routers
from headscale_ha.components.headscale_config import STUN_PORT
from headscale_ha.components.network_egress import (
    api_server_reach,
    dns_reach,
    host_destinations,
    internet,
    ip_blocks,
    url_endpoint,
)
from headscale_ha.components.network_policy import Confined, NetworkPoliciesArgs, Port, Reach, from_namespace, from_pods
from headscale_ha.components.pod import selector
from headscale_ha.components.postgres import DATABASE_CLUSTER
from headscale_ha.components.settings import PROJECT, DatabaseStage, ReplicaSource, Role
from headscale_ha.program.args import gateway_proxies, lease_api_urls, routers_namespace
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.network_ingress import (
    CNPG_POSTGRES_PORT,
    CNPG_STATUS_PORT,
    database_proxies,
    ingress_policies,
)

#: The labels VolSync puts on its mover pods (`utils.SetOwnedByVolSync` on the Job's template).
VOLSYNC_MOVER = {"app.kubernetes.io/created-by": "volsync"}
#: tailscaled: DERP relays over HTTPS, netcheck's and the captive-portal check's plain HTTP to them.
DERP_PORTS = (Port(443), Port(80))
HTTPS = 443
INSTANCES = {"cnpg.io/cluster": DATABASE_CLUSTER}


def network_args(config: StackConfig) -> NetworkPoliciesArgs:
    """Every owned namespace's policies: default-deny ingress and its allows (program/network_ingress.py), then, with
    `networkPolicy.egress`, default-deny egress and each workload's reach."""
    ingress = ingress_policies(config)
    if not config.network_policy.egress:
        return ingress
    confined = confined_workloads(config)
    return NetworkPoliciesArgs(
        namespaces=tuple(
            replace(item, egress=True, confined=tuple(confined.get(item.namespace, ()))) for item in ingress.namespaces
        )
    )


@dataclass(frozen=True)
class _Destinations:
    """Turns what the config names (hosts, URLs) into peers, with the cluster's own ranges out of the internet."""

    config: StackConfig

    @property
    def cluster_ranges(self) -> tuple[str, ...]:
        """Every site's routes and LB pool: pods, Services and gateway IPs, never an internet host."""
        return tuple(sorted({r for site in self.config.tailnet.sites for r in (*site.routes, site.lb_pool)}))

    def host(self, host: str) -> list[dict[str, Any]]:
        return host_destinations(host, self.config.network_policy, self.cluster_ranges)

    def internet(self) -> list[dict[str, Any]]:
        return internet(self.config.network_policy, self.cluster_ranges)

    def reach(self, ports: tuple[Port, ...], destinations: list[dict[str, Any]], why: str) -> list[Reach]:
        """One rule, or none when there is nowhere to go (an empty `egressInternetCidrs`): never an empty `to`."""
        unique = list({repr(sorted(d.items())): d for d in destinations}.values())
        return [Reach(ports=ports, destinations=tuple(unique), why=why)] if unique else []

    def url(self, url: str, why: str, *, also_internet: bool = False) -> list[Reach]:
        host, port = url_endpoint(url)
        return self.reach((Port(port),), self.host(host) + (self.internet() if also_internet else []), why)

    def oidc(self) -> list[Reach]:
        """The issuer's discovery document, and its token and key endpoints, which may live on other hosts."""
        oidc = self.config.headscale.oidc
        if oidc is None:
            return []
        return self.url(oidc.issuer, "the OIDC issuer (discovery, token and key endpoints)", also_internet=True)


def confined_workloads(config: StackConfig) -> dict[str, list[Confined]]:
    """Namespace -> the workloads confined there and what each reaches. Refuses a config that leaves the API
    server's endpoints unknown: the routers could not keep their state."""
    settings = config.network_policy
    if not settings.api_server_cidrs:
        raise ConfigError(
            [
                f"{PROJECT}:networkPolicy.apiServerCidrs: is empty, but under default-deny egress the subnet routers "
                "(their state Secrets), Headscale's position recorder and CloudNativePG reach the API server: list "
                "its endpoint addresses (kubectl "
                "get endpointslices -n default -l kubernetes.io/service-name=kubernetes), or set "
                "networkPolicy.egress: false, got []"
            ]
        )
    to = _Destinations(config)
    confined: dict[str, list[Confined]] = defaultdict(list)
    confined[config.namespace] += control_plane(config, to)
    proxies = gateway_services(config, to)
    if proxies is not None:
        confined[config.gateway.namespace].append(proxies)
    confined[routers_namespace(config)].append(routers(config, to))
    return confined


def control_plane(config: StackConfig, to: _Destinations) -> list[Confined]:
    """Headscale, Headplane, the migration Job, CloudNativePG and VolSync's movers (what runs in the namespace)."""
    dns = dns_reach(config.network_policy)
    stage = config.database.stage
    postgres = Reach(ports=(Port(CNPG_POSTGRES_PORT),), destinations=(from_pods(INSTANCES),), why="PostgreSQL")
    derp_maps = [reach for url in config.headscale.derp.urls for reach in to.url(url, f"the DERP map {url}")]
    # Headscale's position recorder (a sidecar) patches its served witness through the API, and with automatic
    # failover the lease renewer its failsafe Lease and its own pod; Headplane's watcher then deletes its own pod
    # and reads the witness (no other site's API server: a follower has no failsafe).
    automatic = config.tailnet.failover.automatic
    local_api = [api_server_reach(config.network_policy)] if config.backup.auth.record_position or automatic else []
    sqlite = [*local_api, *lease_reaches(config, to)]
    headscale = [dns, *derp_maps, *to.oidc(), *([postgres] if stage is DatabaseStage.POSTGRES else sqlite)]
    workloads = [Confined(name=headscale_module.APP, pods=selector(headscale_module.APP), reaches=tuple(headscale))]
    if config.headplane.enabled:
        api = Reach(
            ports=(Port(headscale_config.HTTP_PORT),),
            destinations=(from_pods(selector(headscale_module.APP)),),
            why="Headscale's API, at its in-cluster URL",
        )
        workloads.append(
            Confined(
                name=headplane_module.APP,
                pods=selector(headplane_module.APP),
                # The issuer only with Headplane's own OIDC login (headplane.oidcLogin).
                reaches=(
                    dns,
                    api,
                    *(to.oidc() if config.headplane.oidc_login else ()),
                    *([api_server_reach(config.network_policy)] if automatic else []),
                    *lease_reaches(config, to, peers=False),
                ),
            )
        )
    if stage is DatabaseStage.MIGRATING:
        job = (dns, postgres, *to.oidc())
        workloads.append(Confined(name=sqlite_to_postgres.JOB, pods=selector(sqlite_to_postgres.JOB), reaches=job))
    if stage is not DatabaseStage.SQLITE:
        workloads.append(Confined(name=DATABASE_CLUSTER, pods=INSTANCES, reaches=tuple(database(config, to))))
    if config.backup.volsync is not None:
        workloads.append(Confined(name="volsync-mover", pods=VOLSYNC_MOVER, reaches=(dns, *volsync(config, to))))
    return workloads


def lease_reaches(config: StackConfig, to: _Destinations, *, peers: bool = True) -> list[Reach]:
    """With automatic failover, the lease containers' other API servers: the witness, and each other site's with
    the failsafe (their servers, from the kubeconfigs); without ``peers``, the witness alone (a follower's)."""
    return [reach for why, url in lease_api_urls(config, peers=peers).items() for reach in to.url(url, why)]


def database(config: StackConfig, to: _Destinations) -> list[Reach]:
    """CloudNativePG's instances and Jobs: the API server (the instance manager and the barman-cloud sidecar read
    the Cluster, the ObjectStore and Secrets), each other, the object store, and the active site when streaming."""
    settings, postgres = config.network_policy, config.database.postgres
    reaches = [
        dns_reach(settings),
        api_server_reach(settings),
        Reach(
            ports=(Port(CNPG_POSTGRES_PORT), Port(CNPG_STATUS_PORT)),
            destinations=(from_pods(INSTANCES),),
            why="replication, pg_rewind and the join Jobs between instances",
        ),
    ]
    store = postgres.object_store
    if store is not None and store.endpoint_url:
        reaches += to.url(store.endpoint_url, "the object store (WAL archive, base backups)")
    elif store is not None:
        reaches += to.reach((Port(HTTPS),), to.internet(), "the object store (S3 on the internet)")
    streaming = postgres.replica_source is ReplicaSource.STREAMING and postgres.streaming_host is not None
    if config.role is Role.STANDBY and streaming:
        reaches += to.reach(
            (Port(CNPG_POSTGRES_PORT),), to.host(str(postgres.streaming_host)), "the active site's PostgreSQL"
        )
    return reaches


def volsync(config: StackConfig, to: _Destinations) -> list[Reach]:
    """The restic repository: the listed addresses on any TCP port, or the internet on 443."""
    listed = config.network_policy.volsync_cidrs
    if listed:
        return to.reach((Port(None),), ip_blocks(listed), "the restic repository")
    return to.reach((Port(HTTPS),), to.internet(), "the restic repository (on the internet)")


def gateway_services(config: StackConfig, to: _Destinations) -> Confined | None:
    """socat connects to each proxy's target; CoreDNS answers from its hosts file and forwards nowhere (the
    Corefile has no upstream), so DNS is needed only to resolve a target given by name."""
    proxies, database_targets = gateway_proxies(config), database_proxies(config)
    reaches: list[Reach] = []
    if any(not _is_address(proxy.target_host) for proxy in proxies):
        reaches.append(dns_reach(config.network_policy))
    for proxy in proxies:
        why = f"proxy {proxy.name} to {proxy.target_host}:{proxy.target_port}"
        if proxy in database_targets:
            destinations = [from_pods(INSTANCES, config.namespace)]
        else:
            destinations = to.host(proxy.target_host)
        reaches += to.reach((Port(proxy.target_port),), destinations, why)
    if not reaches:
        return None
    return Confined(name=services_module.SERVICES, pods=selector(services_module.SERVICES), reaches=tuple(reaches))


def routers(config: StackConfig, to: _Destinations) -> Confined:
    """tailscaled: the control server, DERP, STUN and peers; containerboot: its state Secrets; the forwarded
    tailnet traffic: the gateway's services (and, on purpose, the site's routes)."""
    settings = config.network_policy
    kernel = routers_namespace(config) != config.gateway.namespace
    public = [address for site in config.tailnet.sites if (address := site.public_address) is not None]
    public_blocks = ip_blocks(f"{address}/32" for address in sorted(set(public)))
    ingress_data_plane = [from_namespace(namespace) for namespace in sorted(settings.ingress_namespaces)]
    gateway_ports = (
        Port(services_module.DNS_PORT, "UDP"),
        Port(services_module.DNS_PORT, "TCP"),
        *(Port(proxy.port) for proxy in gateway_proxies(config)),
    )
    stun = public_blocks + to.internet()
    if config.headscale.derp.embedded:
        stun.append(from_pods(selector(headscale_module.APP), config.namespace))  # its Service's DNAT, in-cluster
    reaches = [
        dns_reach(settings),
        api_server_reach(settings),
        *to.reach(
            (Port(HTTPS),),
            public_blocks + to.host(config.tailnet.public_hostname) + ingress_data_plane,
            "the control server at the public URL (the sites' public addresses, or this cluster's ingress)",
        ),
        *to.reach(DERP_PORTS, to.internet(), "DERP relays, netcheck and the captive-portal check"),
        *to.reach((Port(STUN_PORT, "UDP"),), stun, "STUN"),
        *to.reach((Port(None, "UDP"),), to.internet(), "WireGuard to peers, on whatever port they listen"),
        Reach(
            ports=gateway_ports,
            destinations=(from_pods(selector(services_module.SERVICES), config.gateway.namespace if kernel else None),),
            why="tailnet clients to the gateway's DNS and proxies",
        ),
    ]
    if settings.routers_reach_routes:
        routes = [*config.site.routes, config.site.lb_pool]
        reaches.append(
            Reach(
                ports=(Port(None, "TCP"), Port(None, "UDP")),
                destinations=(*ip_blocks(routes), {"namespaceSelector": {}}),
                why=f"tailnet clients to the site's routes {', '.join(routes)} (as pods too: Cilium's reading)",
            )
        )
    return Confined(name=subnet_routers.ROUTERS, pods=selector(subnet_routers.ROUTERS), reaches=tuple(reaches))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
