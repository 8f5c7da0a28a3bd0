"""Egress: the component's refusals, the destination helpers, and what each pod may reach for the options that
change it, evaluated on the policies rendered from the Args (tests/models/netpol/netpol.py), with no stack planned.

That every pod of both stacks and of every option set reaches what it needs and nothing else, the exact policies
hydra renders and Headscale's start-up reaches are in tests/program/test_site_network_egress.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from headscale_ha.components.network_egress import host_destinations, ip_blocks, url_endpoint
from headscale_ha.components.network_policy import (
    DEFAULT_DENY,
    DEFAULT_DENY_EGRESS,
    Confined,
    NamespacePolicies,
    Port,
    Reach,
    from_pods,
)
from headscale_ha.components.pod import labels
from headscale_ha.components.settings import NetworkPolicySettings
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.network import network_args
from tests.models.netpol.netpol import External, Pod, network_policies_of
from tests.models.netpol.netpol_world import INTERNET, OUTSIDE, World, rendered
from tests.support.config_samples import STORE_KEYS, STORE_SECRETS, parse, section
from tests.support.site_netpol import API_CIDRS, DATABASE, KUBE_DNS, METADATA, api_server

# ----------------------------------------------------------------------------------------------- the component


def test_a_reach_to_nowhere_or_everywhere_is_refused() -> None:
    with pytest.raises(ValueError, match="no destinations"):
        Reach(ports=(Port(443),), destinations=(), why="everywhere")
    with pytest.raises(ValueError, match="no ports"):
        Reach(ports=(), destinations=({"podSelector": {}},), why="every port")
    with pytest.raises(ValueError, match="open the whole namespace"):
        Confined(name="all", pods={}, reaches=(Reach(ports=(Port(53),), destinations=({"podSelector": {}},), why="x"),))
    with pytest.raises(ValueError, match="default-deny already says so"):
        Confined(name="idle", pods={"app": "idle"}, reaches=())
    reach = Reach(ports=(Port(None, "UDP"),), destinations=({"podSelector": {}},), why="every UDP port")
    with pytest.raises(ValueError, match="leaving every other pod of the namespace open"):
        NamespacePolicies(namespace="n", confined=(Confined(name="a", pods={"app": "a"}, reaches=(reach,)),))
    assert reach.rule() == {"ports": [{"protocol": "UDP"}], "to": [{"podSelector": {}}]}


def test_egress_policies_come_after_the_default_denies_under_their_own_names() -> None:
    reach = Reach(
        ports=(Port(53, "UDP"),), destinations=(from_pods({"k8s-app": "kube-dns"}, "kube-system"),), why="DNS"
    )
    web = Confined(name="web", pods={"app": "web"}, reaches=(reach,))
    specs = NamespacePolicies(namespace="n", egress=True, confined=(web,)).specs()
    assert list(specs) == [DEFAULT_DENY, DEFAULT_DENY_EGRESS, "web-egress"]
    assert specs["web-egress"] == {
        "podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Egress"],
        "egress": [
            {
                "ports": [{"protocol": "UDP", "port": 53}],
                "to": [
                    {
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    }
                ],
            }
        ],
    }
    assert DEFAULT_DENY_EGRESS not in NamespacePolicies(namespace="n").specs(), "egress stays open unless asked"


# -------------------------------------------------------------------------------------------- destinations


def test_ip_blocks_except_only_what_lies_inside_and_always_the_metadata_service() -> None:
    assert ip_blocks(["0.0.0.0/0"], ["10.0.0.0/8", "10.244.0.0/16", "fc00::/7"]) == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32"]}}
    ]
    assert ip_blocks(["192.168.1.0/24"], ["192.168.0.0/16"]) == [{"ipBlock": {"cidr": "192.168.1.0/24"}}]
    assert ip_blocks(["169.254.0.0/16"]) == [{"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.254/32"]}}]
    assert ip_blocks(["fd00::/8"]) == [{"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:ec2::254/128"]}}]


def test_a_host_name_becomes_an_address_the_namespace_of_its_service_a_listed_range_or_the_internet() -> None:
    settings = NetworkPolicySettings(
        egressHosts={"idp.lan.example.com": ["192.168.7.0/24"]}, egressInternetCidrs=["0.0.0.0/0"]
    )
    assert host_destinations("10.10.0.10", settings) == [{"ipBlock": {"cidr": "10.10.0.10/32"}}]
    assert host_destinations("fd00::1", settings) == [{"ipBlock": {"cidr": "fd00::1/128"}}]
    assert host_destinations("clustermesh-apiserver.kube-system.svc.cluster.local", settings) == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    ]
    assert host_destinations("minio.storage.svc", settings) == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "storage"}}}
    ]
    assert host_destinations("headscale-db-rw", settings) == [{"podSelector": {}}], "a bare name: its own namespace"
    assert host_destinations("idp.lan.example.com.", settings) == [{"ipBlock": {"cidr": "192.168.7.0/24"}}]
    (internet,) = host_destinations("controlplane.tailscale.com", settings, ["203.0.113.0/24"])
    assert "203.0.113.0/24" in internet["ipBlock"]["except"]
    assert "10.0.0.0/8" in internet["ipBlock"]["except"]
    assert host_destinations("example.org", NetworkPolicySettings(egressInternetCidrs=[])) == []
    with pytest.raises(ValueError, match="never an egress destination"):
        host_destinations("169.254.169.254", settings)
    assert url_endpoint("https://id.example.com/realms/x") == ("id.example.com", 443)
    assert url_endpoint("https://[2001:db8::1]:8443/") == ("2001:db8::1", 8443)
    assert url_endpoint("http://s3.lan:9000") == ("s3.lan", 9000)
    assert url_endpoint("http://s3.lan/") == ("s3.lan", 80)


# ------------------------------------------------------------------------------------------------ the config


def _egress_world(stack: str = "hydra", **overrides: Any) -> tuple[World, StackConfig]:
    """Policies of a config rendered from its Args (no Pulumi), with the namespaces they live in."""
    overrides.setdefault("networkPolicy", API_CIDRS)
    config = parse(stack, secret_keys=(*STORE_SECRETS, *overrides.pop("secret_keys", ())), **STORE_KEYS, **overrides)
    objects = rendered(network_args(config))
    namespaces = {item["metadata"]["namespace"]: {} for item in objects}
    return World(network_policies_of(objects), {**OUTSIDE, **namespaces}, {}), config


def pod(config: StackConfig, app: str, component: str = "gateway", namespace: str | None = None) -> Pod:
    return Pod(namespace=namespace or config.gateway.namespace, labels=labels(app, component), ip="10.244.3.3")


def test_unknown_api_server_endpoints_are_refused_unless_egress_is_off() -> None:
    with pytest.raises(ConfigError, match=r"networkPolicy\.apiServerCidrs: is empty.*networkPolicy\.egress: false"):
        network_args(parse(networkPolicy={}))
    world, _ = _egress_world(networkPolicy={"egress": False})
    names = {p["metadata"]["name"] for p in world.policies}
    assert DEFAULT_DENY_EGRESS not in names
    assert not any(name.endswith("-egress") for name in names)
    assert DEFAULT_DENY in names, "ingress stays default-deny"


def test_the_metadata_service_is_refused_as_a_destination() -> None:
    with pytest.raises(ConfigError, match=r"networkPolicy\.egressHosts\.idp\.example\.com\[0\]: is the cloud metadata"):
        parse(networkPolicy={**API_CIDRS, "egressHosts": {"idp.example.com": ["169.254.169.254/32"]}})
    with pytest.raises(ConfigError, match=r"networkPolicy\.dnsCidrs\[0\]: is the cloud metadata"):
        parse(networkPolicy={**API_CIDRS, "dnsCidrs": ["fd00:ec2::254/128"]})


def test_node_local_dns_and_another_dns_deployment() -> None:
    settings = {**API_CIDRS, "dnsCidrs": ["169.254.20.10/32"], "dnsNamespace": "dns", "dnsPodLabels": {"app": "dns"}}
    world, config = _egress_world(networkPolicy=settings)
    headscale = pod(config, "headscale", "control-plane", config.namespace)
    assert world.out(headscale, External(ip="169.254.20.10"), 53, "UDP")
    assert world.out(headscale, Pod(namespace="dns", labels={"app": "dns"}), 53, "TCP")
    assert not world.out(headscale, KUBE_DNS, 53, "UDP"), "the default DNS pods are no longer named"
    assert not world.out(headscale, External(ip="169.254.20.10"), 80)
    assert not world.out(headscale, METADATA, 53, "UDP")


def test_the_internet_narrows_to_the_listed_ranges_or_to_nothing() -> None:
    world, config = _egress_world(networkPolicy={**API_CIDRS, "egressInternetCidrs": ["203.0.113.0/24"]})
    headscale, router = pod(config, "headscale", "control-plane", config.namespace), pod(config, "subnet-router")
    assert world.out(headscale, External(ip="203.0.113.7"), 443)
    assert not world.out(headscale, INTERNET, 443)
    assert world.out(router, External(ip="203.0.113.7"), 41641, "UDP")
    assert world.out(router, External(ip="198.51.100.10"), 443), "the sites' public addresses stay reachable"
    world, config = _egress_world(networkPolicy={**API_CIDRS, "egressInternetCidrs": []})
    assert not world.out(headscale, INTERNET, 443)
    assert world.out(router, api_server(config), 6443)
    assert world.out(router, pod(config, "tailnet-gateway"), 1053, "UDP")


def test_an_issuer_on_the_lan_is_reached_at_its_listed_address_and_port() -> None:
    oidc = {"issuer": "https://idp.lan.example.com:8443/realms/t", "clientId": "hs", "allowedGroups": ["ops"]}
    world, config = _egress_world(
        headscale={**section("hydra", "headscale"), "oidc": oidc},
        headplane={"oidcLogin": True},
        networkPolicy={**API_CIDRS, "egressHosts": {"idp.lan.example.com": ["192.168.7.5/32"]}},
        secret_keys=("oidcClientSecret", "headplaneApiKey"),
        oidcClientSecret="s",
        headplaneApiKey="hskey-api-x",
    )
    idp = External(ip="192.168.7.5")
    for app, component in (("headscale", "control-plane"), ("headplane", "ui")):
        client = pod(config, app, component, config.namespace)
        assert world.out(client, idp, 8443), app
        assert world.out(client, INTERNET, 8443), "token and key endpoints may be elsewhere"
        assert not world.out(client, idp, 22)
        assert not world.out(client, External(ip="192.168.7.6"), 8443)


def test_routers_forward_to_the_sites_routes_only_when_told_to() -> None:
    world, config = _egress_world()
    router = pod(config, "subnet-router")
    service_ip, other_pod = External(ip="10.96.4.4"), Pod(namespace="elsewhere", labels={"app": "db"})
    assert not world.out(router, service_ip, 5432)
    assert not world.out(router, other_pod, 5432)
    assert world.out(router, pod(config, "tailnet-gateway"), 6443), "the gateway's proxies stay reachable"
    world, config = _egress_world(networkPolicy={**API_CIDRS, "routersReachRoutes": True})
    assert world.out(router, service_ip, 5432)
    assert world.out(router, other_pod, 5432, "UDP")
    assert not world.out(router, External(ip="10.50.0.1"), 5432), "outside the routes"
    assert not world.out(router, METADATA, 80)


def test_kernel_routers_reach_the_gateway_in_its_namespace_and_the_api_on_its_port() -> None:
    world, config = _egress_world(
        gateway={"routers": {"mode": "kernel"}}, networkPolicy={**API_CIDRS, "apiServerPort": 443}
    )
    router = pod(config, "subnet-router", namespace="tailnet-gateway-routers")
    assert world.out(router, pod(config, "tailnet-gateway"), 6443)
    assert world.out(router, api_server(config), 443)
    assert not world.out(router, api_server(config), 6443)
    assert {p["metadata"]["namespace"] for p in world.policies if p["metadata"]["name"] == DEFAULT_DENY_EGRESS} == {
        "headscale",
        "tailnet-gateway",
        "tailnet-gateway-routers",
    }


def test_the_replica_path_proxy_reaches_postgres_and_volsync_its_repository() -> None:
    proxies = [{"name": "postgres", "port": 5432, "targetHost": "headscale-db-rw.headscale.svc", "targetPort": 5432}]
    world, config = _egress_world(database=DATABASE, gateway={"services": {"proxies": proxies}})
    instance = Pod(
        namespace=config.namespace, labels={"cnpg.io/cluster": "headscale-db", "cnpg.io/podRole": "instance"}
    )
    gateway = pod(config, "tailnet-gateway")
    assert world.out(gateway, instance, 5432)
    assert not world.out(gateway, pod(config, "headscale", "control-plane", config.namespace), 5432)
    backup = {**section("hydra", "backup"), "local": {"storage": "persistent"}, "volsync": {"repository": "restic"}}
    world, config = _egress_world(backup=backup, networkPolicy={**API_CIDRS, "volsyncCidrs": ["192.168.9.0/24"]})
    mover = Pod(namespace=config.namespace, labels={"app.kubernetes.io/created-by": "volsync"})
    assert world.out(mover, External(ip="192.168.9.9"), 9000)
    assert not world.out(mover, INTERNET, 443), "the listed repository replaces the internet"
    assert not world.out(mover, METADATA, 80)
