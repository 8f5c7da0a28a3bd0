"""The stack config mapped to every component's Args: the only code that knows how the config's sections become
what each component takes (program/site.py wires the components with these).

Decisions that need the whole config live here, not in the components: replicas by role and stage, where the
identity comes from, storage per stage, which namespace the routers run in, where their enrolment key comes from,
the default proxies, whether this stack owns the tailnet (users, Headplane's API key, the live policy), and the
policy rendered from the base file with every site's routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pulumi

from headscale_ha.components import gateway as gateway_module
from headscale_ha.components import headplane as headplane_module
from headscale_ha.components import headscale as headscale_module
from headscale_ha.components import migration as migration_module
from headscale_ha.components.alerts import AlertScope, replication_lag_bound
from headscale_ha.components.backup_volume import BackupVolumeArgs, claim_name
from headscale_ha.components.endpoint import PUBLIC_NAME, Backend, PublicEndpointArgs
from headscale_ha.components.gateway import (
    GatewayServicesArgs,
    SubnetRoutersArgs,
    advertised_routes,
    default_proxies,
    endpoints,
)
from headscale_ha.components.headplane import HeadplaneArgs
from headscale_ha.components.headscale import (
    HeadscaleServerArgs,
    IdentityFromStack,
    IdentitySource,
    ImportedIdentity,
    PolicyFile,
    PostgresStorage,
    SqliteStorage,
)
from headscale_ha.components.headscale_config import STUN_PORT, PostgresConnection
from headscale_ha.components.litestream import LITESTREAM_METRICS_PORT
from headscale_ha.components.litestream_config import parse_go_duration
from headscale_ha.components.migration import SqliteToPostgresArgs
from headscale_ha.components.monitoring import EXPORTER, EXPORTER_PORT, SCRAPE_INTERVAL_SECONDS, MonitoringArgs
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
from headscale_ha.components.pod import PART_OF, selector
from headscale_ha.components.postgres import (
    DATABASE,
    DATABASE_CLUSTER,
    OWNER,
    PostgresDatabaseArgs,
    ReplicaOf,
    app_secret,
    read_write_host,
)
from headscale_ha.components.postgres import ca_secret as postgres_ca_secret
from headscale_ha.components.settings import PROJECT, DatabaseStage, PolicyMode, Proxy, ReplicaSource, Role, RouterMode
from headscale_ha.components.tailnet_objects import KeyExpiry, TailnetObjectsArgs
from headscale_ha.components.tailnet_policy import POLICY_CONFIG_MAP, POLICY_KEY, LiveApi, TailnetPolicyArgs
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.render import RenderedPolicy, SiteRoutes, render_policy, router_tag
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.failover import kubectl

#: Where relative paths of the config (policy.file) are read from.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def headscale_replicas(config: StackConfig) -> int:
    """0 on a standby and while migrating (registrations pause, tunnels keep running); else the configured 0 or 1."""
    if config.role is Role.STANDBY or config.database.stage is DatabaseStage.MIGRATING:
        return 0
    return config.headscale.replicas


def identity_source(config: StackConfig) -> IdentitySource:
    """Every site serves with the tailnet's one identity, whatever its role: both keys imported on this stack, or
    else the identity stack's `identity` output. A site stack never generates keys (config validation guarantees
    one of the two)."""
    if config.noise_private_key is not None and config.derp_private_key is not None:
        # Plain strings: the component makes them Pulumi secrets before anything uses them.
        return ImportedIdentity(noise_private_key=config.noise_private_key, derp_private_key=config.derp_private_key)
    if config.tailnet.identity_stack is None:
        raise ConfigError([f"{PROJECT}:tailnet.identityStack: is required unless both keys are imported, got nothing"])
    return IdentityFromStack(stack_name=config.tailnet.identity_stack)


def postgres_storage(config: StackConfig) -> PostgresStorage:
    """The CNPG cluster's read-write Service, the application database and the owner's password Secret; the
    server verified (verify-full) against the cluster's own CA."""
    return PostgresStorage(
        connection=PostgresConnection(
            host=read_write_host(config.namespace), name=DATABASE, user=OWNER, ssl="verify-full"
        ),
        password_secret=app_secret(),
        ca_secret=postgres_ca_secret(),
    )


