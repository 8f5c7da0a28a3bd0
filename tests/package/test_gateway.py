"""The package's SubnetRouters and GatewayServices: plain inputs in, the Python components' resources out, the
key writers waited for through `dependsOn`, bad inputs named at their schema path before anything is registered."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from headscale_ha.components import gateway_services, subnet_routers
from headscale_ha.components.settings import ClusterSettings, Proxy, RouterMode
from headscale_ha.package.gateway import GatewayServices, SubnetRouters
from tests.support.component_run import build_component, refused
from tests.support.component_tree import subtree
from tools.harness import ProgramRun, RegisteredResource

CLUSTER = {"nodes": 3, "exclude_nodes": ["gpu-1"], "toleration_seconds": 30}
IMAGE = "ghcr.io/tailscale/tailscale:v1.82.5"

ROUTERS_KERNEL: dict[str, Any] = {
    "namespace": "tailnet-routers",
    "replicas": 2,
    "image": IMAGE,
    "mode": RouterMode.KERNEL,
    "routes": ["10.244.0.0/16", "10.96.0.0/12", "10.10.50.0/24"],
    "tag": "tag:subnet-router-hydra",
    "login_server": "https://vpn.example.org",
    "hostname_prefix": "hydra",
    "cluster": CLUSTER,
    "key_source": "minted",
}
ROUTERS_USERSPACE: dict[str, Any] = {
    **{k: v for k, v in ROUTERS_KERNEL.items() if k != "key_source"},
    "namespace": "tailnet-gateway",
    "replicas": 1,
    "mode": RouterMode.USERSPACE,
    "routes": ["10.20.50.0/24"],
    "hostname_prefix": "cosmos",
    "cluster": {"nodes": 1, "workloads_on_control_plane": True},
}

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


def _router_args(
    inputs: dict[str, Any], key_secrets: tuple[pulumi.Resource, ...] = ()
) -> subnet_routers.SubnetRoutersArgs:
    """The Python args a program writes by hand for the same routers."""
    return subnet_routers.SubnetRoutersArgs(
        namespace=inputs["namespace"],
        replicas=inputs["replicas"],
        image=inputs["image"],
        mode=inputs["mode"],
        routes=tuple(inputs["routes"]),
        tag=inputs["tag"],
        login_server=inputs["login_server"],
        hostname_prefix=inputs["hostname_prefix"],
        cluster=ClusterSettings(**inputs["cluster"]),
        key_source=inputs.get("key_source"),
        key_secrets=key_secrets,
    )


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


def _below(run: ProgramRun, package_type: str, python_type: str, name: str) -> list[tuple[str, str, str]]:
    """The package component's tree with its one child, the Python component, taken off the chains."""
    ours = subtree(run.resources, package_type, name)
    assert ours[0][:2] == (python_type, name)
    return [(chain.split("/", 1)[1], child, inputs) for chain, child, inputs in ours[1:]]


def _key_secret(name: str = "router-key") -> k8s.core.v1.Secret:
    return k8s.core.v1.Secret(
        name,
        metadata={"name": subnet_routers.router_key_secret(0), "namespace": "tailnet-routers"},
        string_data={"authkey": "hskey-auth-x"},
    )


@pytest.mark.parametrize("inputs", [ROUTERS_KERNEL, ROUTERS_USERSPACE], ids=["kernel-two", "userspace-one"])
def test_routers_register_what_the_python_component_registers_one_level_down(inputs: dict[str, Any]) -> None:
    package = build_component(lambda: SubnetRouters("routers", inputs))
    python = build_component(lambda: subnet_routers.SubnetRouters("routers", _router_args(inputs)))
    below = _below(package, "headscale-ha:index:SubnetRouters", "headscale-ha:gateway:SubnetRouters", "routers")
    assert below == subtree(python.resources, "headscale-ha:gateway:SubnetRouters", "routers")
    statefulsets = [n for chain, n, _ in below if chain.endswith("StatefulSet")]
    assert statefulsets == [f"routers-statefulset-{n}" for n in range(inputs["replicas"])]


def _dependencies(run: ProgramRun, resource: RegisteredResource) -> list[str]:
    names = {r.urn: r.name for r in run.resources}
    return sorted(names[urn] for urn in resource.dependencies)


