"""The evaluated cluster (World), outside pods and clients, rendered(), gateway_ports(): for the NetworkPolicy tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from headscale_ha.components import gateway_services
from headscale_ha.components.network_policy import NetworkPoliciesArgs
from tests.models.netpol.netpol import Evaluator, External, Pod, admitted, namespaces_of, network_policies_of, pods_of

#: Namespaces the program does not own but names (or a stranger's).
OUTSIDE = {"monitoring": {}, "cnpg-system": {}, "ingress-nginx": {}, "elsewhere": {}}
STRANGER = Pod(namespace="elsewhere", labels={"app": "random"}, ip="10.244.7.7", name="stranger")
INGRESS = Pod(namespace="ingress-nginx", labels={"app.kubernetes.io/name": "ingress-nginx"}, ip="10.244.6.6")
LAN_CLIENT = External(ip="192.168.1.20")
INTERNET = External(ip="198.51.100.99")


@dataclass(frozen=True)
class World:
    """A cluster as the policies see it: the rendered policies, namespaces and pods, plus outside namespaces.

    Every rendered pod gets an address of the pod CIDR, so an ipBlock that would match a pod (Calico's reading)
    counts in every denial; allowances to pods are asked under Cilium's reading (`connects`: no ipBlock selects a
    pod), so they hold on both.
    """

    policies: Sequence[Mapping[str, Any]]
    namespaces: Mapping[str, Mapping[str, str]]
    pods: Mapping[str, Pod]

    @classmethod
    def of(cls, objects: Sequence[Mapping[str, Any]]) -> World:
        pods = {
            key: replace(pod, ip=f"10.244.{index // 250}.{index % 250 + 2}")
            for index, (key, pod) in enumerate(sorted(pods_of(objects).items()))
        }
        return cls(network_policies_of(objects), {**OUTSIDE, **namespaces_of(objects)}, pods)

    def apps(self, app: str) -> list[Pod]:
        """The pods of one application (a workload may be rendered as several objects, one per replica)."""
        return [p for _, p in sorted(self.pods.items()) if p.labels.get("app.kubernetes.io/name") == app]

    def pod(self, app: str) -> Pod:
        found = self.apps(app)
        assert found, f"no pod of {app}"
        return found[0]

    def instances(self) -> list[Pod]:
        return [p for p in self.pods.values() if "cnpg.io/cluster" in p.labels]

    def can(self, source: Pod | External, destination: Pod, port: int, protocol: str = "TCP") -> bool:
        """Ingress only: whether the destination admits the connection."""
        return admitted(self.policies, self.namespaces, source, destination, port, protocol)

    def out(self, source: Pod, destination: Pod | External, port: int, protocol: str = "TCP") -> bool:
        """Egress only, in the permissive reading: for denials."""
        return Evaluator(self.policies, self.namespaces).lets_out(source, destination, port, protocol)

    def connects(self, source: Pod | External, destination: Pod | External, port: int, protocol: str = "TCP") -> bool:
        """Both sides, in Cilium's reading (no ipBlock selects a pod): for allowances."""
        strict = Evaluator(self.policies, self.namespaces, ip_blocks_select_pods=False)
        return strict.connects(source, destination, port, protocol)


def rendered(args: NetworkPoliciesArgs) -> list[dict[str, Any]]:
    """The NetworkPolicy objects the component renders for these Args (without Pulumi)."""
    return [
        {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": item.namespace}, "spec": spec}
        for item in args.namespaces
        for name, spec in item.specs().items()
    ]


def gateway_ports(objects: Sequence[Mapping[str, Any]], gateway: Pod) -> list[tuple[int, str]]:
    """(pod port, protocol) of every port of the gateway Service: what a router reaches behind the gateway IP."""
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == gateway_services.SERVICES]
    ports = []
    for entry in service["spec"]["ports"]:
        target = entry.get("targetPort", entry["port"])
        ports.append(gateway.named_ports[target] if isinstance(target, str) else (target, entry["protocol"]))
    return ports
