"""TailnetSite: one cluster's part of the tailnet control plane, and the stack's outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import headplane as headplane_module
from components import headscale as headscale_module
from components.backup_volume import BackupVolume
from components.endpoint import PublicEndpoint
from components.gateway import GatewayServices, SubnetRouters, advertised_routes
from components.gateway_config import rewrite_kubeconfig
from components.headplane import Headplane
from components.headscale import HeadscaleServer
from components.headscale_config import STUN_PORT
from components.migration import SqliteToPostgres
from components.network_policy import NetworkPolicies, ProtectedApp
from components.pod import labels
from components.postgres import PostgresDatabase
from components.settings import DatabaseStage, Role
from components.tailnet_objects import ROUTER_KEY_SECRET, TailnetObjects
from components.tailnet_policy import CONFIG_MAP, TailnetPolicy
from program.args import (
    backup_volume_args,
    gateway_endpoints,
    gateway_proxies,
    gateway_services_args,
    headplane_args,
    headscale_server_args,
    network_policies_args,
    next_steps,
    postgres_database_args,
    public_endpoint_args,
    routers_namespace,
    sqlite_to_postgres_args,
    subnet_routers_args,
    tailnet_objects_args,
    tailnet_policy_args,
)
from program.config import StackConfig
from program.failover import promotion_steps
from program.inventory import must_back_up


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
        child = pulumi.ResourceOptions(parent=self)
        if config.kubeconfig is not None:
            provider = k8s.Provider(
                f"{name}-kubernetes", kubeconfig=pulumi.Output.secret(config.kubeconfig.get_secret_value()), opts=child
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
        self.headscale = HeadscaleServer(f"{name}-headscale", headscale_server_args(config), opts=in_namespace)
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
        apps = [
            ProtectedApp(
                app=headscale_module.APP,
                http_port=headscale_module.HTTP_PORT,
                metrics_port=headscale_module.METRICS_PORT,
                also_from_apps=(headplane_module.APP,) if config.headplane.enabled else (),
                public_udp_ports=(STUN_PORT,) if config.headscale.derp.embedded else (),
            )
        ]
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
        router_key: k8s.core.v1.Secret | None = None
        if config.bootstrap_api_key is not None:
            self.objects = TailnetObjects(
                f"{name}-tailnet",
                tailnet_objects_args(config),
                opts=pulumi.ResourceOptions.merge(in_namespace, in_routers),
            )
            router_key = self.objects.router_key_secret
        elif config.router_auth_key is not None:
            router_key = k8s.core.v1.Secret(
                f"{name}-router-key",
                metadata={
                    "name": ROUTER_KEY_SECRET,
                    "namespace": router_namespace,
                    "labels": labels("subnet-router", "auth"),
                },
                type="Opaque",
                string_data={"authkey": pulumi.Output.secret(config.router_auth_key.get_secret_value())},
                opts=in_routers,
            )
        # The routers read their key when they start: they start after it exists (see SubnetRouters for how a
        # key that arrives later reaches routers that started without one).
        SubnetRouters(f"{name}-routers", subnet_routers_args(config, key_secret=router_key), opts=in_routers)
        GatewayServices(f"{name}-gateway", gateway_services_args(config), opts=in_gateway)
        if config.headplane.enabled:
            self.headplane = Headplane(
                f"{name}-headplane",
                headplane_args(
                    config,
                    headscale_url=self.headscale.api_url,
                    api_key=self.objects.headplane_api_key if self.objects else None,
                ),
                opts=in_namespace,
            )
            apps.append(ProtectedApp(app=headplane_module.APP, http_port=headplane_module.PORT))
        PublicEndpoint(f"{name}-endpoint", public_endpoint_args(config), opts=in_namespace)
        self.policy = TailnetPolicy(f"{name}-policy", tailnet_policy_args(config), opts=in_namespace)
        if config.network_policy.enabled:
            NetworkPolicies(f"{name}-network", network_policies_args(config, apps), opts=in_namespace)
        self.outputs = {
            "namespace": self.namespace.metadata.apply(lambda metadata: metadata.name),
            "endpoints": endpoints(config),
            "headscaleVersion": config.headscale.version,
            "databaseStage": config.database.stage.value,
            "mustBackUp": must_back_up(config),
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
                "configMap": f"{config.namespace}/{CONFIG_MAP}",
            },
        }
        if config.role is Role.ACTIVE:
            # What a standby reads through its StackReference: one identity for the whole pair.
            self.outputs["identity"] = pulumi.Output.secret(
                {"noisePrivateKey": self.headscale.noise_key, "derpPrivateKey": self.headscale.derp_key}
            )
        if config.kubeconfig is not None:
            api_port = next((proxy.port for proxy in gateway_proxies(config) if proxy.name == "kube-api"), 6443)
            self.outputs["kubeconfig"] = pulumi.Output.secret(
                rewrite_kubeconfig(
                    config.kubeconfig.get_secret_value(), gateway_ip=config.site.gateway_ip, port=api_port
                )
            )
        self.register_outputs(self.outputs)
