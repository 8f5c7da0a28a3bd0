"""NetworkPolicies: every namespace default-deny for ingress, then one policy per protected workload that admits
exactly its clients on exactly its ports.

Only ingress is restricted: Headscale must reach DERP maps and the OIDC issuer on the internet, the routers the
control server and their peers, CloudNativePG the object store. A default-deny policy (empty `podSelector`,
`policyTypes: [Ingress]`) isolates every pod of its namespace, including pods the program does not render (CNPG
instances and Jobs, VolSync movers); the allows are a union on top of it. Kubelet probes come from the node and
are admitted by the common CNIs whatever the policies say (Calico, Cilium with its default `allow-localhost`,
Antrea, kube-router), so probe ports get no rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.pod import labels
from components.settings import NetworkPolicy

NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server
DEFAULT_DENY = "default-deny-ingress"
PROTOCOLS = ("TCP", "UDP", "SCTP")


def from_pods(pod_labels: Mapping[str, str], namespace: str | None = None) -> dict[str, Any]:
    """Pods with these labels: of the policy's own namespace, or (`namespace`) of that one."""
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(pod_labels)}}
    if namespace is not None:
        peer["namespaceSelector"] = {"matchLabels": {NAME_LABEL: namespace}}
    return peer


def from_namespace(namespace: str) -> dict[str, Any]:
    """Every pod of one namespace."""
    return {"namespaceSelector": {"matchLabels": {NAME_LABEL: namespace}}}


def from_cidr(cidr: str) -> dict[str, Any]:
    """Addresses that are no pod's: clients outside the cluster, forwarded tailnet addresses, proxies on nodes."""
    return {"ipBlock": {"cidr": cidr}}


def ingress_peers(settings: NetworkPolicy) -> list[dict[str, Any]]:
    """Sources of public HTTP traffic (the ingress data plane); empty means "any source"."""
    namespaces = [from_namespace(namespace) for namespace in sorted(settings.ingress_namespaces)]
    return namespaces + [from_cidr(cidr) for cidr in sorted(settings.ingress_cidrs)]


@dataclass(frozen=True)
class Port:
    """A destination port of the protected pods (the container port, not a Service port)."""

    port: int
    protocol: str = "TCP"

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535 or self.protocol not in PROTOCOLS:
            raise ValueError(f"port {self.port}/{self.protocol}: expected 1-65535 and one of {PROTOCOLS}")


@dataclass(frozen=True, kw_only=True)
class Allow:
    """Some ports of the protected pods, from some sources."""

    ports: tuple[Port, ...]  # never empty: a rule without ports would admit every port
    sources: tuple[Mapping[str, Any], ...] | None  # NetworkPolicyPeers; None: any source, on purpose
    why: str  # who these clients are; rendered nowhere, read by people and tests

    def __post_init__(self) -> None:
        if not self.ports:
            raise ValueError(f"allow '{self.why}': no ports (an empty list would admit every port)")
        if self.sources is not None and not self.sources:
            raise ValueError(f"allow '{self.why}': empty sources (an empty `from` would admit every source)")

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"ports": [{"protocol": p.protocol, "port": p.port} for p in self.ports]}
        if self.sources is not None:
            rule["from"] = [dict(source) for source in self.sources]
        return rule


@dataclass(frozen=True, kw_only=True)
class Protected:
    """Pods (by labels) and who may reach them; one NetworkPolicy named `name`."""

    name: str  # the NetworkPolicy's name (also its app label)
    pods: Mapping[str, str]  # matchLabels of the protected pods; never empty (that is the default-deny's job)
    allows: tuple[Allow, ...]

    def __post_init__(self) -> None:
        if not self.pods:
            raise ValueError(f"policy '{self.name}': an empty pod selector would open the whole namespace")

    def spec(self) -> dict[str, Any]:
        return {
            "podSelector": {"matchLabels": dict(self.pods)},
            "policyTypes": ["Ingress"],
            "ingress": [allow.rule() for allow in self.allows],
        }


def default_deny_spec() -> dict[str, Any]:
    """Every pod of the namespace isolated for ingress; nothing admitted unless another policy says so."""
    return {"podSelector": {}, "policyTypes": ["Ingress"]}


@dataclass(frozen=True, kw_only=True)
class NamespacePolicies:
    """One namespace: default-deny, plus the protected workloads in it."""

    namespace: str
    protected: tuple[Protected, ...] = ()

    def specs(self) -> dict[str, dict[str, Any]]:
        """NetworkPolicy name -> spec, the default-deny first."""
        specs = {DEFAULT_DENY: default_deny_spec()}
        for item in self.protected:
            if item.name in specs:
                raise ValueError(f"namespace {self.namespace}: two NetworkPolicies named '{item.name}'")
            specs[item.name] = item.spec()
        return specs


@dataclass(frozen=True, kw_only=True)
class NetworkPoliciesArgs:
    """The namespaces to make default-deny and what to admit in each."""

    namespaces: tuple[NamespacePolicies, ...]


class NetworkPolicies(pulumi.ComponentResource):
    """Default-deny ingress in every given namespace, plus one NetworkPolicy per protected workload.

    Outputs (also attributes): `policies` (`policy_names`), `<namespace>/<name>` of every NetworkPolicy; `count`.
    Attribute `policies`: the NetworkPolicy resources.
    """

    policies: list[k8s.networking.v1.NetworkPolicy]
    policy_names: list[str]

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:network:NetworkPolicies", name, None, opts)
        self.policies, self.policy_names = [], []
        for item in args.namespaces:
            for policy, spec in item.specs().items():
                self.policies.append(
                    k8s.networking.v1.NetworkPolicy(
                        f"{name}-{item.namespace}-{policy}",
                        metadata={
                            "name": policy,
                            "namespace": item.namespace,
                            "labels": labels(policy, "network-policy"),
                        },
                        spec=spec,
                        opts=pulumi.ResourceOptions(parent=self),
                    )
                )
                self.policy_names.append(f"{item.namespace}/{policy}")
        self.register_outputs({"policies": self.policy_names, "count": len(self.policies)})