def headscale_storage(config: StackConfig) -> SqliteStorage | PostgresStorage:
    """SQLite (backed up, restored before serving) until the postgres stage; the migrating stage keeps SQLite as the
    rollback point. A standby's restore must find a backup, never start empty."""
    if config.database.stage is DatabaseStage.POSTGRES:
        return postgres_storage(config)
    return SqliteStorage(
        size=config.headscale.storage_size,
        storage_class=config.cluster.storage_class,
        backup=config.backup,
        require_backup=config.role is Role.STANDBY,
        allow_empty_start=config.headscale.allow_empty_start,
    )


def split_dns(config: StackConfig) -> dict[str, tuple[str, ...]]:
    """Every site's split-DNS zone, answered by that site's gateway IP."""
    tailnet = config.tailnet
    return {tailnet.zone_of(site): (site.gateway_ip,) for site in tailnet.sites}


def policy_file(config: StackConfig, published_by: pulumi.Resource | None = None) -> PolicyFile | None:
    """In file mode, the rendered policy Headscale reads from TailnetPolicy's ConfigMap (``published_by``, so the
    pod waits for it); None in the database modes."""
    if config.policy.mode is not PolicyMode.FILE:
        return None
    sha256 = render_stack_policy(config).sha256
    return PolicyFile(config_map=POLICY_CONFIG_MAP, key=POLICY_KEY, sha256=sha256, published_by=published_by)


def headscale_server_args(
    config: StackConfig, policy_published_by: pulumi.Resource | None = None
) -> HeadscaleServerArgs:
    """HeadscaleServer's Args for this stack's role and database stage; ``policy_published_by``: the policy
    ConfigMap's resource, which the pod waits for in file mode."""
    headscale, tailnet = config.headscale, config.tailnet
    oidc_client_secret = None  # made a Pulumi secret by the component, like the imported keys
    if headscale.oidc is not None and config.oidc_client_secret is not None:
        oidc_client_secret = config.oidc_client_secret.get_secret_value()
    public_address = config.site.public_address
    return HeadscaleServerArgs(
        namespace=config.namespace,
        image=headscale.image,
        version=headscale.version,
        allow_downgrade_from=headscale.allow_downgrade_from,
        metrics=config.monitoring.enabled,
        replicas=headscale_replicas(config),
        resources=headscale.resources,
        cluster=config.cluster,
        identity=identity_source(config),
        backup_key_epoch=config.backup.auth.key_epoch,
        database=headscale_storage(config),
        server_hostname=tailnet.public_hostname,
        prefixes=tailnet.prefixes,
        ephemeral_inactivity_timeout=headscale.ephemeral_inactivity_timeout,
        log_level=headscale.log_level,
        derp=headscale.derp,
        stun_address=str(public_address) if public_address is not None else None,
        oidc=headscale.oidc,
        oidc_client_secret=oidc_client_secret,
        base_domain=tailnet.base_domain,
        nameservers=tuple(tailnet.nameservers),
        split_dns=split_dns(config),
        policy_file=policy_file(config, policy_published_by),
    )


def sqlite_to_postgres_args(config: StackConfig) -> SqliteToPostgresArgs:
    """The migration Job's Args: this stack's SQLite backup into its CNPG cluster."""
    migration, backup = config.database.migration, config.backup
    if migration.image is None or backup.nfs is None:
        raise ValueError("database.migration.image and backup.nfs are required (checked by the config)")
    return SqliteToPostgresArgs(
        namespace=config.namespace,
        image=migration.image,
        force=migration.force,
        deadline_seconds=migration.deadline_seconds,
        headscale_image=config.headscale.image,
        headscale_version=config.headscale.version,
        resources=config.headscale.resources,
        restore_image=backup.litestream.image,
        restore_resources=backup.litestream.resources,
        backup_claim=claim_name(backup.nfs),
        target=postgres_storage(config),
        oidc=config.headscale.oidc is not None,
        policy=policy_file(config),
        cluster=config.cluster,
        authenticate=True,  # the migrating stage keeps Headscale's SQLite backup, and with it its key's Secret
    )


def headplane_replicas(config: StackConfig) -> int:
    """A standby keeps Headplane's objects and data but runs no pod."""
    return 0 if config.role is Role.STANDBY else 1


