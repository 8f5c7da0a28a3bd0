"""The stack config mapped to each component's Args, one function per component: pure, and the only code that
knows how the config's sections become what a component takes. program/site_args.py calls them all, once, to build
the site's SiteArgs; program/site.py wires the components from that value.

Decisions that need the whole config live here, not in the components: replicas by role and stage, where the
identity comes from, storage per stage, which namespace the routers run in, where their enrolment key comes from,
the default proxies, whether this stack owns the tailnet (users, Headplane's API key, the live policy), and the
policy rendered from the base file with every site's routes. What a component takes from another component (a
Secret it waits for, a URL or key another one makes) is not here: the site sets it, as an edge between the two.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from headscale_ha.components import headplane as headplane_module
from headscale_ha.components import headplane_config, headscale_config
from headscale_ha.components import headscale as headscale_module
from headscale_ha.components.alerts import AlertRulesInput, replication_lag_bound
from headscale_ha.components.backup_volume import BackupVolumeArgs, claim_name
from headscale_ha.components.endpoint import PUBLIC_NAME, Backend, PublicEndpointArgs
from headscale_ha.components.gateway_services import GatewayServicesArgs, default_proxies, endpoints
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
from headscale_ha.components.headscale_config import PostgresConnection
from headscale_ha.components.litestream_config import parse_go_duration
from headscale_ha.components.monitoring import SCRAPE_INTERVAL_SECONDS, MonitoringArgs
from headscale_ha.components.pod import PART_OF
from headscale_ha.components.postgres import (
    DATABASE,
    DATABASE_CLUSTER,
    OWNER,
    app_secret,
    ca_secret,
    read_write_host,
)
from headscale_ha.components.serving_lease import (
    PEER_KUBECONFIGS_KEY,
    WITNESS_KUBECONFIG_KEY,
    FailsafeAccountsArgs,
    PeerSite,
    ServingLeaseArgs,
)
from headscale_ha.components.settings import PROJECT, DatabaseStage, PolicyMode, Proxy, Role, RouterMode
from headscale_ha.components.subnet_routers import SubnetRoutersArgs, advertised_routes, router_name
from headscale_ha.components.tailnet_objects import TailnetObjectsArgs
from headscale_ha.components.tailnet_policy import POLICY_CONFIG_MAP, POLICY_KEY, LiveApi, TailnetPolicyArgs
from headscale_ha.components.witness_credentials import lease_credentials
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.principals import ConfiguredUser, policy_users
from headscale_ha.policy.problems import PolicyError, PolicyLint
from headscale_ha.policy.render import RenderedPolicy, SiteRoutes, render_policy, router_tag
from headscale_ha.program.config import ConfigError, StackConfig

#: Where relative paths of the config (policy.file) are read from.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ config-level facts


def headscale_replicas(config: StackConfig) -> int:
    """0 on a standby and while migrating (registrations pause, tunnels keep running); else the configured 0 or 1.
    With automatic failover the witness Lease decides who serves, not `role`: every site runs its pod, which waits
    in its gate until its site holds the Lease, so a `pulumi up` of either site never changes who serves."""
    if config.database.stage is DatabaseStage.MIGRATING:
        return 0
    if config.role is Role.STANDBY and not config.tailnet.failover.automatic:
        return 0
    return config.headscale.replicas


def lease_api_urls(config: StackConfig, *, peers: bool = True) -> dict[str, str]:
    """With automatic failover, the API servers the lease containers reach besides their own, by why: the witness,
    and with the failsafe and ``peers`` each other site."""
    lease = serving_lease_args(config)
    if lease is None:
        return {}
    kubeconfigs = {"the witness API server (the failover Lease)": (WITNESS_KUBECONFIG_KEY, lease.witness_kubeconfig)}
    kubeconfigs |= {
        f"{site}'s API server (its failsafe Lease)": (f"{PEER_KUBECONFIGS_KEY}.{site}", peer.kubeconfig)
        for site, peer in (lease.peers.items() if peers else ())
    }
    urls = {}
    for why, (key, kubeconfig) in kubeconfigs.items():
        try:
            urls[why] = lease_credentials(str(kubeconfig), key=key).api_url
        except ValueError as refused:  # the config rules report it first; a config built by hand may not
            raise ConfigError([f"{PROJECT}:{refused}"]) from None
    return urls


def failsafe_accounts_args(config: StackConfig) -> FailsafeAccountsArgs | None:
    """With the failsafe, once this site is preparing for automatic failover (its witness's kubeconfig set) or runs
    it: an account per other site in this cluster, whose token that site's `peerKubeconfigs` holds."""
    failover = config.tailnet.failover
    if not failover.failsafe or (config.witness_kubeconfig is None and not failover.automatic):
        return None
    others = tuple(site.name for site in config.tailnet.sites if site.name != config.site.name)
    return FailsafeAccountsArgs(
        app=headscale_module.APP,
        namespace=config.namespace,
        failsafe_lease=f"{failover.lease}-failsafe",
        peers=others,
    )


def serving_lease_args(config: StackConfig) -> ServingLeaseArgs | None:
    """With automatic failover, this site's place behind the witness Lease (the kubeconfigs become Pulumi secrets
    in the component); None without it."""
    failover = config.tailnet.failover
    if not failover.automatic:
        return None
    if config.witness_kubeconfig is None:  # the config rules require it; a config built by hand may lack it
        raise ConfigError([f"{PROJECT}:witnessKubeconfig: is required with tailnet.failover.automatic, got nothing"])
    peers = {}
    if failover.failsafe:
        given = config.peer_kubeconfigs or {}
        peers = {site: PeerSite(kubeconfig=kubeconfig.get_secret_value()) for site, kubeconfig in given.items()}
    return ServingLeaseArgs(
        site=config.site.name,
        failover=failover,
        witness_kubeconfig=config.witness_kubeconfig.get_secret_value(),
        peers=peers,
    )


def headplane_replicas(config: StackConfig) -> int:
    """A standby keeps Headplane's objects and data but runs no pod. With automatic failover every site runs it, and
    it serves only where its site holds the witness Lease (its follower gate)."""
    return 0 if config.role is Role.STANDBY and not config.tailnet.failover.automatic else 1


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
    assert api is not None  # config_rules.default_proxies_need_the_api_server refuses a config without it
    return default_proxies(api)


def gateway_endpoints(config: StackConfig) -> dict[str, str]:
    """`ip:port` of the site's DNS and proxies on the gateway IP."""
    return endpoints(config.site.gateway_ip, gateway_proxies(config))


def api_url(config: StackConfig) -> str:
    """Headscale's API as the provider reaches it from where `pulumi up` runs."""
    return config.headscale_api_url or f"https://{config.tailnet.public_hostname}"


def manages_tailnet(config: StackConfig) -> bool:
    """The active stack with API access owns users, Headplane's key and the applied policy."""
    return config.bootstrap_api_key is not None and config.role is Role.ACTIVE


def litestream_apps(config: StackConfig) -> tuple[str, ...]:
    """The applications whose pods run a Litestream sidecar: Headscale until the postgres stage, Headplane when on."""
    apps = [] if config.database.stage is DatabaseStage.POSTGRES else [headscale_module.APP]
    return (*apps, *([headplane_module.APP] if config.headplane.enabled else []))


def split_dns(config: StackConfig) -> dict[str, tuple[str, ...]]:
    """Every site's split-DNS zone, answered by that site's gateway IP."""
    tailnet = config.tailnet
    return {tailnet.zone_of(site): (site.gateway_ip,) for site in tailnet.sites}


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
        rendered = render_policy(
            base_text,
            sites=site_routes(config),
            version=config.headscale.version,
            router_tag_owner=config.policy.router_tag_owner,
        )
    except PolicyError as exc:
        raise ConfigError(
            [f"{PROJECT}:policy ({config.policy.file}) {problem.path}: {problem.reason}" for problem in exc.problems]
        ) from None
    return with_user_findings(config, load_hujson(base_text), rendered)


def with_user_findings(config: StackConfig, base: object, rendered: RenderedPolicy) -> RenderedPolicy:
    """Refuse a policy that names a user `tailnet.users` does not have (policy/principals.py says why); with OIDC
    logins such a user may appear later, so it is a lint then. A configured user the policy never names is a lint."""
    users = [ConfiguredUser(name=user.name, email=user.email) for user in config.tailnet.users]
    owner = config.policy.router_tag_owner
    found = policy_users(base, users)
    unknown = [(f"{PROJECT}:policy ({config.policy.file}) {path}", token) for path, token in found.unknown]
    if "@" in owner and not any(user.matches(owner) for user in users):
        unknown.append((f"{PROJECT}:policy.routerTagOwner", owner))
    unnamed = [user for user in found.unnamed if not user.matches(owner)]
    names = ", ".join(user.name for user in users) or "none"

    def why(token: str) -> str:
        return (
            f"{token!r} is no user of tailnet.users ({names}): Headscale matches it to nobody, so what it grants or "
            "owns reaches no one; add the user to tailnet.users or correct the token"
        )

    if unknown and config.headscale.oidc is None:
        raise ConfigError([f"{path}: {why(token)}" for path, token in unknown])
    lints = [
        PolicyLint(path=path, code="unknown-user", finding=why(token), hazard="unless an OIDC login creates the user")
        for path, token in unknown
    ]
    lints += [
        PolicyLint(
            path=f"tailnet.users[{user.name}]",
            code="unnamed-user",
            finding=f"{config.policy.file} never names {user.name}",
            hazard="the user gets only what autogroup:member grants",
        )
        for user in unnamed
    ]
    return replace(rendered, lints=(*rendered.lints, *lints)) if lints else rendered


# ------------------------------------------------------------------------------------------ the control plane


def postgres_storage(config: StackConfig) -> PostgresStorage:
    """The CNPG cluster's read-write Service, the application database and the owner's password Secret; the
    server verified (verify-full) against the cluster's own CA."""
    return PostgresStorage(
        connection=PostgresConnection(
            host=read_write_host(config.namespace), name=DATABASE, user=OWNER, ssl="verify-full"
        ),
        password_secret=app_secret(),
        ca_secret=ca_secret(),
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


def policy_file(config: StackConfig, policy: RenderedPolicy) -> PolicyFile | None:
    """In file mode, the rendered ``policy`` Headscale reads from TailnetPolicy's ConfigMap (the site makes the pod
    wait for that ConfigMap); None in the database modes."""
    if config.policy.mode is not PolicyMode.FILE:
        return None
    return PolicyFile(config_map=POLICY_CONFIG_MAP, key=POLICY_KEY, sha256=policy.sha256)


def headscale_server_args(config: StackConfig, policy: RenderedPolicy) -> HeadscaleServerArgs:
    """HeadscaleServer's Args for this stack's role and database stage, serving ``policy`` in file mode."""
    headscale, tailnet = config.headscale, config.tailnet
    oidc_client_secret = None  # made a Pulumi secret by the component, like the imported keys
    if headscale.oidc is not None and config.oidc_client_secret is not None:
        oidc_client_secret = config.oidc_client_secret.get_secret_value()
    public_address = config.site.public_address
    return HeadscaleServerArgs(
        namespace=config.namespace,
        settings=headscale,
        metrics=config.monitoring.enabled,
        replicas=headscale_replicas(config),
        cluster=config.cluster,
        identity=identity_source(config),
        backup_key_epoch=config.backup.auth.key_epoch,
        database=headscale_storage(config),
        server_hostname=tailnet.public_hostname,
        prefixes=tailnet.prefixes,
        stun_address=str(public_address) if public_address is not None else None,
        oidc_client_secret=oidc_client_secret,
        base_domain=tailnet.base_domain,
        nameservers=tuple(tailnet.nameservers),
        split_dns=split_dns(config),
        policy_file=policy_file(config, policy),
        lease=serving_lease_args(config),
        failsafe_accounts=failsafe_accounts_args(config),
    )


def backup_volume_args(config: StackConfig) -> BackupVolumeArgs | None:
    """The backup claim's Args; only a stack that names an NFS target (`backup.nfs`) has one."""
    if config.backup.nfs is None:
        return None
    return BackupVolumeArgs(namespace=config.namespace, part_of=PART_OF, nfs=config.backup.nfs)


def tailnet_policy_args(config: StackConfig, policy: RenderedPolicy) -> TailnetPolicyArgs:
    """Refuses `apply` without the access to apply; ``policy`` is the stack's rendered policy."""
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
        policy=policy,
        mode=config.policy.mode,
        live=LiveApi(url=api_url(config), headscale_version=config.headscale.version) if owner else None,
    )


def public_endpoint_args(config: StackConfig) -> PublicEndpointArgs:
    publishes = config.role is Role.ACTIVE
    return PublicEndpointArgs(
        namespace=config.namespace,
        hostname=config.tailnet.public_hostname,
        headscale=Backend(service=headscale_module.APP, port=headscale_config.HTTP_PORT),
        headplane=Backend(service=headplane_module.APP, port=headplane_config.HTTP_PORT)
        if config.headplane.enabled
        else None,
        endpoint=config.endpoint,
        primary_site=config.tailnet.active_site,
        dns_record_target=config.site.public_address if publishes else None,
    )


def headplane_oidc_login(config: StackConfig) -> bool:
    """Headplane logs in through headscale.oidc's provider: only when chosen (`headplane.oidcLogin: true`), since
    Headplane 0.6 makes the first login to an empty database its owner and enforces no allowed list."""
    return config.headplane.enabled and config.headscale.oidc is not None and config.headplane.oidc_login is True


def headplane_args(config: StackConfig) -> HeadplaneArgs | None:
    """Headplane's Args, None when `headplane.enabled` is off. Its Headscale URL is the server's in-cluster API
    (the site sets it from the server, with the tailnet's backup key); its API key is the stack's `headplaneApiKey`
    (the site uses the key the provider minted instead, when it mints one). Headplane 0.6 acts with a server-side
    key only for OIDC logins, so without OIDC no key reaches it."""
    if not config.headplane.enabled:
        return None
    oidc = config.headscale.oidc if headplane_oidc_login(config) else None
    api_key = config.headplane_api_key.get_secret_value() if oidc and config.headplane_api_key else None
    oidc_client_secret = None
    if oidc is not None and config.oidc_client_secret is not None:
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
        headscale_url=headscale_module.in_cluster_url(config.namespace),
        oidc=oidc,
        oidc_client_secret=oidc_client_secret,
        api_key=api_key,
        backup=config.backup,
        metrics=config.monitoring.enabled,
        require_backup=config.role is Role.STANDBY,
        allow_empty_start=config.headscale.allow_empty_start,  # one override for both applications' restores
        lease=serving_lease_args(config),
    )


