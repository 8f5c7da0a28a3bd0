"""A small evaluator of Kubernetes NetworkPolicy semantics, ingress and egress, to prove rendered policies allow
what they mean.

Pure: given NetworkPolicy objects (as rendered), the namespaces with their labels, a source (a pod, or an address
from outside any pod) and a destination (a pod, or an address that is no pod's: the API server, the metadata
service, an internet host), port and protocol, say whether a connection is allowed out of the source, admitted into
the destination, or both (`connects`).

The semantics (networking.k8s.io/v1):
- a pod is isolated for a direction only when some policy of its namespace selects it (`podSelector`) and has that
  direction among its `policyTypes` (absent `policyTypes`: Ingress always, Egress when the policy has `egress`);
- an isolated pod allows a connection in that direction when at least one rule of one selecting policy does (a
  union); the other side's own policies are a separate question (`connects` asks both);
- a rule allows when one of its `ports` matches (none listed: every port) and one of its peers (`from` for ingress,
  `to` for egress) matches (none listed: every peer);
- a port matches by protocol (default TCP) and number, a range `port`..`endPort`, or a named container port of
  the destination pod; a port entry without `port` matches every port of its protocol; an address that is no pod
  has no named ports;
- peers: `podSelector` alone selects pods of the policy's namespace; `namespaceSelector` alone every pod of the
  matching namespaces; both together the matching pods of the matching namespaces; `ipBlock` an address in `cidr`
  and in none of `except`;
- namespaces carry `kubernetes.io/metadata.name` (the API server sets it); it is added here too.

Only the opening of a connection is modelled: replies to an allowed connection pass in every CNI (connections are
tracked). A connection through a Service is asked about its endpoint (the pod, or the API server's address), as
policies see it after the Service's DNAT.

Where CNIs differ, the evaluator takes the more permissive reading by default, so a denial it reports holds on
every CNI: an `ipBlock` is matched against a pod's own IP when the pod has one (Calico does; Cilium matches ipBlocks
only against addresses outside the cluster). `ip_blocks_select_pods=False` takes Cilium's reading instead: an
allowance that holds under it does not depend on an ipBlock matching a pod. Traffic from the node itself (kubelet
probes) is not modelled: most CNIs (Calico, Cilium with its default `allow-localhost`, Antrea, kube-router) always
admit it; nor are volume mounts (the kubelet mounts an NFS volume on the node, outside every pod's network).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.wiring.selectors import expression_holds
from tools.wiring.vocabulary import CNPG_ROLES, VOLSYNC_MOVER_LABELS, cnpg_instance_labels

NAME_LABEL = "kubernetes.io/metadata.name"
PROTOCOLS = ("TCP", "UDP", "SCTP")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class PolicyError(ValueError):
    """A policy the API server would refuse (so no answer about it means anything)."""


@dataclass(frozen=True, kw_only=True)
class Pod:
    """A pod as policies see it: its namespace, labels, IP (optional) and named container ports."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str | None = None
    named_ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)  # name -> (number, protocol)
    name: str = ""  # for messages only


@dataclass(frozen=True, kw_only=True)
class External:
    """A source outside every pod (a client on the internet, a forwarded tailnet address, a node's SNAT)."""

    ip: str


Source = Pod | External
Destination = Pod | External


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: every matchLabels pair and every expression must hold; `{}` matches all.

    Strict on purpose, unlike the wiring check's `tools.wiring.selectors.selector_matches` (which reads rendered
    objects and leaves a malformed selector to the schema check): a selector the API server refuses (an unknown
    field or operator, values where an operator takes none or none where it needs them) raises PolicyError, as no
    answer about a policy that cannot exist means anything. Both read an expression with `expression_holds`.
    """
    if selector is None:
        return True
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise PolicyError(f"label selector with unknown fields {sorted(unknown)}")
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_holds(expression, labels) for expression in selector.get("matchExpressions") or [])


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One matchExpressions entry, refused as the API server refuses it (values with In and NotIn only)."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator in ("In", "NotIn") and not values:
        raise PolicyError(f"matchExpressions {key} {operator} needs values")
    if operator in ("Exists", "DoesNotExist") and values:
        raise PolicyError(f"matchExpressions {key} {operator} takes no values")
    holds = expression_holds(operator, key, values, labels)
    if holds is None:
        raise PolicyError(f"matchExpressions operator {operator!r} is not In, NotIn, Exists or DoesNotExist")
    return holds


def _namespace_labels(namespaces: Mapping[str, Mapping[str, str]], name: str) -> dict[str, str]:
    return {**namespaces.get(name, {}), NAME_LABEL: name}


def _block(block: Mapping[str, Any]) -> tuple[Network, list[Network]]:
    """An ipBlock's network and excepts, refused as the API server refuses them (an except outside the cidr)."""
    network = ipaddress.ip_network(block["cidr"], strict=False)
    excepts = [ipaddress.ip_network(item, strict=False) for item in block.get("except") or []]
    for excluded in excepts:
        if excluded.version != network.version or not excluded.subnet_of(network):  # type: ignore[arg-type]
            raise PolicyError(f"ipBlock except {excluded} is not inside cidr {network}")
    return network, excepts


