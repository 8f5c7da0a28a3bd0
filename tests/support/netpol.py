"""A small evaluator of Kubernetes NetworkPolicy ingress semantics, to prove rendered policies allow what they mean.

Pure: given NetworkPolicy objects (as rendered), the namespaces with their labels, a source (a pod, or an address
from outside any pod) and a destination pod, port and protocol, say whether the connection is admitted.

The semantics (networking.k8s.io/v1, ingress only):
- a pod is isolated for ingress only when some policy of its namespace selects it (`podSelector`) and has
  `Ingress` among its `policyTypes` (absent `policyTypes`: Ingress is always implied);
- an isolated pod admits a connection when at least one rule of one selecting policy admits it (a union);
- a rule admits when one of its `ports` matches (none listed: every port) and one of its `from` peers matches
  (none listed: every source);
- a port matches by protocol (default TCP) and number, a range `port`..`endPort`, or a named container port of
  the destination pod; a port entry without `port` matches every port of its protocol;
- peers: `podSelector` alone selects pods of the policy's namespace; `namespaceSelector` alone every pod of the
  matching namespaces; both together the matching pods of the matching namespaces; `ipBlock` an address in `cidr`
  and in none of `except`;
- namespaces carry `kubernetes.io/metadata.name` (the API server sets it); it is added here too.

Where CNIs differ, the evaluator takes the more permissive reading, so a denial it reports holds on every CNI:
an `ipBlock` is matched against a source pod's own IP when the pod has one (Calico does; Cilium matches ipBlocks
only for traffic from outside the cluster). Traffic from the node itself (kubelet probes) is not modelled: most
CNIs (Calico, Cilium with its default `allow-localhost`, Antrea, kube-router) always admit it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools.wiring import CNPG_ROLES, cnpg_instance_labels

NAME_LABEL = "kubernetes.io/metadata.name"
PROTOCOLS = ("TCP", "UDP", "SCTP")


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


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: every matchLabels pair and every expression must hold; `{}` matches all."""
    if selector is None:
        return True
    unknown = set(selector) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise PolicyError(f"label selector with unknown fields {sorted(unknown)}")
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            raise PolicyError(f"matchExpressions {key} {operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PolicyError(f"matchExpressions {key} {operator} takes no values")
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            raise PolicyError(f"matchExpressions operator {operator!r} is not In, NotIn, Exists or DoesNotExist")
        if not ok:
            return False
    return True


def _namespace_labels(namespaces: Mapping[str, Mapping[str, str]], name: str) -> dict[str, str]:
    return {**namespaces.get(name, {}), NAME_LABEL: name}


def _in_block(address: str, block: Mapping[str, Any]) -> bool:
    network = ipaddress.ip_network(block["cidr"], strict=False)
    excepts = [ipaddress.ip_network(item, strict=False) for item in block.get("except") or []]
    for excluded in excepts:
        if excluded.version != network.version or not excluded.subnet_of(network):  # type: ignore[arg-type]
            raise PolicyError(f"ipBlock except {excluded} is not inside cidr {network}")
    ip = ipaddress.ip_address(address)
    if ip.version != network.version or ip not in network:
        return False
    return not any(ip.version == excluded.version and ip in excluded for excluded in excepts)


def peer_matches(
    peer: Mapping[str, Any], policy_namespace: str, namespaces: Mapping[str, Mapping[str, str]], source: Source
) -> bool:
    """One `from` entry against a source."""
    fields = set(peer)
    if not fields or fields - {"podSelector", "namespaceSelector", "ipBlock"}:
        raise PolicyError(f"peer {dict(peer)} must set podSelector, namespaceSelector or ipBlock (and nothing else)")
    if "ipBlock" in fields:
        if fields != {"ipBlock"}:
            raise PolicyError("a peer with ipBlock may not also set podSelector or namespaceSelector")
        address = source.ip
        return address is not None and _in_block(address, peer["ipBlock"])
    if not isinstance(source, Pod):
        return False  # selectors select pods only
    if "namespaceSelector" in fields:
        if not selector_matches(peer["namespaceSelector"], _namespace_labels(namespaces, source.namespace)):
            return False
    elif source.namespace != policy_namespace:
        return False
    return selector_matches(peer.get("podSelector"), source.labels)


def port_matches(entry: Mapping[str, Any], destination: Pod, port: int, protocol: str) -> bool:
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
        named = destination.named_ports.get(number)
        return named is not None and named == (port, protocol)
    if end is not None:
        if end < number:
            raise PolicyError(f"endPort {end} is below port {number}")
        return number <= port <= end
    return bool(number == port)


def rule_admits(
    rule: Mapping[str, Any],
    policy_namespace: str,
    namespaces: Mapping[str, Mapping[str, str]],
    source: Source,
    destination: Pod,
    port: int,
    protocol: str,
) -> bool:
    ports = rule.get("ports") or []
    if ports and not any(port_matches(entry, destination, port, protocol) for entry in ports):
        return False
    peers = rule.get("from") or []
    return not peers or any(peer_matches(peer, policy_namespace, namespaces, source) for peer in peers)


def _isolates_ingress(policy: Mapping[str, Any]) -> bool:
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    if types is None:
        return True  # Ingress is implied; Egress only when egress rules exist
    unknown = set(types) - {"Ingress", "Egress"}
    if unknown:
        raise PolicyError(f"policyTypes {sorted(unknown)} are not Ingress or Egress")
    return "Ingress" in types


def selecting_policies(policies: Iterable[Mapping[str, Any]], destination: Pod) -> list[Mapping[str, Any]]:
    """The NetworkPolicies that isolate the destination pod for ingress."""
    return [
        policy
        for policy in policies
        if policy.get("kind", "NetworkPolicy") == "NetworkPolicy"
        and policy["metadata"].get("namespace") == destination.namespace
        and _isolates_ingress(policy)
        and selector_matches((policy.get("spec") or {}).get("podSelector", {}), destination.labels)
    ]


def admitted(
    policies: Sequence[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    source: Source,
    destination: Pod,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether `source` may open a connection to `destination`:`port`/`protocol` under `policies`."""
    if protocol not in PROTOCOLS:
        raise PolicyError(f"protocol {protocol!r} is not one of {PROTOCOLS}")
    selecting = selecting_policies(policies, destination)
    if not selecting:
        return True  # not isolated: every source is admitted
    return any(
        rule_admits(rule, policy["metadata"]["namespace"], namespaces, source, destination, port, protocol)
        for policy in selecting
        for rule in (policy.get("spec") or {}).get("ingress") or []
    )


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
    """One representative pod per workload (`<namespace>/<name>`), from pod templates, CronJobs, and CloudNativePG
    Clusters (instances labelled as the operator labels them: `cnpg.io/cluster`, `cnpg.io/instanceRole`, ...)."""
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
