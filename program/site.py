"""TailnetSite: one cluster's part of the tailnet control plane, and the stack's outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from headscale_ha.components import headscale as headscale_module
from headscale_ha.components.backup_volume import BackupVolume
from headscale_ha.components.endpoint import PublicEndpoint
from headscale_ha.components.gateway import GatewayServices, SubnetRouters, advertised_routes, router_key_secrets
from headscale_ha.components.gateway_config import rewrite_kubeconfig
from headscale_ha.components.headplane import Headplane
from headscale_ha.components.headscale import HeadscaleServer
from headscale_ha.components.migration import SqliteToPostgres
from headscale_ha.components.monitoring import StackMonitoring
from headscale_ha.components.network_policy import NetworkPolicies
from headscale_ha.components.pod import labels
from headscale_ha.components.postgres import PostgresDatabase
from headscale_ha.components.release import VERSION
from headscale_ha.components.settings import DatabaseStage, Role
from headscale_ha.components.tailnet_objects import TailnetObjects
from headscale_ha.components.tailnet_policy import POLICY_CONFIG_MAP, TailnetPolicy, live_policy
from headscale_ha.program.args import (
    backup_volume_args,
    gateway_endpoints,
    gateway_proxies,
    gateway_services_args,
    headplane_args,
    headscale_server_args,
    monitoring_args,
    next_steps,
    postgres_database_args,
    public_endpoint_args,
    routers_namespace,
    sqlite_to_postgres_args,
    subnet_routers_args,
    tailnet_objects_args,
    tailnet_policy_args,
)
from headscale_ha.program.availability import availability_output, availability_report
from headscale_ha.program.config import StackConfig
from headscale_ha.program.examples import warning as example_warning
from headscale_ha.program.failover import promotion_steps
from headscale_ha.program.inventory import must_back_up
from headscale_ha.program.network import network_args
from headscale_ha.program.recovery import recovery_model
from headscale_ha.program.standby import standby_gate


def namespace_labels() -> dict[str, str]:
    # Pod Security Admission: the control plane runs as non-root, read-only, without capabilities.
    return {
        **labels("headscale-ha", "namespace"),
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }


def gateway_namespace_labels() -> dict[str, str]:
    """The gateway services and userspace routers run restricted."""
    return {
        **labels("tailnet-gateway", "namespace"),
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }


def kernel_routers_namespace_labels() -> dict[str, str]:
    """Kernel-mode routers need NET_ADMIN as root, which only `privileged` admits; audit and warn keep saying so."""
    return {
        **labels("subnet-router", "namespace"),
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }


def endpoints(config: StackConfig) -> dict[str, Any]:
    """Where users, clients and in-cluster tools reach this site; pure, so tests and outputs agree."""
    host = config.tailnet.public_hostname
    result: dict[str, Any] = {
        "serverUrl": f"https://{host}",
        "apiUrl": f"http://{headscale_module.APP}.{config.namespace}.svc.cluster.local:{headscale_module.HTTP_PORT}",
        "site": config.site.name,
        "role": config.role.value,
        "dnsZone": config.dns_zone,
        "gatewayIp": config.site.gateway_ip,
        "activeSite": config.tailnet.active_site,
        "failover": config.endpoint.failover.value,
    }
    if config.headplane.enabled:
        result["adminUrl"] = f"https://{host}/admin"
    return result


def kubernetes_provider(name: str, config: StackConfig, opts: pulumi.ResourceOptions) -> k8s.Provider:
    """The one Kubernetes provider of the stack, from its first `pulumi up` (the ambient kubeconfig when none is set).

    - ``enableConfigMapMutable`` / ``enableSecretMutable``: a data change of a ConfigMap or Secret is an update in
      place. Without them pulumi-kubernetes replaces the object, and an object with a fixed name is deleted
      before it is created again (a retained one, such as ``headscale-identity``, cannot be replaced at all).
      The pods that read them roll by their checksum annotations.
    - ``clusterIdentifier``: the cluster is the site. pulumi-kubernetes replaces a provider (and with it every
      object of the stack) when the active cluster of its kubeconfig changes, which a rotated CA or a new API
      address also does; with an identifier it never does while the identifier stays the same.
    - A resource's provider never changes between runs: setting ``kubeconfig`` later updates this provider.
    """
    kubeconfig = pulumi.Output.secret(config.kubeconfig.get_secret_value()) if config.kubeconfig is not None else None
    return k8s.Provider(
        f"{name}-kubernetes",
        kubeconfig=kubeconfig,
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
        cluster_identifier=config.site.name,
        opts=opts,
    )


class TailnetSite(pulumi.ComponentResource):
    """Wires the components of one cluster; everything it creates is a child of it."""

    namespace: k8s.core.v1.Namespace
    headscale: HeadscaleServer
    headplane: Headplane | None
    policy: TailnetPolicy
    database: PostgresDatabase | None
    objects: TailnetObjects | None
    outputs: dict[str, Any]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:site:TailnetSite", name, None, opts)
        examples = example_warning(config)
        if examples is not None:
            pulumi.log.warn(examples, resource=self)
        # A standby must be able to take over: same release, a stage that follows, the same identity. The check
        # is a gate: the provider, so every resource of the stack, waits for it, and a mismatch fails the run
        # before any step, naming every difference (program/standby.py).
        gate = standby_gate(name, config, pulumi.ResourceOptions(parent=self)) if config.role is Role.STANDBY else None
        provider = kubernetes_provider(
            name, config, pulumi.ResourceOptions(parent=self, depends_on=[gate.opens] if gate is not None else None)
        )
        child = pulumi.ResourceOptions(parent=self, provider=provider)

        # Namespaces that hold state are retained: deleting one would delete the claims, the identity Secret and
        # the routers' node state inside it, whatever their own options say.
        keep = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True))
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata={"name": config.namespace, "labels": namespace_labels()}, opts=keep
        )
        in_namespace = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace]))
        if config.backup.nfs is not None:
            backup_volume = BackupVolume(
                f"{name}-backup",
                backup_volume_args(config),
                opts=in_namespace,
            )
            in_namespace = pulumi.ResourceOptions.merge(
                in_namespace, pulumi.ResourceOptions(depends_on=[backup_volume])
            )
        self.database = None
        if config.database.stage is not DatabaseStage.SQLITE:
            self.database = PostgresDatabase(
                f"{name}-database",
                postgres_database_args(config),
                opts=in_namespace,
            )
        # Before the server: in file mode its pod mounts the policy ConfigMap and waits for it.
        policy_args = tailnet_policy_args(config)
        self.policy = TailnetPolicy(f"{name}-policy", policy_args, opts=in_namespace)
        self.headscale = HeadscaleServer(
            f"{name}-headscale",
            headscale_server_args(config, policy_published_by=self.policy.config_map),
            opts=in_namespace,
        )
        # Headscale's API answers at the public URL once the server rolled out and the route exists: everything the
        # provider does over the API depends on both, so `up` creates it after them and `destroy` deletes it first.
        endpoint = PublicEndpoint(f"{name}-endpoint", public_endpoint_args(config), opts=in_namespace)
        serving = [self.headscale.deployment, endpoint]
        # After the server: the provider compares with (or in `apply` writes) the policy of the server rolled out.
        live_policy(self.policy, policy_args, after=serving, parent=self)
        if config.database.stage is DatabaseStage.MIGRATING and self.database is not None:
            # Awaited by Pulumi: the stage is done when the Job succeeded; Headscale stays at 0 until then.
            SqliteToPostgres(
                f"{name}-migration",
                sqlite_to_postgres_args(config),
                opts=pulumi.ResourceOptions.merge(
                    in_namespace,
                    pulumi.ResourceOptions(depends_on=[self.database.cluster, self.headscale.deployment]),
                ),
            )
        self.headplane = None
        gateway_namespace = k8s.core.v1.Namespace(
            f"{name}-gateway-namespace",
            metadata={"name": config.gateway.namespace, "labels": gateway_namespace_labels()},
            opts=keep,
        )
        in_gateway = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[gateway_namespace]))
        router_namespace = routers_namespace(config)
        in_routers = in_gateway
        if router_namespace != config.gateway.namespace:
            kernel_namespace = k8s.core.v1.Namespace(
                f"{name}-routers-namespace",
                metadata={"name": router_namespace, "labels": kernel_routers_namespace_labels()},
                opts=keep,
            )
            in_routers = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[kernel_namespace]))
        self.objects = None
        router_keys: list[k8s.core.v1.Secret] = []
        if config.bootstrap_api_key is not None:
            self.objects = TailnetObjects(
                f"{name}-tailnet",
                tailnet_objects_args(config),
                opts=pulumi.ResourceOptions.merge(
                    pulumi.ResourceOptions.merge(in_namespace, in_routers), pulumi.ResourceOptions(depends_on=serving)
                ),
            )
            router_keys = self.objects.router_key_secrets
        elif config.router_auth_keys is not None:
            # The user's keys, one per ordinal. Whether each is single-use cannot be checked without API access:
            # config's description and the README ask for single-use keys (an accepted risk).
            router_keys = router_key_secrets(
                f"{name}-router-key",
                router_namespace,
                [key.get_secret_value() for key in config.router_auth_keys],
                in_routers,
            )
        # The routers read their key when they start: they start after it exists (see SubnetRouters for how a
        # key that arrives later reaches routers that started without one).
        SubnetRouters(f"{name}-routers", subnet_routers_args(config, key_secrets=router_keys), opts=in_routers)
        GatewayServices(f"{name}-gateway", gateway_services_args(config), opts=in_gateway)
        if config.headplane.enabled:
            self.headplane = Headplane(
                f"{name}-headplane",
                headplane_args(
                    config,
                    headscale_url=self.headscale.api_url,
                    api_key=self.objects.headplane_api_key if self.objects else None,
                    backup_key=self.headscale.backup_key,
                ),
                opts=in_namespace,
            )
        if config.monitoring.enabled:
            StackMonitoring(
                f"{name}-monitoring",
                monitoring_args(config, key_expiries=self.objects.key_expiries if self.objects else ()),
                opts=pulumi.ResourceOptions.merge(in_namespace, in_gateway),
            )
        if config.network_policy.enabled:
            # Default-deny and the allows of every namespace the stack owns (the kernel routers' one included).
            in_all = pulumi.ResourceOptions.merge(pulumi.ResourceOptions.merge(in_namespace, in_gateway), in_routers)
            NetworkPolicies(f"{name}-network", network_args(config), opts=in_all)
        recovery = recovery_model(
            config,
            {
                "headscale": self.headscale.recovery_facts,
                **({"headplane": self.headplane.recovery_facts} if self.headplane is not None else {}),
            },
        )
        self.outputs = {
            "namespace": self.namespace.metadata.apply(lambda metadata: metadata.name),
            "endpoints": endpoints(config),
            "release": VERSION,
            "headscaleVersion": config.headscale.version,
            "databaseStage": config.database.stage.value,
            # The tailnet identity this site serves with (the identity stack's, or of the keys imported here).
            "identityFingerprint": self.headscale.identity_fingerprint,
            # With the fingerprint, what the backup key is derived from: a standby must verify what the active signs.
            "backupKeyEpoch": config.backup.auth.key_epoch,
            "mustBackUp": must_back_up(config),
            # RTO and RPO per failure, from the pods rendered here, bench/measured and the `recovery` config.
            "recovery": recovery,
            # What the configuration promises, in short; the whole report is docs/availability/<stack>.md.
            "availability": availability_output(name, availability_report(config, recovery)),
            "failover": promotion_steps(config),
            "gateway": {
                "ip": config.site.gateway_ip,
                "dnsZone": config.dns_zone,
                "endpoints": gateway_endpoints(config),
                "routes": advertised_routes(config.site),
                "namespace": config.gateway.namespace,
                "routersNamespace": router_namespace,
            },
            **({} if config.bootstrap_api_key is not None else {"nextSteps": next_steps(config)}),
            "policy": {
                "mode": config.policy.mode.value,
                "sha256": self.policy.rendered.sha256,
                "configMap": f"{config.namespace}/{POLICY_CONFIG_MAP}",
                # False: a Headscale starting without a stored policy allows everything (see policy.mode).
                "enforcedFromStart": self.policy.enforced_from_start,
                # Findings in a policy Headscale accepts (the plan prints them), and the policy's tests that only
                # the live server can decide.
                "lints": [str(lint) for lint in self.policy.rendered.lints],
                "testsCheckedAtApply": [
                    outcome.path
                    for outcome in self.policy.rendered.test_outcomes
                    if outcome.verdict == "checked at apply"
                ],
            },
        }
        if config.kubeconfig is not None:
            api_port = next((proxy.port for proxy in gateway_proxies(config) if proxy.name == "kube-api"), 6443)
            self.outputs["kubeconfig"] = pulumi.Output.secret(
                rewrite_kubeconfig(
                    config.kubeconfig.get_secret_value(), gateway_ip=config.site.gateway_ip, port=api_port
                )
            )
        if gate is not None:
            self.outputs["follows"] = gate.follows
        self.register_outputs(self.outputs)