def test_the_statefulsets_wait_for_what_the_component_depends_on_as_for_the_key_secrets() -> None:
    def package_program() -> None:
        SubnetRouters("routers", ROUTERS_KERNEL, pulumi.ResourceOptions(depends_on=[_key_secret()]))

    def python_program() -> None:
        subnet_routers.SubnetRouters("routers", _router_args(ROUTERS_KERNEL, key_secrets=(_key_secret(),)))

    package, python = build_component(package_program), build_component(python_program)
    ours = [_dependencies(package, r) for r in package.of_type("kubernetes:apps/v1:StatefulSet")]
    theirs = [_dependencies(python, r) for r in python.of_type("kubernetes:apps/v1:StatefulSet")]
    assert ours == theirs
    assert ours[1] == [
        "router-key",
        "routers-account-1",
        "routers-binding-1",
        "routers-headless-1",
        "routers-role-1",
        "routers-state-1",
        "routers-statefulset-0",
    ]
    (component,) = package.of_type("headscale-ha:index:SubnetRouters")
    assert _dependencies(package, component) == ["router-key"]


def test_the_routers_outputs_name_what_a_consumer_writes_and_approves() -> None:
    def program() -> None:
        routers = SubnetRouters("routers", ROUTERS_KERNEL)
        pulumi.export(
            "routers",
            {
                "namespace": routers.namespace,
                "statefulSets": routers.stateful_sets,
                "stateSecrets": routers.state_secrets,
                "authKeySecrets": routers.auth_key_secrets,
                "replicas": routers.replicas,
                "routes": routers.routes,
            },
        )

    assert build_component(program).outputs["routers"] == {
        "namespace": "tailnet-routers",
        "statefulSets": ["subnet-router-0", "subnet-router-1"],
        "stateSecrets": ["subnet-router-0", "subnet-router-1"],
        "authKeySecrets": ["subnet-router-authkey-0", "subnet-router-authkey-1"],
        "replicas": 2,
        "routes": ["10.244.0.0/16", "10.96.0.0/12", "10.10.50.0/24"],
    }


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"cluster": {"exclude_nodes": ["gpu-1"]}}, "cluster.nodes", "is required"),
        ({"cluster": {**CLUSTER, "colour": "red"}}, "cluster.colour", "is not an input"),
        ({"mode": "turbo"}, "mode", "'userspace' or 'kernel', got 'turbo'"),
        ({"replicas": 4}, "replicas", "exceeds cluster.nodes (3); replicas are spread one per node, got 4"),
        ({"replicas": 0}, "replicas", "got 0"),
        ({"routes": ["10.244.0.0/16", "10.96.0.1/12"]}, "routes[1]", "host bits set"),
        ({"routes": ["10.244.0.0/16,10.96.0.0/12"]}, "routes[0]", "'10.244.0.0/16,10.96.0.0/12'"),
        ({"tag": "subnet-router-hydra"}, "tag", "got 'subnet-router-hydra'"),
        ({"login_server": "http://vpn.example.org"}, "loginServer", "must be an https:// URL"),
        ({"hostname_prefix": "Hydra"}, "hostnamePrefix", "must be a DNS label"),
        ({"image": "ghcr.io/tailscale/tailscale:latest"}, "image", "moving tag"),
    ],
)
def test_a_bad_router_input_is_refused_at_its_schema_path(change: dict, path: str, message: str) -> None:
    error = refused(lambda: SubnetRouters("routers", {**ROUTERS_KERNEL, **change}))
    assert error.property_path == path
    assert message in error.reason
    assert error.reason.startswith(f"{path}: ")


@pytest.mark.parametrize("inputs", [SERVICES_TWO, SERVICES_ONE], ids=["two-replicas", "one-replica"])
def test_services_register_what_the_python_component_registers_one_level_down(inputs: dict[str, Any]) -> None:
    package = build_component(lambda: GatewayServices("gateway", inputs))
    python = build_component(lambda: gateway_services.GatewayServices("gateway", _services_args(inputs)))
    below = _below(package, "headscale-ha:index:GatewayServices", "headscale-ha:gateway:GatewayServices", "gateway")
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
