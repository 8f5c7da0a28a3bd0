"""SiteArgs: everything one site builds, mapped from the stack config in one pass, before any resource exists.

``site_args(config)`` is the whole mapping: the args of every component the stack has (None for one it does not
have), the namespaces it owns, its Kubernetes provider, a standby's check of its active, and the outputs the
config decides alone, and what the recovery and availability reports read of it (they are completed with the facts
of the pods the site renders). It is a plain value: print it to see what a config does, compare it in a test.
TailnetSite (program/site.py) builds the components from it and adds the edges between them (a pod that waits for a
ConfigMap, a key one component makes and another reads); nothing after this function reads the stack config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from headscale_ha.components.backup_volume import BackupVolumeArgs
from headscale_ha.components.endpoint import PublicEndpointArgs
from headscale_ha.components.gateway_services import GatewayServicesArgs
from headscale_ha.components.headplane import HeadplaneArgs
from headscale_ha.components.headscale import HeadscaleServerArgs
from headscale_ha.components.monitoring import MonitoringArgs
from headscale_ha.components.network_policy import NetworkPoliciesArgs
from headscale_ha.components.pod import labels
from headscale_ha.components.settings import Role
from headscale_ha.components.subnet_routers import SubnetRoutersArgs
from headscale_ha.components.tailnet_objects import TailnetObjectsArgs
from headscale_ha.components.tailnet_policy import TailnetPolicyArgs
from headscale_ha.program import args
from headscale_ha.program.config import StackConfig
from headscale_ha.program.database_stage import DatabaseStageArgs, database_stage_args
from headscale_ha.program.examples import warning as example_warning
from headscale_ha.program.lease_gates import LeaseOrder, lease_order
from headscale_ha.program.network import network_args
from headscale_ha.program.outputs import SiteOutputArgs, site_output_args
from headscale_ha.program.standby import StandbyGateArgs, standby_gate_args


@dataclass(frozen=True, kw_only=True)
class NamespaceArgs:
    """A namespace the site owns; retained on delete: deleting it would delete the state inside (claims, the
    identity Secret, the routers' node state), whatever their own options say."""

    name: str
    labels: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class KubernetesArgs:
    """The stack's one Kubernetes provider (program/site.py ``kubernetes_provider`` says why each setting)."""

    kubeconfig: str | None  # secret: the stack's `kubeconfig`; None: the ambient kubeconfig file, at `context`
    #: Without `kubeconfig`: the context of the ambient kubeconfig file that reaches this site (`kubeContext`, default
    #: the site's name), never the file's current context, which one shell shares between both stacks.
    context: str | None
    cluster_identifier: str  # the site: the provider is never replaced while it stays the same


@dataclass(frozen=True, kw_only=True)
class ConfiguredRouterKeys:
    """The user's pre-auth keys (`routerAuthKeys`), one per router ordinal, each written to its Secret."""

    namespace: str
    keys: tuple[str, ...]  # secret values


@dataclass(frozen=True, kw_only=True)
class SiteArgs:
    """Every component's args for one site, from the stack config alone; None: the site has no such component."""

    example_warning: str | None  # the shipped example values still set, as one warning
    standby_gate: StandbyGateArgs | None  # a standby checks its active before anything else
    lease_order: LeaseOrder | None  # entering or leaving automatic failover, the other sites are checked first
    kubernetes: KubernetesArgs
    namespace: NamespaceArgs  # the control plane's
    gateway_namespace: NamespaceArgs  # the gateway services' (and userspace routers')
    routers_namespace: NamespaceArgs | None  # kernel-mode routers' own, `privileged`
    backup_volume: BackupVolumeArgs | None
    database: DatabaseStageArgs  # the stage's database components (program/database_stage.py)
    policy: TailnetPolicyArgs
    headscale: HeadscaleServerArgs
    endpoint: PublicEndpointArgs
    tailnet_objects: TailnetObjectsArgs | None  # with API access (`bootstrapApiKey`)
    router_keys: ConfiguredRouterKeys | None  # without API access, the user's keys (`routerAuthKeys`)
    routers: SubnetRoutersArgs
    gateway: GatewayServicesArgs
    headplane: HeadplaneArgs | None
    monitoring: MonitoringArgs | None
    network_policies: NetworkPoliciesArgs | None
    outputs: SiteOutputArgs


def restricted_namespace(name: str, app: str) -> NamespaceArgs:
    """Pod Security Admission `restricted`: the pods run as non-root, read-only, without capabilities."""
    levels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
    return NamespaceArgs(name=name, labels={**labels(app, "namespace"), **levels})


def kernel_routers_namespace(name: str) -> NamespaceArgs:
    """Kernel-mode routers need NET_ADMIN as root, which only `privileged` admits; audit and warn keep saying so."""
    levels = {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return NamespaceArgs(name=name, labels={**labels("subnet-router", "namespace"), **levels})


def configured_router_keys(config: StackConfig) -> ConfiguredRouterKeys | None:
    """The user's keys, when the stack has no API access to mint them. Whether each is single-use cannot be checked
    without API access: the config's description and the README ask for single-use keys (an accepted risk)."""
    if config.bootstrap_api_key is not None or config.router_auth_keys is None:
        return None
    keys = tuple(key.get_secret_value() for key in config.router_auth_keys)
    return ConfiguredRouterKeys(namespace=args.routers_namespace(config), keys=keys)


def site_args(config: StackConfig) -> SiteArgs:
    """The one pass from the stack config to every component's args (raises ConfigError before any resource)."""
    policy = args.render_stack_policy(config)
    routers_namespace = args.routers_namespace(config)
    kernel = routers_namespace != config.gateway.namespace
    return SiteArgs(
        example_warning=example_warning(config),
        standby_gate=standby_gate_args(config) if config.role is Role.STANDBY else None,
        lease_order=lease_order(config),
        kubernetes=KubernetesArgs(
            kubeconfig=config.kubeconfig.get_secret_value() if config.kubeconfig is not None else None,
            context=config.site.context if config.kubeconfig is None else None,
            cluster_identifier=config.site.name,
        ),
        namespace=restricted_namespace(config.namespace, "headscale-ha"),
        gateway_namespace=restricted_namespace(config.gateway.namespace, "tailnet-gateway"),
        routers_namespace=kernel_routers_namespace(routers_namespace) if kernel else None,
        backup_volume=args.backup_volume_args(config),
        database=database_stage_args(config, policy),
        policy=args.tailnet_policy_args(config, policy),
        headscale=args.headscale_server_args(config, policy),
        endpoint=args.public_endpoint_args(config),
        tailnet_objects=args.tailnet_objects_args(config),
        router_keys=configured_router_keys(config),
        routers=args.subnet_routers_args(config),
        gateway=args.gateway_services_args(config),
        headplane=args.headplane_args(config),
        monitoring=args.monitoring_args(config),
        network_policies=network_args(config) if config.network_policy.enabled else None,
        outputs=site_output_args(config),
    )