def headplane_args(
    config: StackConfig,
    *,
    headscale_url: str,
    api_key: pulumi.Output[str] | None = None,
    backup_key: pulumi.Input[str] | None = None,
) -> HeadplaneArgs:
    """Headplane's Args; ``api_key`` is the key the provider minted, else the stack's `headplaneApiKey` is used.
    Headplane 0.6 acts with a server-side key only for OIDC logins, so without OIDC no key reaches it."""
    key: pulumi.Input[str] | None = api_key
    if key is None and config.headplane_api_key is not None:
        key = config.headplane_api_key.get_secret_value()
    if config.headscale.oidc is None:
        key = None
    oidc_client_secret = None
    if config.headscale.oidc is not None and config.oidc_client_secret is not None:
        oidc_client_secret = config.oidc_client_secret.get_secret_value()
    return HeadplaneArgs(
        namespace=config.namespace,
        image=config.headplane.image,
        replicas=headplane_replicas(config),
        resources=config.headplane.resources,
        cluster=config.cluster,
        storage_size=config.headplane.storage_size,
        storage_class=config.cluster.storage_class,
        public_hostname=config.tailnet.public_hostname,
        headscale_url=headscale_url,
        oidc=config.headscale.oidc,
        oidc_client_secret=oidc_client_secret,
        api_key=key,
        backup=config.backup,
        metrics=config.monitoring.enabled,
        require_backup=config.role is Role.STANDBY,
        allow_empty_start=config.headscale.allow_empty_start,  # one override for both applications' restores
        backup_key=backup_key,  # the tailnet's, as Headscale's (HeadscaleServer.backup_key)
    )


def postgres_database_args(config: StackConfig) -> PostgresDatabaseArgs:
    """The CNPG cluster's Args: a standby runs a replica cluster of the active site's, streaming when configured."""
    postgres = config.database.postgres
    store = postgres.object_store
    if store is None or config.object_store_access_key_id is None or config.object_store_secret_access_key is None:
        raise ValueError("database.postgres.objectStore and its credentials are required (checked by the config)")
    replica_of = None
    if config.role is Role.STANDBY:
        streaming = postgres.replica_source is ReplicaSource.STREAMING
        replica_of = ReplicaOf(streaming_host=str(postgres.streaming_host) if streaming else None)
    return PostgresDatabaseArgs(
        namespace=config.namespace,
        instances=postgres.instances,
        image=postgres.image,
        resources=postgres.resources,
        storage_size=postgres.storage_size,
        storage_class=config.cluster.storage_class,
        object_store=store,
        object_store_access_key_id=config.object_store_access_key_id.get_secret_value(),
        object_store_secret_access_key=config.object_store_secret_access_key.get_secret_value(),
        backup_schedule=postgres.backup_schedule,
        replica_of=replica_of,
    )


def backup_volume_args(config: StackConfig) -> BackupVolumeArgs:
    """The backup claim's Args; only a stack that names an NFS target (`backup.nfs`) has one."""
    if config.backup.nfs is None:
        raise ValueError("backup.nfs is required for the backup volume")
    return BackupVolumeArgs(namespace=config.namespace, part_of=PART_OF, nfs=config.backup.nfs)


# ------------------------------------------------------------------------------------------ config-level facts


def routers_namespace(config: StackConfig) -> str:
    """Kernel-mode routers run as root with NET_ADMIN, which only `privileged` admits: they get a namespace of
    their own, so the gateway services (and userspace routers) stay `restricted`."""
    if config.gateway.routers.mode is RouterMode.KERNEL:
        return f"{config.gateway.namespace}-routers"
    return config.gateway.namespace


def key_source(config: StackConfig) -> str | None:
    """Where the routers' enrolment keys come from: `minted` (bootstrapApiKey), `configured` (routerAuthKeys) or
    None yet."""
    if config.bootstrap_api_key is not None:
        return "minted"
    return "configured" if config.router_auth_keys is not None else None


def gateway_proxies(config: StackConfig) -> list[Proxy]:
    """The configured proxies, or the defaults to the cluster's API server."""
    if config.gateway.services.proxies is not None:
        return list(config.gateway.services.proxies)
    api = config.cluster.api_server
    assert api is not None  # enforced by the config's cross-key rules
    return default_proxies(api)


def gateway_endpoints(config: StackConfig) -> dict[str, str]:
    """`ip:port` of the site's DNS and proxies on the gateway IP."""
    return endpoints(config.site.gateway_ip, gateway_proxies(config))


def api_url(config: StackConfig) -> str:
    return config.headscale_api_url or f"https://{config.tailnet.public_hostname}"


def manages_tailnet(config: StackConfig) -> bool:
    """The active stack with API access owns users, Headplane's key and the applied policy."""
    return config.bootstrap_api_key is not None and config.role is Role.ACTIVE