def _in_block(address: str, block: Mapping[str, Any]) -> bool:
    network, excepts = _block(block)
    ip = ipaddress.ip_address(address)
    if ip.version != network.version or ip not in network:
        return False
    return not any(ip.version == excluded.version and ip in excluded for excluded in excepts)


def peer_matches(
    peer: Mapping[str, Any],
    policy_namespace: str,
    namespaces: Mapping[str, Mapping[str, str]],
    other: Source,
    *,
    ip_blocks_select_pods: bool = True,
) -> bool:
    """One `from` (or `to`) entry against the other side of the connection."""
    fields = set(peer)
    if not fields or fields - {"podSelector", "namespaceSelector", "ipBlock"}:
        raise PolicyError(f"peer {dict(peer)} must set podSelector, namespaceSelector or ipBlock (and nothing else)")
    if "ipBlock" in fields:
        if fields != {"ipBlock"}:
            raise PolicyError("a peer with ipBlock may not also set podSelector or namespaceSelector")
        if isinstance(other, Pod) and not ip_blocks_select_pods:
            _block(peer["ipBlock"])  # still refused when invalid
            return False
        address = other.ip
        return address is not None and _in_block(address, peer["ipBlock"])
    if not isinstance(other, Pod):
        return False  # selectors select pods only
    if "namespaceSelector" in fields:
        if not selector_matches(peer["namespaceSelector"], _namespace_labels(namespaces, other.namespace)):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selector_matches(peer.get("podSelector"), other.labels)


def port_matches(entry: Mapping[str, Any], destination: Destination, port: int, protocol: str) -> bool:
    """One `ports` entry against the destination port (number and protocol)."""
    wanted = entry.get("protocol", "TCP")
    if wanted not in PROTOCOLS:
        raise PolicyError(f"protocol {wanted!r} is not one of {PROTOCOLS}")
    if wanted != protocol:
        return False
    number = entry.get("port")
    end = entry.get("endPort")
    if number is None:
        if end is not None:
            raise PolicyError("endPort needs port")
        return True
    if isinstance(number, str):
        if end is not None:
            raise PolicyError(f"endPort cannot follow the named port {number!r}")
        named = destination.named_ports.get(number) if isinstance(destination, Pod) else None
        return named is not None and named == (port, protocol)
    if end is not None:
        if end < number:
            raise PolicyError(f"endPort {end} is below port {number}")
        return number <= port <= end
    return bool(number == port)


@dataclass(frozen=True)
class _Connection:
    """What one rule is asked about: who connects where, and which side's policy holds the rule."""

    namespaces: Mapping[str, Mapping[str, str]]
    other: Source  # the peer the rule's `from`/`to` must match: the source for ingress, the destination for egress
    destination: Destination
    port: int
    protocol: str
    ip_blocks_select_pods: bool


def rule_admits(rule: Mapping[str, Any], policy_namespace: str, peers_key: str, connection: _Connection) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(
        port_matches(entry, connection.destination, connection.port, connection.protocol) for entry in ports
    ):
        return False
    peers = rule.get(peers_key) or []
    return not peers or any(
        peer_matches(
            peer,
            policy_namespace,
            connection.namespaces,
            connection.other,
            ip_blocks_select_pods=connection.ip_blocks_select_pods,
        )
        for peer in peers
    )


def _isolates(policy: Mapping[str, Any], direction: str) -> bool:
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    if types is None:
        # Ingress is implied; Egress only when the policy has egress rules.
        return direction == "Ingress" or "egress" in spec
    unknown = set(types) - {"Ingress", "Egress"}
    if unknown:
        raise PolicyError(f"policyTypes {sorted(unknown)} are not Ingress or Egress")
    return direction in types


def selecting_policies(
    policies: Iterable[Mapping[str, Any]], pod: Pod, direction: str = "Ingress"
) -> list[Mapping[str, Any]]:
    """The NetworkPolicies that isolate the pod for `direction` (Ingress or Egress)."""
    return [
        policy
        for policy in policies
        if policy.get("kind", "NetworkPolicy") == "NetworkPolicy"
        and policy["metadata"].get("namespace") == pod.namespace
        and _isolates(policy, direction)
        and selector_matches((policy.get("spec") or {}).get("podSelector", {}), pod.labels)
    ]


def _allowed(policies: Sequence[Mapping[str, Any]], pod: Pod, direction: str, connection: _Connection) -> bool:
    if connection.protocol not in PROTOCOLS:
        raise PolicyError(f"protocol {connection.protocol!r} is not one of {PROTOCOLS}")
    selecting = selecting_policies(policies, pod, direction)
    if not selecting:
        return True  # not isolated for this direction
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    return any(
        rule_admits(rule, policy["metadata"]["namespace"], peers_key, connection)
        for policy in selecting
        for rule in (policy.get("spec") or {}).get(rules_key) or []
    )


