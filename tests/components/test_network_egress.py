"""Egress: default-deny in every namespace the program owns, and each workload reaches exactly what it needs.

Both stacks and every option set of tests/support/option_sets.py are rendered and evaluated
(tests/support/netpol.py): each needed flow is allowed on both sides in Cilium's reading (no ipBlock selects a pod),
each stranger's flow is denied in the permissive reading (an ipBlock matches pod addresses too, as with Calico), so
both hold on either CNI. Then the component's refusals, the destination helpers, the config and the options.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from headscale_ha.components import gateway as gateway_module
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
from headscale_ha.components.settings import DatabaseStage, NetworkPolicy, Role
from headscale_ha.program.args import gateway_proxies
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.network import network_args
from tests.support.config_samples import STORE_KEYS, STORE_SECRETS, parse, section
from tests.support.netpol import External, Pod, namespaces_of, network_policies_of
from tests.support.netpol_world import INGRESS, INTERNET, LAN_CLIENT, OUTSIDE, STRANGER, World, gateway_ports, rendered
from tests.support.option_sets import ALL_SETS, option_set_config, option_set_run
from tools.harness import PROJECT_DIR

KUBE_DNS = Pod(namespace="kube-system", labels={"k8s-app": "kube-dns"}, ip="10.244.200.10", name="coredns")
CLUSTERMESH = Pod(namespace="kube-system", labels={"k8s-app": "clustermesh-apiserver"}, ip="10.244.200.11")
METADATA, METADATA_V6 = External(ip="169.254.169.254"), External(ip="fd00:ec2::254")
NFS_SERVER = External(ip="192.168.50.5")  # the export, outside both clusters, on the LAN
#: What no pod may open, whatever it is: the metadata service, the NFS server itself (the kubelet mounts the
#: export on the node), a pod of another namespace, a LAN host.
STRANGERS = (
    (METADATA, 80, "TCP"),
    (METADATA_V6, 80, "TCP"),
    (NFS_SERVER, 2049, "TCP"),
    (NFS_SERVER, 2049, "UDP"),
    (NFS_SERVER, 111, "TCP"),
    (STRANGER, 8080, "TCP"),
    (STRANGER, 443, "TCP"),
    (STRANGER, 41641, "UDP"),
    (LAN_CLIENT, 22, "TCP"),
)
API_CIDRS = {"apiServerCidrs": ["10.10.0.0/24"]}
DATABASE = {"stage": "postgres", "postgres": {"instances": 3, "objectStore": {"destinationPath": "s3://wal/hydra"}}}


def api_server(config: StackConfig) -> External:
    """An endpoint of the API server, as the routers reach it after the `kubernetes` Service's DNAT."""
    network = ipaddress.ip_network(config.network_policy.api_server_cidrs[0])
    return External(ip=str(network[0] if network.num_addresses == 1 else network[1]))


def proxy_target(config: StackConfig, world: World, host: str) -> Pod | External | list[Pod]:
    """Where a gateway proxy's connection lands: an address, the cluster's clustermesh pod, or the database."""
    try:
        return External(ip=str(ipaddress.ip_address(host)))
    except ValueError:
        pass
    if host.startswith("headscale-db-"):
        return world.instances()
    assert host.endswith(".kube-system.svc.cluster.local"), host
    return CLUSTERMESH