def next_steps(config: StackConfig) -> list[str]:
    """The commands that give this stack API access, in order, aimed at this stack and the right cluster.

    A standby's Headscale runs 0 replicas and its provider talks to the active's API (`headscaleApiUrl`, default
    the public URL): the key is created on the active site's Headscale, then set on this stack.
    """
    tailnet = config.tailnet
    this_stack = tailnet.stack_of(config.site)
    create = "exec deployment/headscale -c headscale -- headscale apikeys create --expiration 90d"
    if config.role is Role.ACTIVE:
        make_key = [
            f"{kubectl(config, config.site)} rollout status deployment/headscale",
            f"{kubectl(config, config.site)} {create}",
        ]
    else:
        active = tailnet.site(tailnet.active_site)
        make_key = [
            f"# this standby's Headscale runs 0 replicas: create the key on the active site {active.name}",
            f"{kubectl(config, active)} {create}",
        ]
    return [
        *make_key,
        f"pulumi config set -s {this_stack} --secret {PROJECT}:bootstrapApiKey '<the key printed above>'",
        f"pulumi up -s {this_stack}",
        *(
            []
            if config.router_auth_keys is not None
            else [
                f"# until then the subnet routers in {routers_namespace(config)} have no pre-auth key and stay not "
                f"ready; pulumi up mints one single-use key per replica, each into its own Secret "
                f"{gateway_module.AUTHKEY_SECRET}-<N> there "
                "(or set routerAuthKeys instead)"
            ]
        ),
    ]


def site_routes(config: StackConfig) -> list[SiteRoutes]:
    """Every site with all it advertises: its cluster CIDRs and its tailnet load-balancer pool."""
    return [
        SiteRoutes(name=site.name, gateway_ip=site.gateway_ip, routes=(*site.routes, site.lb_pool))
        for site in config.tailnet.sites
    ]


def render_stack_policy(config: StackConfig, project_root: Path = PROJECT_ROOT) -> RenderedPolicy:
    """The policy of this stack; config errors name the policy file and the path inside it."""
    path = Path(config.policy.file)
    path = path if path.is_absolute() else project_root / path
    try:
        base_text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            [f"{PROJECT}:policy.file: cannot be read ({exc.strerror}), got '{config.policy.file}'"]
        ) from None
    try:
        return render_policy(
            base_text,
            sites=site_routes(config),
            version=config.headscale.version,
            router_tag_owner=config.policy.router_tag_owner,
        )
    except PolicyError as exc:
        raise ConfigError(
            [f"{PROJECT}:policy ({config.policy.file}) {problem.path}: {problem.reason}" for problem in exc.problems]
        ) from None


# ------------------------------------------------------------------------------------------------- the Args


def subnet_routers_args(config: StackConfig, key_secrets: Sequence[pulumi.Resource] = ()) -> SubnetRoutersArgs:
    routers = config.gateway.routers
    return SubnetRoutersArgs(
        namespace=routers_namespace(config),
        replicas=routers.replicas,
        image=routers.image,
        mode=routers.mode,
        routes=tuple(advertised_routes(config.site)),
        tag=router_tag(config.site.name),
        login_server=f"https://{config.tailnet.public_hostname}",
        hostname_prefix=config.site.name,
        cluster=config.cluster,
        key_source=key_source(config),
        key_secrets=tuple(key_secrets),
    )


def gateway_services_args(config: StackConfig) -> GatewayServicesArgs:
    services = config.gateway.services
    return GatewayServicesArgs(
        namespace=config.gateway.namespace,
        replicas=services.replicas,
        coredns_image=services.coredns_image,
        metrics=config.monitoring.enabled,
        socat_image=services.socat_image,
        proxies=tuple(gateway_proxies(config)),
        dns_zone=config.dns_zone,
        dns_hosts=services.dns_hosts,
        gateway_ip=config.site.gateway_ip,
        lb_pool=config.site.lb_pool,
        pool_name=f"tailnet-{config.site.name}",
        pool_label=config.gateway.pool_label,
        cluster=config.cluster,
        load_balancer_source_ranges=tuple(services.load_balancer_source_ranges),
    )


def public_endpoint_args(config: StackConfig) -> PublicEndpointArgs:
    publishes = config.role is Role.ACTIVE
    return PublicEndpointArgs(
        namespace=config.namespace,
        hostname=config.tailnet.public_hostname,
        headscale=Backend(service=headscale_module.APP, port=headscale_module.HTTP_PORT),
        headplane=Backend(service=headplane_module.APP, port=headplane_module.PORT)
        if config.headplane.enabled
        else None,
        endpoint=config.endpoint,
        primary_site=config.tailnet.active_site,
        dns_record_target=config.site.public_address if publishes else None,
    )


