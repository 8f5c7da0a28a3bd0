"""NetworkPolicies of the control plane: the HTTP ports from the ingress data plane, metrics from monitoring.

Only ingress is restricted: Headscale must reach DERP maps and the OIDC issuer on the internet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.pod import labels, selector
from components.settings import NetworkPolicy


@dataclass(frozen=True, kw_only=True)
class ProtectedApp:
    """An application (pods selected by `app.kubernetes.io/name`) and the ports it is reached on."""

    app: str  # the app label; also the NetworkPolicy's name
    http_port: int  # the public HTTP port, reached from the ingress data plane
    metrics_port: int | None = None  # reached only from the monitoring namespace; None: no metrics rule
    also_from_apps: tuple[str, ...] = ()  # in-namespace clients of the HTTP port (Headplane → Headscale)
    public_udp_ports: tuple[int, ...] = ()  # reached straight from the internet (the embedded DERP's STUN)


def ingress_peers(settings: NetworkPolicy) -> list[dict[str, Any]]:
    """Sources of public traffic; empty means "any source" (then no `from` is rendered)."""
    namespaces = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
        for namespace in sorted(settings.ingress_namespaces)
    ]
    blocks = [{"ipBlock": {"cidr": cidr}} for cidr in sorted(settings.ingress_cidrs)]
    return namespaces + blocks


def policy_spec(app: ProtectedApp, settings: NetworkPolicy) -> dict[str, Any]:
    peers = ingress_peers(settings)
    http_rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": app.http_port}]}
    if peers:
        http_rule["from"] = peers + [{"podSelector": {"matchLabels": selector(other)}} for other in app.also_from_apps]
    rules = [http_rule]
    if app.metrics_port is not None:
        monitoring = {"kubernetes.io/metadata.name": settings.monitoring_namespace}
        rules.append(
            {
                "ports": [{"protocol": "TCP", "port": app.metrics_port}],
                "from": [{"namespaceSelector": {"matchLabels": monitoring}}],
            }
        )
    rules += [{"ports": [{"protocol": "UDP", "port": port}]} for port in app.public_udp_ports]
    return {"podSelector": {"matchLabels": selector(app.app)}, "policyTypes": ["Ingress"], "ingress": rules}


@dataclass(frozen=True, kw_only=True)
class NetworkPoliciesArgs:
    """The applications of one namespace to restrict, and who may reach them."""

    namespace: str  # where the applications run
    settings: NetworkPolicy  # the ingress sources (namespaces, CIDRs) and the monitoring namespace
    apps: tuple[ProtectedApp, ...]  # one NetworkPolicy each, in this order


class NetworkPolicies(pulumi.ComponentResource):
    """One NetworkPolicy per application.

    Outputs (also attributes): `policies` (`policy_names`), the NetworkPolicies' names; `count`. Attribute
    `policies`: the NetworkPolicy resources.
    """

    policies: list[k8s.networking.v1.NetworkPolicy]
    policy_names: list[str]

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:network:NetworkPolicies", name, None, opts)
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{app.app}",
                metadata={"name": app.app, "namespace": args.namespace, "labels": labels(app.app, "network-policy")},
                spec=policy_spec(app, args.settings),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for app in args.apps
        ]
        self.policy_names = [app.app for app in args.apps]
        self.register_outputs({"policies": self.policy_names, "count": len(self.policies)})
