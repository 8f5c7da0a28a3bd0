"""NetworkPolicies: every owned namespace default-deny for ingress and for egress, then one policy per workload
that admits exactly its clients on exactly its ports (`Protected`), and one that lets it reach exactly what it
needs (`Confined`).

A default-deny policy (empty `podSelector`) isolates every pod of its namespace, including pods the program does not
render (CNPG instances and Jobs, VolSync movers): each of those needs its own allows. The allows are a union on top.
Replies to an admitted connection pass whatever the egress rules say (connections are tracked), so only the side
that opens a connection needs a rule. Kubelet probes come from the node and are admitted by the common CNIs whatever
the policies say (Calico, Cilium with its default `allow-localhost`, Antrea, kube-router), so probe ports get no
rule. Volumes are mounted by the kubelet on the node (an `nfs` PersistentVolume, a CSI node plugin on the host
network), outside the pod's network: no egress rule opens or closes a mount.

Where CNIs differ for egress: a destination reached through a Service is matched after the Service's DNAT (the
endpoint's address and port, not the ClusterIP); Cilium matches an `ipBlock` against addresses outside the cluster
only (a pod or a node, such as the API server's, needs a selector or `policyCIDRMatchMode: nodes`), Calico against
any address, pods included. So egress to pods is written with selectors, and ipBlocks are kept for what is no pod.

The specs are data in the API's terms (``podSelector``, ``ipBlock``): the program and the tests' NetworkPolicy model
(tests/models/netpol) reason about them as the cluster does. The resource takes each through the SDK's own tables
(components.api_spelling.python_spelled) as its typed ``NetworkPolicySpecArgsDict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.networking.v1 import NetworkPolicySpecArgs

from headscale_ha.components.api_spelling import python_spelled
from headscale_ha.components.pod import labels
from headscale_ha.components.settings import NetworkPolicySettings

NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server
DEFAULT_DENY = "default-deny-ingress"
DEFAULT_DENY_EGRESS = "default-deny-egress"
EGRESS_SUFFIX = "-egress"  # `<workload>-egress`: the policy that says where a workload's pods may connect to
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


def ingress_peers(settings: NetworkPolicySettings) -> list[dict[str, Any]]:
    """Sources of public HTTP traffic (the ingress data plane); empty means "any source"."""
    namespaces = [from_namespace(namespace) for namespace in sorted(settings.ingress_namespaces)]
    return namespaces + [from_cidr(cidr) for cidr in sorted(settings.ingress_cidrs)]


@dataclass(frozen=True)
class Port:
    """A destination port (the container port, not a Service port: policies see the address after the DNAT).

    `port=None` is every port of the protocol, on purpose: a tailnet peer's WireGuard port is anyone's guess.
    """

    port: int | None
    protocol: str = "TCP"

    def __post_init__(self) -> None:
        if (self.port is not None and not 1 <= self.port <= 65535) or self.protocol not in PROTOCOLS:
            raise ValueError(f"port {self.port}/{self.protocol}: expected 1-65535 and one of {PROTOCOLS}")

    def entry(self) -> dict[str, Any]:
        """The NetworkPolicyPort: without `port`, every port of the protocol."""
        return {"protocol": self.protocol} | ({"port": self.port} if self.port is not None else {})


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
        rule: dict[str, Any] = {"ports": [p.entry() for p in self.ports]}
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


@dataclass(frozen=True, kw_only=True)
class Reach:
    """Some destinations on some ports: one egress rule of a confined workload."""

    ports: tuple[Port, ...]  # never empty: a rule without ports would reach every port
    destinations: tuple[Mapping[str, Any], ...]  # NetworkPolicyPeers; never empty: an empty `to` reaches everywhere
    why: str  # what the workload does there; rendered nowhere, read by people and tests

    def __post_init__(self) -> None:
        if not self.ports:
            raise ValueError(f"reach '{self.why}': no ports (an empty list would reach every port)")
        if not self.destinations:
            raise ValueError(f"reach '{self.why}': no destinations (an empty `to` would reach every address)")

    def rule(self) -> dict[str, Any]:
        return {"ports": [p.entry() for p in self.ports], "to": [dict(d) for d in self.destinations]}


@dataclass(frozen=True, kw_only=True)
class Confined:
    """Pods (by labels) and where they may connect to; one NetworkPolicy named `<name>-egress`."""

    name: str  # the workload; the policy is `<name>-egress` (its app label too)
    pods: Mapping[str, str]  # matchLabels of the confined pods; never empty (that is the default-deny's job)
    reaches: tuple[Reach, ...]  # never empty: a workload that reaches nothing needs no policy beyond the default-deny

    def __post_init__(self) -> None:
        if not self.pods:
            raise ValueError(f"egress of '{self.name}': an empty pod selector would open the whole namespace")
        if not self.reaches:
            raise ValueError(f"egress of '{self.name}': nothing to reach; the default-deny already says so")

    @property
    def policy_name(self) -> str:
        return f"{self.name}{EGRESS_SUFFIX}"

    def spec(self) -> dict[str, Any]:
        return {
            "podSelector": {"matchLabels": dict(self.pods)},
            "policyTypes": ["Egress"],
            "egress": [reach.rule() for reach in self.reaches],
        }


def default_deny_spec() -> dict[str, Any]:
    """Every pod of the namespace isolated for ingress; nothing admitted unless another policy says so."""
    return {"podSelector": {}, "policyTypes": ["Ingress"]}


def default_deny_egress_spec() -> dict[str, Any]:
    """Every pod of the namespace isolated for egress; it opens no connection unless another policy says so."""
    return {"podSelector": {}, "policyTypes": ["Egress"]}


@dataclass(frozen=True, kw_only=True)
class NamespacePolicies:
    """One namespace: default-deny ingress (and egress with `egress`), plus its protected and confined workloads."""

    namespace: str
    protected: tuple[Protected, ...] = ()
    egress: bool = False  # default-deny egress too; the confined workloads say what each pod may reach
    confined: tuple[Confined, ...] = ()

    def __post_init__(self) -> None:
        if self.confined and not self.egress:
            raise ValueError(
                f"namespace {self.namespace}: confined workloads without default-deny egress would isolate only "
                "them, leaving every other pod of the namespace open"
            )

    def specs(self) -> dict[str, dict[str, Any]]:
        """NetworkPolicy name -> spec, the default-denies first."""
        specs = {DEFAULT_DENY: default_deny_spec()}
        if self.egress:
            specs[DEFAULT_DENY_EGRESS] = default_deny_egress_spec()
        named = [(item.name, item.spec()) for item in self.protected]
        named += [(item.policy_name, item.spec()) for item in self.confined]
        for name, spec in named:
            if name in specs:
                raise ValueError(f"namespace {self.namespace}: two NetworkPolicies named '{name}'")
            specs[name] = spec
        return specs


@dataclass(frozen=True, kw_only=True)
class NetworkPoliciesArgs:
    """The namespaces to make default-deny and what to admit in (and let out of) each."""

    namespaces: tuple[NamespacePolicies, ...]


class NetworkPolicies(pulumi.ComponentResource):
    """Default-deny ingress (and egress) in every given namespace, plus one NetworkPolicy per protected workload
    and one per confined workload.

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
                        # Data in the API's terms (what the netpol model reads), typed where the SDK takes it.
                        spec=python_spelled(spec, NetworkPolicySpecArgs),
                        opts=pulumi.ResourceOptions(parent=self),
                    )
                )
                self.policy_names.append(f"{item.namespace}/{policy}")
        self.register_outputs({"policies": self.policy_names, "count": len(self.policies)})