def tailnet_objects_args(config: StackConfig) -> TailnetObjectsArgs:
    routers = config.gateway.routers
    owner = manages_tailnet(config)
    return TailnetObjectsArgs(
        api_url=api_url(config),
        headscale_version=config.headscale.version,
        router_tag=router_tag(config.site.name),
        router_replicas=routers.replicas,
        router_key_lifetime=routers.auth_key_lifetime,
        router_key_rotate_before=routers.auth_key_rotate_before,
        routers_namespace=routers_namespace(config),
        users=tuple(config.tailnet.users) if owner else (),
        # Headplane 0.6 needs a server-side key only for OIDC logins (without OIDC users paste their own). Every
        # site with API access mints its own Headplane's key, whatever its role: the key is that site's, so a
        # promotion or a fence neither mints nor deletes one (a fence that dropped it would delete it after the
        # same run scaled Headscale to 0, and fail), and a promoted Headplane has its key from the first second.
        mint_headplane_api_key=config.headplane.enabled and config.headscale.oidc is not None,
    )


def tailnet_policy_args(config: StackConfig) -> TailnetPolicyArgs:
    """Refuses `apply` without the access to apply, then renders the policy."""
    owner = manages_tailnet(config)
    if config.policy.mode is PolicyMode.APPLY and not owner:
        raise ConfigError(
            [
                f"{PROJECT}:policy.mode: apply needs API access on the active stack (set bootstrapApiKey there; "
                "a standby never writes the policy), got 'apply'"
            ]
        )
    return TailnetPolicyArgs(
        namespace=config.namespace,
        policy=render_stack_policy(config),
        mode=config.policy.mode,
        live=LiveApi(url=api_url(config), headscale_version=config.headscale.version) if owner else None,
    )


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


def network_policies_args(config: StackConfig) -> NetworkPoliciesArgs:
    """Default-deny ingress in every namespace the stack owns; the allows say who reaches what, and why."""
    settings = config.network_policy
    gateway_ns, routers_ns = config.gateway.namespace, routers_namespace(config)
    kernel = routers_ns != gateway_ns
    public = ingress_peers(settings)
    monitoring = (from_namespace(settings.monitoring_namespace),)
    headscale_pods = selector(headscale_module.APP)
    headplane = config.headplane.enabled

    headscale_allows = [
        Allow(
            ports=(Port(headscale_module.HTTP_PORT),),
            sources=(*public, *([from_pods(selector(headplane_module.APP))] if headplane else [])) if public else None,
            why="the public endpoint through the ingress data plane (any source when none is named), and Headplane",
        ),
        Allow(ports=(Port(headscale_module.METRICS_PORT),), sources=monitoring, why="metrics, scraped by monitoring"),
    ]
    scraped = config.monitoring.enabled
    litestream_metrics = Allow(
        ports=(Port(LITESTREAM_METRICS_PORT),), sources=monitoring, why="the Litestream sidecar's metrics"
    )
    if scraped and headscale_module.APP in litestream_apps(config):
        headscale_allows.append(litestream_metrics)
    if config.headscale.derp.embedded:
        headscale_allows.append(
            Allow(ports=(Port(STUN_PORT, "UDP"),), sources=None, why="the embedded DERP's STUN, from the internet")
        )
    protected = [Protected(name=headscale_module.APP, pods=headscale_pods, allows=tuple(headscale_allows))]
    if headplane:
        protected.append(
            Protected(
                name=headplane_module.APP,
                pods=selector(headplane_module.APP),
                allows=(
                    Allow(
                        ports=(Port(headplane_module.PORT),),
                        sources=tuple(public) or None,
                        why="/admin through the ingress data plane (any source when none is named)",
                    ),
                    *([litestream_metrics] if scraped else []),
                ),
            )
        )
    if scraped:
        protected.append(
            Protected(
                name=EXPORTER,
                pods=selector(EXPORTER),
                allows=(Allow(ports=(Port(EXPORTER_PORT),), sources=monitoring, why="the state exporter's metrics"),),
            )
        )
    if config.database.stage is not DatabaseStage.SQLITE:
        instances = {"cnpg.io/cluster": DATABASE_CLUSTER}
        clients = [from_pods(headscale_pods)]
        if config.database.stage is DatabaseStage.MIGRATING:
            clients.append(from_pods(selector(migration_module.JOB)))
        if database_proxies(config):
            clients.append(from_pods(selector(gateway_module.SERVICES), gateway_ns))
        postgres, status = Port(CNPG_POSTGRES_PORT), Port(CNPG_STATUS_PORT)
        protected.append(
            Protected(
                name=DATABASE_CLUSTER,
                pods=instances,
                allows=(
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
                        sources=(from_namespace(settings.cnpg_operator_namespace),),
                        why="the CloudNativePG operator (instance manager status, and the database itself)",
                    ),
                    Allow(ports=(Port(CNPG_METRICS_PORT),), sources=monitoring, why="metrics"),
                ),
            )
        )

    # The gateway's clients are the routers: a userspace router opens the connection itself (netstack), a kernel
    # router forwards it masqueraded to its pod IP (tailscale's default --snat-subnet-routes); without SNAT the
    # source stays the client's tailnet address, which no pod of the cluster has (the config refuses site routes
    # overlapping the tailnet prefixes), so those prefixes are admitted for kernel routers too.
    router_sources = [from_pods(selector(gateway_module.ROUTERS), routers_ns if kernel else None)]
    if kernel:
        router_sources += [from_cidr(config.tailnet.prefixes.v4), from_cidr(config.tailnet.prefixes.v6)]
    gateway_ports = (
        Port(gateway_module.DNS_PORT, "UDP"),
        Port(gateway_module.DNS_PORT, "TCP"),
        *(Port(proxy.port) for proxy in gateway_proxies(config)),
    )
    gateway = Protected(
        name=gateway_module.SERVICES,
        pods=selector(gateway_module.SERVICES),
        allows=(
            Allow(ports=gateway_ports, sources=tuple(router_sources), why="tailnet clients, via the routers"),
            *(
                [Allow(ports=(Port(gateway_module.DNS_METRICS_PORT),), sources=monitoring, why="CoreDNS's metrics")]
                if scraped
                else []
            ),
        ),
    )
    # The routers themselves admit nothing: tunnels are set up outbound (replies pass) or relayed by DERP, and
    # their health port is probed by the kubelet.
    namespaces = [
        NamespacePolicies(namespace=config.namespace, protected=tuple(protected)),
        NamespacePolicies(namespace=gateway_ns, protected=(gateway,)),
    ]
    if kernel:
        namespaces.append(NamespacePolicies(namespace=routers_ns))
    return NetworkPoliciesArgs(namespaces=tuple(namespaces))


