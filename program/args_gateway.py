"""The stack config mapped to the gateway, endpoint, tailnet and network-policy components' Args.

The decisions that need the whole config live here, not in the components: which namespace the routers run in,
where their enrolment key comes from, the default proxies, whether this stack owns the tailnet (users, Headplane's
API key, the live policy), and the policy rendered from the base file with every site's routes.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from components import headplane as headplane_module
from components import headscale as headscale_module
from components.endpoint import Backend, PublicEndpointArgs
from components.gateway import (
    GatewayServicesArgs,
    SubnetRoutersArgs,
    advertised_routes,
    default_proxies,
    endpoints,
)
from components.network_policy import NetworkPoliciesArgs, ProtectedApp
from components.settings import PROJECT, PolicyMode, Proxy, Role, RouterMode
from components.tailnet_objects import ROUTER_KEY_SECRET, TailnetObjectsArgs
from components.tailnet_policy import LiveApi, TailnetPolicyArgs
from policy.model import PolicyError
from policy.render import RenderedPolicy, SiteRoutes, render_policy, router_tag
from program.config import ConfigError, StackConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ config-level facts


def routers_namespace(config: StackConfig) -> str:
    """Kernel-mode routers run as root with NET_ADMIN, which only `privileged` admits: they get a namespace of
    their own, so the gateway services (and userspace routers) stay `restricted`."""
    if config.gateway.routers.mode is RouterMode.KERNEL:
        return f"{config.gateway.namespace}-routers"
    return config.gateway.namespace


def key_source(config: StackConfig) -> str | None:
    """Where the routers' enrolment key comes from: `minted` (bootstrapApiKey), `configured` (routerAuthKey) or
    None yet."""
    if config.bootstrap_api_key is not None:
        return "minted"
    return "configured" if config.router_auth_key is not None else None


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
    """The commands that give this stack API access, in order."""
    return [
        f"kubectl -n {config.namespace} rollout status deployment/headscale",
        f"kubectl -n {config.namespace} exec deployment/headscale -c headscale -- "
        "headscale apikeys create --expiration 90d",
        f"pulumi config set --secret {PROJECT}:bootstrapApiKey '<the key printed above>'",
        "pulumi up",
        *(
            []
            if config.router_auth_key is not None
            else [
                f"# until then the subnet routers in {routers_namespace(config)} have no pre-auth key and stay not "
                f"ready; pulumi up mints it into the Secret {ROUTER_KEY_SECRET} there (or set routerAuthKey instead)"
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


def subnet_routers_args(config: StackConfig, key_secret: pulumi.Resource | None) -> SubnetRoutersArgs:
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
        key_secret=key_secret,
    )


def gateway_services_args(config: StackConfig) -> GatewayServicesArgs:
    services = config.gateway.services
    return GatewayServicesArgs(
        namespace=config.gateway.namespace,
        replicas=services.replicas,
        coredns_image=services.coredns_image,
        socat_image=services.socat_image,
        proxies=tuple(gateway_proxies(config)),
        dns_zone=config.dns_zone,
        dns_hosts=services.dns_hosts,
        gateway_ip=config.site.gateway_ip,
        lb_pool=config.site.lb_pool,
        pool_name=f"tailnet-{config.site.name}",
        pool_label=config.gateway.pool_label,
        cluster=config.cluster,
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
        router_key_lifetime=routers.auth_key_lifetime,
        router_key_rotate_before=routers.auth_key_rotate_before,
        routers_namespace=routers_namespace(config),
        users=tuple(config.tailnet.users) if owner else (),
        mint_headplane_api_key=owner and config.headplane.enabled,
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


def network_policies_args(config: StackConfig, apps: list[ProtectedApp]) -> NetworkPoliciesArgs:
    return NetworkPoliciesArgs(namespace=config.namespace, settings=config.network_policy, apps=tuple(apps))
