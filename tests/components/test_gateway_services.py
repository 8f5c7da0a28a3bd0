"""GatewayServices at the component seam, built alone from hand-written Args (tests/support/seam_samples.py): the
CoreDNS and socat proxies behind one load balancer with a fixed IP from the pool, gated by the cluster's size; the
helpers another program uses without a stack config. The rendered Corefile, hosts file and kubeconfig are in
test_gateway_config.py; the subnet routers, the other half of the split gateway, in test_subnet_routers.py."""

from __future__ import annotations

import pytest

from headscale_ha.components.gateway_services import GatewayServices, dns_records, endpoints, socat_target
from headscale_ha.components.settings import Proxy
from headscale_ha.program.args import gateway_services_args
from tests.support.component_run import build_component
from tests.support.config_samples import parse
from tests.support.seam_samples import SINGLE_NODE, cluster, gateway_services_sample
from tests.support.site_objects import object_named as _obj
from tests.support.site_objects import objects_of as _kinds


@pytest.mark.parametrize(("nodes", "replicas"), [(3, 2), (1, 1)])
def test_replicas_are_gated_per_cluster(nodes: int, replicas: int) -> None:
    placement = cluster() if nodes > 1 else cluster(**SINGLE_NODE)
    run = build_component(
        lambda: GatewayServices("gateway", gateway_services_sample(replicas=replicas, cluster=placement))
    )
    services = _obj(run, "Deployment", "tailnet-gateway")["spec"]
    assert services["replicas"] == replicas
    many = replicas > 1
    assert ("podAntiAffinity" in services["template"]["spec"]["affinity"]) is many
    assert {p["metadata"]["name"] for p in _kinds(run, "PodDisruptionBudget")} == (
        {"tailnet-gateway"} if many else set()
    )


def test_one_load_balancer_with_the_fixed_ip_from_the_pool() -> None:
    run = build_component(lambda: GatewayServices("gateway", gateway_services_sample()))
    (service,) = [s for s in _kinds(run, "Service") if s["spec"].get("type") == "LoadBalancer"]
    assert service["metadata"]["annotations"] == {"lbipam.cilium.io/ips": "172.30.250.10"}
    assert service["metadata"]["labels"]["io.cilium/lb-pool"] == "tailnet"
    assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {
        ("dns-udp", 53), ("dns-tcp", 53), ("kube-api", 6443), ("talos", 50000), ("clustermesh", 2379),
    }  # fmt: skip
    (pool,) = _kinds(run, "CiliumLoadBalancerIPPool")
    assert pool["spec"] == {
        "blocks": [{"cidr": "172.30.250.0/28"}],
        "serviceSelector": {"matchLabels": {"io.cilium/lb-pool": "tailnet"}},
    }


def test_the_zone_records_and_endpoints_need_no_stack_config() -> None:
    """Another program computes zone records and endpoints from its own values."""
    assert dns_records("lab.example", "10.9.0.10", {"nas": "10.1.2.3"}) == {
        "gateway.lab.example": "10.9.0.10",
        "api.lab.example": "10.9.0.10",
        "nas.lab.example": "10.1.2.3",
    }
    ssh = Proxy(name="ssh", port=22, target_host="bastion", target_port=22)
    assert endpoints("10.9.0.10", [ssh]) == {"dns": "10.9.0.10:53", "ssh": "10.9.0.10:22"}


def test_the_site_decides_the_default_proxies_and_pool() -> None:
    services = gateway_services_args(parse("hydra"))
    assert [proxy.name for proxy in services.proxies] == ["kube-api", "talos", "clustermesh"]
    assert services.pool_name == "tailnet-hydra"


def test_a_proxy_to_an_ipv6_target_brackets_the_address() -> None:
    """socat reads `TCP:fd00::1:6443` as host `fd00` and a bad port: the address goes in brackets."""
    assert socat_target("fd00::10", 6443) == "TCP:[fd00::10]:6443"
    assert socat_target("10.10.0.10", 6443) == "TCP:10.10.0.10:6443"
    assert socat_target("api.lan", 6443) == "TCP:api.lan:6443"
