"""TailnetSite: one cluster's part of the tailnet control plane, and the stack's outputs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import StackConfig

PART_OF = "headscale-ha"


def common_labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def namespace_labels() -> dict[str, str]:
    # Pod Security Admission: the control plane runs as non-root, read-only, without capabilities.
    return {
        **common_labels("namespace"),
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }


def endpoints(config: StackConfig) -> dict[str, Any]:
    """Where users and clients reach this site; pure, so tests and outputs agree."""
    host = config.tailnet.public_hostname
    result: dict[str, Any] = {
        "serverUrl": f"https://{host}",
        "site": config.site.name,
        "role": config.role.value,
        "dnsZone": config.dns_zone,
        "gatewayIp": config.site.gateway_ip,
    }
    if config.headplane.enabled:
        result["adminUrl"] = f"https://{host}/admin"
    return result


class TailnetSite(pulumi.ComponentResource):
    """Wires the components of one cluster; everything it creates is a child of it."""

    namespace: k8s.core.v1.Namespace
    outputs: dict[str, Any]

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:site:TailnetSite", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if config.kubeconfig is not None:
            provider = k8s.Provider(
                f"{name}-kubernetes",
                kubeconfig=pulumi.Output.secret(config.kubeconfig.get_secret_value()),
                opts=child,
            )
            child = pulumi.ResourceOptions(parent=self, provider=provider)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=config.namespace, labels=namespace_labels()),
            opts=child,
        )
        self.outputs = {
            "namespace": self.namespace.metadata.apply(lambda metadata: metadata.name),
            "endpoints": endpoints(config),
            "headscaleVersion": config.headscale.version,
            "databaseStage": config.database.stage.value,
        }
        self.register_outputs(self.outputs)
