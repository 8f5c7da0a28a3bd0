"""The package's GatewayServices: plain inputs in, the Python component's resources out, bad inputs named at their
schema path before anything is registered."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from headscale_ha.components import gateway_services
from headscale_ha.components.settings import ClusterSettings, Proxy
from headscale_ha.package.gateway_services import GatewayServices
from tests.support.component_run import build_component, refused
from tests.support.component_tree import one_level_down, subtree

CLUSTER = {"nodes": 3, "exclude_nodes": ["gpu-1"], "toleration_seconds": 30}

PROXIES = [
    {"name": "kube-api", "port": 6443, "target_host": "10.10.0.10", "target_port": 6443},
    {"name": "talos", "port": 50000, "target_host": "10.10.0.10", "target_port": 50000},
    {
        "name": "clustermesh",
        "port": 2379,
        "target_host": "clustermesh-apiserver.kube-system.svc.cluster.local",
        "target_port": 2379,
    },
]
SERVICES_TWO: dict[str, Any] = {
    "namespace": "tailnet-gateway",
    "replicas": 2,
    "coredns_image": "registry.k8s.io/coredns/coredns:v1.12.0",
    "metrics": True,
    "socat_image": "docker.io/alpine/socat:1.8.0.1",
    "proxies": PROXIES,
    "dns_zone": "hydra.tn.example.org",
    "dns_hosts": {"nas": "10.10.0.20", "printer.lab": "fd00::20"},
    "gateway_ip": "10.10.50.10",
    "lb_pool": "10.10.50.0/24",
    "pool_name": "tailnet-hydra",
    "pool_label": "tailnet",
    "cluster": CLUSTER,
    "load_balancer_source_ranges": ["10.244.0.0/16", "100.64.0.0/10"],
}
SERVICES_ONE: dict[str, Any] = {
    **{k: v for k, v in SERVICES_TWO.items() if k not in ("metrics", "load_balancer_source_ranges")},
    "replicas": 1,
    "proxies": PROXIES[:1],
    "dns_zone": "cosmos.tn.example.org",
    "dns_hosts": {},
    "gateway_ip": "10.20.50.10",
    "lb_pool": "10.20.50.0/24",
    "pool_name": "tailnet-cosmos",
    "cluster": {"nodes": 1},
}


def _services_args(inputs: dict[str, Any]) -> gateway_services.GatewayServicesArgs:
    return gateway_services.GatewayServicesArgs(
        namespace=inputs["namespace"],
        replicas=inputs["replicas"],
        coredns_image=inputs["coredns_image"],
        metrics=inputs.get("metrics", False),
        socat_image=inputs["socat_image"],
        proxies=tuple(Proxy(**p) for p in inputs["proxies"]),
        dns_zone=inputs["dns_zone"],
        dns_hosts=inputs["dns_hosts"],
        gateway_ip=inputs["gateway_ip"],
        lb_pool=inputs["lb_pool"],
        pool_name=inputs["pool_name"],
        pool_label=inputs["pool_label"],
        cluster=ClusterSettings(**inputs["cluster"]),
        load_balancer_source_ranges=tuple(inputs.get("load_balancer_source_ranges", ())),
    )


@pytest.mark.parametrize("inputs", [SERVICES_TWO, SERVICES_ONE], ids=["two-replicas", "one-replica"])
def test_services_register_what_the_python_component_registers_one_level_down(inputs: dict[str, Any]) -> None:
    package = build_component(lambda: GatewayServices("gateway", inputs))
    python = build_component(lambda: gateway_services.GatewayServices("gateway", _services_args(inputs)))
    below = one_level_down(
        package.resources, "headscale-ha:index:GatewayServices", "headscale-ha:gateway:GatewayServices", "gateway"
    )
    assert below == subtree(python.resources, "headscale-ha:gateway:GatewayServices", "gateway")
    names = [n for _, n, _ in below]
    assert ("gateway-pdb" in names) is (inputs["replicas"] > 1)


def test_the_services_outputs_give_the_gateway_ip_and_every_endpoint() -> None:
    def program() -> None:
        services = GatewayServices("gateway", SERVICES_TWO)
        pulumi.export(
            "gateway",
            {
                "namespace": services.namespace,
                "service": services.service,
                "corefileConfigMap": services.corefile_config_map,
                "hostsConfigMap": services.hosts_config_map,
                "pool": services.pool,
                "ip": services.ip,
                "dnsZone": services.dns_zone,
                "endpoints": services.endpoints,
            },
        )

    assert build_component(program).outputs["gateway"] == {
        "namespace": "tailnet-gateway",
        "service": "tailnet-gateway",
        "corefileConfigMap": "tailnet-dns-corefile",
        "hostsConfigMap": "tailnet-dns-hosts",
        "pool": "tailnet-hydra",
        "ip": "10.10.50.10",
        "dnsZone": "hydra.tn.example.org",
        "endpoints": {
            "dns": "10.10.50.10:53",
            "kube-api": "10.10.50.10:6443",
            "talos": "10.10.50.10:50000",
            "clustermesh": "10.10.50.10:2379",
        },
    }


def _proxy(**change: Any) -> dict[str, Any]:
    return {"name": "extra", "port": 8443, "target_host": "10.10.0.30", "target_port": 443, **change}


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"cluster": {"toleration_seconds": 30}}, "cluster.nodes", "is required"),
        ({"cluster": {"nodes": 2, "zone": "a"}}, "cluster.zone", "is not an input"),
        ({"replicas": 3, "cluster": {"nodes": 2}}, "replicas", "exceeds cluster.nodes (2)"),
        ({"gateway_ip": "10.10.51.10"}, "gatewayIp", "is outside lbPool 10.10.50.0/24, which hands it out"),
        ({"gateway_ip": "10.10.50.300"}, "gatewayIp", "must be an IPv4 address"),
        ({"lb_pool": "10.10.50.0/33"}, "lbPool", "prefix length 33"),
        ({"load_balancer_source_ranges": ["10.244.0.0/16", "any"]}, "loadBalancerSourceRanges[1]", "'any'"),
        ({"dns_zone": "Hydra"}, "dnsZone", "fully qualified domain name"),
        ({"dns_hosts": {"nas": "banana"}}, "dnsHosts.nas", "IPv4 or IPv6 address, got 'banana'"),
        ({"dns_hosts": {"nas box": "10.10.0.20"}}, "dnsHosts", "'nas box' is not a name relative to the zone"),
        ({"proxies": [*PROXIES, {"name": "extra", "port": 8443}]}, "proxies[3].targetHost", "is required"),
        ({"proxies": [_proxy(target_port=70000)]}, "proxies[0].targetPort", "got 70000"),
        ({"proxies": [_proxy(colour="red")]}, "proxies[0].colour", "is not an input"),
        ({"proxies": [_proxy(port=8080)]}, "proxies[0].port", "CoreDNS's health port in the pod"),
        ({"proxies": [_proxy(port=53)]}, "proxies[0].port", "the Service's DNS port"),
        ({"proxies": [*PROXIES, _proxy(port=6443)]}, "proxies[3].port", "already the port of proxies[0]"),
        (
            {"proxies": [_proxy(name="metrics-exporter-a"), _proxy(name="metrics-exporter-b", port=8444)]},
            "proxies[1].name",
            "repeats proxies[0].name in its first 15 characters",
        ),
        ({"coredns_image": "coredns/coredns"}, "corednsImage", "has no tag"),
    ],
)
def test_a_bad_services_input_is_refused_at_its_schema_path(change: dict, path: str, message: str) -> None:
    error = refused(lambda: GatewayServices("gateway", {**SERVICES_TWO, **change}))
    assert error.property_path == path
    assert message in error.reason
    assert error.reason.startswith(f"{path}: ")