def tailnet_objects_args(config: StackConfig) -> TailnetObjectsArgs | None:
    """What the stack manages inside Headscale through the API; None without `bootstrapApiKey` (no API access)."""
    if config.bootstrap_api_key is None:
        return None
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
        mint_headplane_api_key=headplane_oidc_login(config),
    )


# ------------------------------------------------------------------------------------------ the gateway


def subnet_routers_args(config: StackConfig) -> SubnetRoutersArgs:
    """The routers' Args; the Secrets that write their keys are an edge the site sets."""
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


# ------------------------------------------------------------------------------------------ monitoring


def monitoring_args(config: StackConfig) -> MonitoringArgs | None:
    """What the stack scrapes and which alerts it renders, from the same config as the objects they watch; None
    with `monitoring.enabled` off. The provider's key expiries are an edge the site sets."""
    settings = config.monitoring
    if not settings.enabled:
        return None
    apps = litestream_apps(config)
    with_database = config.database.stage is not DatabaseStage.SQLITE
    return MonitoringArgs(
        namespace=config.namespace,
        settings=settings,
        scope=AlertRulesInput(
            namespace=config.namespace,
            apps=apps,
            serving=config.role is Role.ACTIVE,
            routers_namespace=routers_namespace(config),
            routers_statefulsets=tuple(router_name(n) for n in range(config.gateway.routers.replicas)),
            cnpg_cluster=DATABASE_CLUSTER if with_database else None,
            certificate=PUBLIC_NAME,
            rehearsal=config.backup.rehearsal.enabled and bool(apps),
            runbook_url=settings.runbook_url or "",
            replication_lag_seconds=replication_lag_seconds(config),
        ),
        litestream_apps=apps,
        litestream_image=config.backup.litestream.image,
        backup_claim=claim_name(config.backup.nfs) if config.backup.nfs is not None and apps else None,
        cnpg_cluster=DATABASE_CLUSTER if with_database else None,
        gateway_namespace=config.gateway.namespace,
        cluster=config.cluster,
    )


def replication_lag_seconds(config: StackConfig) -> int:
    """When the replication-lag alert fires: the longest lag the scrape, exporter and sync intervals can show
    while replication works, and never under 5 minutes."""
    sync_ns = parse_go_duration(config.backup.litestream.sync_interval, argument="backup.litestream.syncInterval")
    return max(
        300,
        replication_lag_bound(
            scrape_interval_seconds=SCRAPE_INTERVAL_SECONDS,
            exporter_interval_seconds=config.monitoring.exporter_interval_seconds,
            sync_interval_seconds=sync_ns / 1e9,
            evaluation_interval_seconds=SCRAPE_INTERVAL_SECONDS,
        ),
    )