@dataclass(frozen=True)
class Evaluator:
    """The policies of a cluster and its namespaces' labels, asked about one connection at a time.

    `ip_blocks_select_pods`: the permissive reading (True, Calico's: an ipBlock matches a pod's address) for
    denials that hold on every CNI; False (Cilium's) for allowances that do not rest on an ipBlock matching a pod.
    """

    policies: Sequence[Mapping[str, Any]]
    namespaces: Mapping[str, Mapping[str, str]]
    ip_blocks_select_pods: bool = True

    def _connection(self, other: Source, destination: Destination, port: int, protocol: str) -> _Connection:
        return _Connection(self.namespaces, other, destination, port, protocol, self.ip_blocks_select_pods)

    def admits(self, source: Source, destination: Pod, port: int, protocol: str = "TCP") -> bool:
        """Whether `destination`'s ingress policies admit a connection from `source` to its `port`/`protocol`."""
        return _allowed(self.policies, destination, "Ingress", self._connection(source, destination, port, protocol))

    def lets_out(self, source: Pod, destination: Destination, port: int, protocol: str = "TCP") -> bool:
        """Whether `source`'s egress policies let it open a connection to `destination`:`port`/`protocol`."""
        connection = self._connection(destination, destination, port, protocol)
        return _allowed(self.policies, source, "Egress", connection)

    def connects(self, source: Source, destination: Destination, port: int, protocol: str = "TCP") -> bool:
        """Both sides: out of `source` (when it is a pod) and into `destination` (when it is a pod)."""
        if isinstance(source, Pod) and not self.lets_out(source, destination, port, protocol):
            return False
        return not isinstance(destination, Pod) or self.admits(source, destination, port, protocol)


def admitted(
    policies: Sequence[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    source: Source,
    destination: Pod,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether `destination`'s ingress policies admit a connection from `source` (the permissive reading)."""
    return Evaluator(policies, namespaces).admits(source, destination, port, protocol)


# ------------------------------------------------------------------------- a cluster from rendered objects

_TEMPLATED = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def _pod_of_template(namespace: str, name: str, template: Mapping[str, Any]) -> Pod:
    spec = template.get("spec") or {}
    named: dict[str, tuple[int, str]] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for entry in container.get("ports") or []:
            if "name" in entry:
                named[entry["name"]] = (entry["containerPort"], entry.get("protocol", "TCP"))
    labels = (template.get("metadata") or {}).get("labels") or {}
    return Pod(namespace=namespace, labels=dict(labels), named_ports=named, name=name)


def pods_of(objects: Iterable[Mapping[str, Any]]) -> dict[str, Pod]:
    """One representative pod per workload (`<namespace>/<name>`), from pod templates, CronJobs, CloudNativePG
    Clusters (instances labelled as the operator labels them: `cnpg.io/cluster`, `cnpg.io/instanceRole`, ...; its
    Jobs carry `cnpg.io/cluster` too) and VolSync ReplicationSources (the mover, labelled as VolSync labels it)."""
    pods: dict[str, Pod] = {}
    for obj in objects:
        kind, metadata, spec = obj.get("kind"), obj.get("metadata") or {}, obj.get("spec") or {}
        namespace, name = metadata.get("namespace"), metadata.get("name", "")
        if namespace is None:
            continue
        key = f"{namespace}/{name}"
        if kind in _TEMPLATED:
            pods[key] = _pod_of_template(namespace, name, spec.get("template") or {})
        elif kind == "CronJob":
            template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
            pods[key] = _pod_of_template(namespace, name, template)
        elif kind == "ReplicationSource" and str(obj.get("apiVersion", "")).startswith("volsync.backube/"):
            pods[f"{key}-mover"] = Pod(namespace=namespace, labels=dict(VOLSYNC_MOVER_LABELS), name=f"{name}-mover")
        elif kind == "Cluster" and str(obj.get("apiVersion", "")).startswith("postgresql.cnpg.io/"):
            inherited = (spec.get("inheritedMetadata") or {}).get("labels") or {}
            for role in CNPG_ROLES:
                labels = cnpg_instance_labels(name, role, inherited)
                ports = {"postgresql": (5432, "TCP"), "metrics": (9187, "TCP"), "status": (8000, "TCP")}
                pods[f"{key}-{role}"] = Pod(namespace=namespace, labels=labels, named_ports=ports, name=name)
    return pods


def namespaces_of(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """The rendered Namespaces and their labels."""
    return {
        obj["metadata"]["name"]: dict(obj["metadata"].get("labels") or {})
        for obj in objects
        if obj.get("kind") == "Namespace"
    }


def network_policies_of(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [obj for obj in objects if obj.get("kind") == "NetworkPolicy"]
