"""Egress over whole stacks: default-deny in every namespace the program owns, and each workload of both stacks
and of every option set of tests/support/option_sets.py reaches exactly what it needs.

The rendered policies are evaluated (tests/models/netpol/netpol.py): each needed flow is allowed on both sides in
Cilium's reading (no ipBlock selects a pod), each stranger's flow is denied in the permissive reading (an ipBlock
matches pod addresses too, as with Calico), so both hold on either CNI. The component's refusals, the destination
helpers and the options evaluated at the Args are in tests/components/test_network_egress.py.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from headscale_ha.components import gateway_services, subnet_routers
from headscale_ha.components.network_egress import url_endpoint
from headscale_ha.components.network_policy import (
    DEFAULT_DENY_EGRESS,
)
from headscale_ha.components.pod import labels
from headscale_ha.components.settings import DatabaseStage, Role
from headscale_ha.program.args import gateway_proxies
from headscale_ha.program.config import StackConfig
from tests.models.netpol.netpol import External, Pod, namespaces_of, network_policies_of
from tests.models.netpol.netpol_world import INGRESS, INTERNET, LAN_CLIENT, STRANGER, World, gateway_ports
from tests.support.config_samples import parse
from tests.support.option_sets import ALL_SETS, option_set_config, option_set_run
from tests.support.site_netpol import KUBE_DNS, METADATA, METADATA_V6, api_server
from tools.harness import PROJECT_DIR

CLUSTERMESH = Pod(namespace="kube-system", labels={"k8s-app": "clustermesh-apiserver"}, ip="10.244.200.11")
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
    gateway = world.pod(gateway_services.SERVICES)
    # The API server: the routers (state Secrets), CloudNativePG and Headscale while it runs on SQLite (its position
    # recorder patches the served witness); the gateway only when its proxy targets it. Never Headplane.
    expected = {p.name for p in [*world.apps(subnet_routers.ROUTERS), *world.instances()]}
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
        headplane_oidc = oidc and bool(config.headplane.oidc_login)
        assert world.out(headplane, INTERNET, 443) == headplane_oidc, "the OIDC issuer, with Headplane's OIDC login"
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
    gateway, headscale = world.pod(gateway_services.SERVICES), world.pod("headscale")
    for proxy in gateway_proxies(config):
        target = proxy_target(config, world, proxy.target_host)
        for destination in target if isinstance(target, list) else [target]:
            assert world.connects(gateway, destination, proxy.target_port), proxy.name
    assert not world.out(gateway, INTERNET, 443)
    assert not world.out(gateway, headscale, 8080)
    assert not world.out(gateway, CLUSTERMESH, 443), "the clustermesh proxy's port only"
    public = [External(ip=site.public_address) for site in config.tailnet.sites if site.public_address]
    for router in world.apps(subnet_routers.ROUTERS):
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