# ----------------------------------------------------------------------------- both stacks, every option set


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_every_pod_reaches_what_it_needs_and_nothing_else(option_set: str, project_copy, stack_outputs) -> None:
    objects = option_set_run(option_set, project_copy, stack_outputs).kubernetes_objects()
    config = option_set_config(option_set, project_copy)
    world = World.of(objects)
    denies = {
        p["metadata"]["namespace"]: p["spec"] for p in world.policies if p["metadata"]["name"] == DEFAULT_DENY_EGRESS
    }
    assert denies == {namespace: {"podSelector": {}, "policyTypes": ["Egress"]} for namespace in namespaces_of(objects)}
    pods = list(world.pods.values())
    for pod in pods:
        for stranger, port, protocol in STRANGERS:
            assert not world.out(pod, stranger, port, protocol), (pod.name, stranger, port, protocol)
    api, api_port = api_server(config), config.network_policy.api_server_port
    gateway = world.pod(gateway_module.SERVICES)
    # The API server: the routers (state Secrets), CloudNativePG and Headscale while it runs on SQLite (its position
    # recorder patches the served witness); the gateway only when its proxy targets it. Never Headplane.
    expected = {p.name for p in [*world.apps(gateway_module.ROUTERS), *world.instances()]}
    if config.database.stage is not DatabaseStage.POSTGRES and config.backup.auth.record_position:
        expected.add("headscale")
    if any(p.target_host == api.ip and p.target_port == api_port for p in gateway_proxies(config)):
        expected.add(gateway.name)
    assert {p.name for p in pods if world.out(p, api, api_port)} == expected
    # DNS: everyone who resolves a name; the state exporter and the rehearsals read files, nothing else.
    silent = {p.name for p in pods if not world.connects(p, KUBE_DNS, 53, "UDP")}
    readers = {p.name for p in pods if p.name.endswith("-restore-rehearsal") or p.name == "headscale-ha-exporter"}
    assert silent == readers
    for pod in world.pods.values():
        assert world.connects(pod, KUBE_DNS, 53, "TCP") == (pod.name not in readers), "answers too long for UDP"
        if pod.name in readers:
            assert not world.out(pod, INTERNET, 443), pod.name
    _control_plane_reaches(world, config)
    _gateway_reaches(world, config, objects)


def _control_plane_reaches(world: World, config: StackConfig) -> None:
    """Headscale, Headplane, the migration Job, CloudNativePG and VolSync's movers."""
    headscale, instances, oidc = world.pod("headscale"), world.instances(), config.headscale.oidc is not None
    stage = config.database.stage
    assert world.connects(headscale, INTERNET, 443), "the DERP maps"
    assert not world.out(headscale, INTERNET, 80)
    assert not world.out(headscale, INTERNET, 3478, "UDP")
    assert not world.connects(STRANGER, headscale, 9090), "another namespace still cannot scrape Headscale"
    for instance in instances:
        assert world.connects(headscale, instance, 5432) == (stage is DatabaseStage.POSTGRES)
        assert not world.out(headscale, instance, 8000)
    for headplane in world.apps("headplane"):
        assert world.connects(headplane, headscale, 8080), "Headscale's API"
        assert not world.out(headplane, headscale, 9090)
        assert world.out(headplane, INTERNET, 443) == oidc, "the OIDC issuer"
        assert not any(world.out(headplane, instance, 5432) for instance in instances)
    for job in world.apps("headscale-migrate"):
        assert all(world.connects(job, instance, 5432) for instance in instances)
        assert world.out(job, INTERNET, 443) == oidc, "configtest sets up the OIDC provider"
    for instance in instances:
        assert all(
            world.connects(instance, other, 5432) and world.connects(instance, other, 8000) for other in instances
        )
        assert world.out(instance, INTERNET, 443), "the object store"
        assert not world.out(instance, INTERNET, 5432)
        assert not world.out(instance, headscale, 8080)
        postgres = config.database.postgres
        if config.role is Role.STANDBY and postgres.streaming_host is not None:
            assert world.out(instance, External(ip=postgres.streaming_host), 5432), "the active's PostgreSQL"
    movers = [p for p in world.pods.values() if p.labels.get("app.kubernetes.io/created-by") == "volsync"]
    assert bool(movers) == (config.backup.volsync is not None)
    for mover in movers:
        assert world.connects(mover, INTERNET, 443), "the restic repository"
        assert not world.out(mover, INTERNET, 22)
        assert not world.out(mover, headscale, 8080)