def litestream_apps(config: StackConfig) -> tuple[str, ...]:
    """The applications whose pods run a Litestream sidecar: Headscale until the postgres stage, Headplane when on."""
    apps = [] if config.database.stage is DatabaseStage.POSTGRES else [headscale_module.APP]
    return (*apps, *([headplane_module.APP] if config.headplane.enabled else []))


def monitoring_args(config: StackConfig, *, key_expiries: Sequence[KeyExpiry] = ()) -> MonitoringArgs:
    """What the stack scrapes and which alerts it renders, from the same config as the objects they watch."""
    settings = config.monitoring
    apps = litestream_apps(config)
    with_database = config.database.stage is not DatabaseStage.SQLITE
    return MonitoringArgs(
        namespace=config.namespace,
        settings=settings,
        scope=AlertScope(
            namespace=config.namespace,
            apps=apps,
            serving=config.role is Role.ACTIVE,
            routers_namespace=routers_namespace(config),
            routers_statefulsets=tuple(gateway_module.router_name(n) for n in range(config.gateway.routers.replicas)),
            cnpg_cluster=DATABASE_CLUSTER if with_database else None,
            certificate=PUBLIC_NAME,
            rehearsal=config.backup.rehearsal.enabled and bool(apps),
            runbook_url=settings.runbook_url or "",
            replication_lag_seconds=max(
                300,
                replication_lag_bound(
                    scrape_interval_seconds=SCRAPE_INTERVAL_SECONDS,
                    exporter_interval_seconds=settings.exporter_interval_seconds,
                    sync_interval_seconds=parse_go_duration(
                        config.backup.litestream.sync_interval, argument="backup.litestream.syncInterval"
                    )
                    / 1e9,
                    evaluation_interval_seconds=SCRAPE_INTERVAL_SECONDS,
                ),
            ),
        ),
        litestream_apps=apps,
        litestream_image=config.backup.litestream.image,
        backup_claim=claim_name(config.backup.nfs) if config.backup.nfs is not None and apps else None,
        cnpg_cluster=DATABASE_CLUSTER if with_database else None,
        gateway_namespace=config.gateway.namespace,
        cluster=config.cluster,
        key_expiries=tuple(key_expiries),
    )