def _gateway_reaches(world: World, config: StackConfig, objects: list[dict[str, Any]]) -> None:
    """The proxies reach their targets only; the routers their control server, DERP, peers and the gateway."""
    gateway, headscale = world.pod(gateway_module.SERVICES), world.pod("headscale")
    for proxy in gateway_proxies(config):
        target = proxy_target(config, world, proxy.target_host)
        for destination in target if isinstance(target, list) else [target]:
            assert world.connects(gateway, destination, proxy.target_port), proxy.name
    assert not world.out(gateway, INTERNET, 443)
    assert not world.out(gateway, headscale, 8080)
    assert not world.out(gateway, CLUSTERMESH, 443), "the clustermesh proxy's port only"
    public = [External(ip=site.public_address) for site in config.tailnet.sites if site.public_address]
    for router in world.apps(gateway_module.ROUTERS):
        for port, protocol in gateway_ports(objects, gateway):
            assert world.connects(router, gateway, port, protocol), (port, protocol)
        for port, protocol in ((443, "TCP"), (80, "TCP"), (3478, "UDP"), (41641, "UDP"), (50123, "UDP")):
            assert world.connects(router, INTERNET, port, protocol), (port, protocol)
        assert all(world.connects(router, address, 443) for address in public), "the control server"
        assert world.connects(router, headscale, 3478, "UDP") == config.headscale.derp.embedded, "STUN, in-cluster"
        assert world.out(router, INGRESS, 443) == ("ingress-nginx" in config.network_policy.ingress_namespaces)
        assert not world.out(router, INTERNET, 22)
        assert not world.out(router, headscale, 8080), "through the public URL, never the pod"
        assert not any(world.out(router, instance, 5432) for instance in world.instances())


def test_the_default_deny_and_an_allow_policy_are_exactly_these(run_stack) -> None:
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p
        for p in network_policies_of(run_stack("hydra").kubernetes_objects())
    }
    assert policies["headscale", DEFAULT_DENY_EGRESS] == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DEFAULT_DENY_EGRESS,
            "namespace": "headscale",
            "labels": labels(DEFAULT_DENY_EGRESS, "network-policy"),
        },
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]},
    }
    dns = {
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        "to": [
            {
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            }
        ],
    }
    selector = {"app.kubernetes.io/name": "headplane", "app.kubernetes.io/part-of": "headscale-ha"}
    assert policies["headscale", "headplane-egress"]["spec"] == {
        "podSelector": {"matchLabels": selector},
        "policyTypes": ["Egress"],
        "egress": [
            dns,
            {
                "ports": [{"protocol": "TCP", "port": 8080}],
                "to": [{"podSelector": {"matchLabels": {**selector, "app.kubernetes.io/name": "headscale"}}}],
            },
        ],
    }
    assert policies["tailnet-gateway", "tailnet-gateway-egress"]["spec"]["egress"] == [
        dns,
        {"ports": [{"protocol": "TCP", "port": 6443}], "to": [{"ipBlock": {"cidr": "10.10.0.10/32"}}]},
        {"ports": [{"protocol": "TCP", "port": 50000}], "to": [{"ipBlock": {"cidr": "10.10.0.10/32"}}]},
        {
            "ports": [{"protocol": "TCP", "port": 2379}],
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
        },
    ]


def test_headscale_reaches_what_it_needs_to_start(run_stack) -> None:
    """Headscale stops at start when a DERP map cannot be fetched (and, with onlyStartIfAvailable, when the OIDC
    issuer is unreachable): its policy lets it reach every map's host and port, and docs/installation.md says so."""
    for stack in ("hydra", "cosmos"):
        world = World.of(run_stack(stack).kubernetes_objects())
        config = parse(stack)
        for url in config.headscale.derp.urls:
            _, port = url_endpoint(url)
            assert world.connects(world.pod("headscale"), INTERNET, port), url
    page = (PROJECT_DIR / "docs" / "installation.md").read_text()
    prerequisites = page.split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    for default_map in parse("hydra").headscale.derp.urls:
        assert default_map in prerequisites
    assert "onlyStartIfAvailable" in prerequisites
    assert "networkPolicy.apiServerCidrs" in prerequisites


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
    settings = NetworkPolicy(egressHosts={"idp.lan.example.com": ["192.168.7.0/24"]}, egressInternetCidrs=["0.0.0.0/0"])
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
    assert host_destinations("example.org", NetworkPolicy(egressInternetCidrs=[])) == []
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
