"""NetworkPolicies: default-deny ingress in every namespace the program owns, and exactly the intended flows in.

The flows are proven by evaluating the rendered policies (tests/support/netpol.py) for both stacks and every
option set of tests/support/option_sets.py, then for the options that change who may connect. What each pod may reach
(egress) is proven in test_network_egress.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from headscale_ha.components import gateway as gateway_module
from headscale_ha.components.network_policy import (
    DEFAULT_DENY,
    Allow,
    NamespacePolicies,
    Port,
    Protected,
)
from headscale_ha.components.pod import labels
from headscale_ha.program.args import gateway_services_args, network_policies_args
from tests.support.config_samples import STORE_KEYS, STORE_SECRETS, parse
from tests.support.netpol import (
    External,
    Pod,
    namespaces_of,
    network_policies_of,
)
from tests.support.netpol_world import INGRESS, INTERNET, LAN_CLIENT, OUTSIDE, STRANGER, World, gateway_ports, rendered
from tests.support.option_sets import ALL_SETS, option_set_run

PROMETHEUS = Pod(namespace="monitoring", labels={"app.kubernetes.io/name": "prometheus"}, ip="10.244.8.8")
OPERATOR = Pod(namespace="cnpg-system", labels={"app.kubernetes.io/name": "cloudnative-pg"}, ip="10.244.9.9")
TAILNET_CLIENT = External(ip="100.64.0.7")
TAILNET_CLIENT_V6 = External(ip="fd7a:115c:a1e0::7")
DATABASE = {"stage": "postgres", "postgres": {"instances": 3, "objectStore": {"destinationPath": "s3://wal/hydra"}}}


# ----------------------------------------------------------------------------------------- the component


def test_an_empty_from_or_empty_ports_is_refused_because_it_would_admit_everything() -> None:
    with pytest.raises(ValueError, match="empty sources"):
        Allow(ports=(Port(80),), sources=(), why="nobody")
    with pytest.raises(ValueError, match="no ports"):
        Allow(ports=(), sources=None, why="everything")
    with pytest.raises(ValueError, match="open the whole namespace"):
        Protected(name="all", pods={}, allows=())
    with pytest.raises(ValueError, match="expected 1-65535"):
        Port(53, "ICMP")


def test_default_deny_comes_first_and_names_are_unique() -> None:
    web = Protected(name="web", pods={"app": "web"}, allows=(Allow(ports=(Port(80),), sources=None, why="any"),))
    specs = NamespacePolicies(namespace="n", protected=(web,)).specs()
    assert list(specs) == [DEFAULT_DENY, "web"]
    assert specs[DEFAULT_DENY] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert specs["web"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 80}]}]
    with pytest.raises(ValueError, match="two NetworkPolicies named 'web'"):
        NamespacePolicies(namespace="n", protected=(web, web)).specs()


# ------------------------------------------------------------------- both stacks and every option set


@pytest.mark.parametrize("option_set", ALL_SETS)
def test_rendered_policies_admit_the_intended_flows_and_nothing_else(
    option_set: str, project_copy, stack_outputs
) -> None:
    objects = option_set_run(option_set, project_copy, stack_outputs).kubernetes_objects()
    world = World.of(objects)
    owned = namespaces_of(objects)
    # Default-deny in every namespace the program owns, and every pod it renders is isolated by one.
    deny = {p["metadata"]["namespace"] for p in world.policies if p["metadata"]["name"] == DEFAULT_DENY}
    assert deny == set(owned)
    assert all(
        p["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
        for p in world.policies
        if p["metadata"]["name"] == DEFAULT_DENY
    )
    for pod in world.pods.values():
        assert not world.can(STRANGER, pod, 1), pod.name

    gateway, router, headscale = world.pod("tailnet-gateway"), world.pod("subnet-router"), world.pod("headscale")
    kernel = router.namespace != gateway.namespace
    # The gateway services (DNS and every proxy) from the routers only.
    ports = gateway_ports(objects, gateway)
    assert (gateway_module.DNS_PORT, "UDP") in ports
    assert (6443, "TCP") in ports
    for port, protocol in ports:
        assert world.can(router, gateway, port, protocol), (port, protocol)
        assert world.can(TAILNET_CLIENT, gateway, port, protocol) == kernel, "unmasqueraded tailnet clients"
        assert world.can(TAILNET_CLIENT_V6, gateway, port, protocol) == kernel
        for stranger in (STRANGER, headscale, LAN_CLIENT, INTERNET, PROMETHEUS):
            assert not world.can(stranger, gateway, port, protocol), (stranger, port)
    # A pod started in the gateway namespace (a debug pod, a compromised image) is no router.
    debug = Pod(namespace=gateway.namespace, labels={"app": "debug"})
    assert not world.can(debug, gateway, 6443)
    assert not any(world.can(debug, instance, 5432) for instance in world.instances())
    # Labels are no passport: a pod elsewhere wearing the routers' labels is still refused.
    impostor = Pod(namespace="elsewhere", labels=router.labels, ip="10.244.5.5")
    assert not world.can(impostor, gateway, 6443)
    if kernel:
        in_gateway_namespace = Pod(namespace=gateway.namespace, labels=router.labels)
        assert not world.can(in_gateway_namespace, gateway, 6443), "kernel routers live in their own namespace"
    # The routers admit nothing (tunnels are outbound; the kubelet probes their health port).
    for source in (STRANGER, gateway, headscale, INTERNET, TAILNET_CLIENT):
        assert not world.can(source, router, gateway_module.HEALTH_PORT)

    # Headscale: HTTP from the ingress data plane (no source named: any), metrics from monitoring only.
    assert world.can(INGRESS, headscale, 8080)
    assert world.can(PROMETHEUS, headscale, 9090)
    assert not world.can(STRANGER, headscale, 9090)
    assert not world.can(gateway, headscale, 9090)
    stun = any(o["kind"] == "Service" and o["metadata"]["name"] == "headscale-stun" for o in objects)
    assert world.can(INTERNET, headscale, 3478, "UDP") == stun
    headplane = [p for p in world.pods.values() if p.labels.get("app.kubernetes.io/name") == "headplane"]
    for pod in headplane:
        assert world.can(pod, headscale, 8080)
        assert world.can(INGRESS, pod, 3000)
        assert not world.can(STRANGER, pod, 9090)

    # PostgreSQL: Headscale, the migration Job, the operator, the instances; nobody else.
    instances = world.instances()
    assert bool(instances) == any(o["kind"] == "Cluster" for o in objects)
    migration = [p for p in world.pods.values() if p.labels.get("app.kubernetes.io/name") == "headscale-migrate"]
    for instance in instances:
        assert world.can(headscale, instance, 5432)
        assert all(world.can(job, instance, 5432) for job in migration)
        assert world.can(OPERATOR, instance, 8000)
        assert world.can(OPERATOR, instance, 5432)
        assert all(world.can(other, instance, 5432) and world.can(other, instance, 8000) for other in instances)
        assert world.can(PROMETHEUS, instance, 9187)
        assert not world.can(PROMETHEUS, instance, 5432)
        for stranger in (STRANGER, router, gateway, INTERNET, TAILNET_CLIENT, *headplane):
            assert not world.can(stranger, instance, 5432), stranger
        assert not world.can(headscale, instance, 8000), "the status API is the operator's"


# ----------------------------------------------------------------------- options that change the flows


def _world(config_overrides: dict[str, Any], *, stack: str = "hydra") -> tuple[World, dict[str, Pod]]:
    """Policies of a config rendered from its Args, and the pods the program would run (by their labels)."""
    config = parse(stack, secret_keys=STORE_SECRETS, **STORE_KEYS, **config_overrides)
    objects = rendered(network_policies_args(config))
    namespaces = {item["metadata"]["namespace"]: {} for item in objects}
    pods = {
        "headscale": Pod(namespace=config.namespace, labels=labels("headscale", "control-plane")),
        "headplane": Pod(namespace=config.namespace, labels=labels("headplane", "ui")),
        "gateway": Pod(namespace=config.gateway.namespace, labels=labels("tailnet-gateway", "gateway")),
        "router": Pod(namespace=config.gateway.namespace, labels=labels("subnet-router", "gateway")),
        "db": Pod(
            namespace=config.namespace, labels={"cnpg.io/cluster": "headscale-db", "cnpg.io/podRole": "instance"}
        ),
    }
    return World(network_policies_of(objects), {**OUTSIDE, **namespaces}, {}), pods


def test_named_ingress_sources_replace_any_source_on_the_public_ports() -> None:
    world, pods = _world({"networkPolicy": {"ingressNamespaces": ["ingress-nginx"], "ingressCidrs": ["10.0.0.0/24"]}})
    for destination, port in ((pods["headscale"], 8080), (pods["headplane"], 3000)):
        assert world.can(INGRESS, destination, port)
        assert world.can(External(ip="10.0.0.9"), destination, port)
        assert not world.can(STRANGER, destination, port)
        assert not world.can(INTERNET, destination, port)
    assert world.can(pods["headplane"], pods["headscale"], 8080), "Headplane always reaches Headscale"
    assert not world.can(pods["gateway"], pods["headscale"], 9090)


def test_metrics_follow_the_monitoring_namespace() -> None:
    world, pods = _world({"networkPolicy": {"monitoringNamespace": "prometheus"}})
    prometheus = Pod(namespace="prometheus", labels={})
    assert world.can(prometheus, pods["headscale"], 9090)
    assert not world.can(PROMETHEUS, pods["headscale"], 9090), "the default namespace is no longer admitted"


def test_the_operator_namespace_is_configurable() -> None:
    world, pods = _world({"database": DATABASE, "networkPolicy": {"cnpgOperatorNamespace": "postgres-operator"}})
    assert world.can(Pod(namespace="postgres-operator", labels={}), pods["db"], 8000)
    assert not world.can(OPERATOR, pods["db"], 8000)


def test_the_replica_path_admits_the_gateway_proxy_that_forwards_to_postgres() -> None:
    """A standby streams from the active's PostgreSQL through the active's gateway: tailnet → router → proxy → DB."""
    proxies = [
        {"name": "kube-api", "port": 6443, "targetHost": "10.10.0.10", "targetPort": 6443},
        {
            "name": "postgres",
            "port": 5432,
            "targetHost": "headscale-db-rw.headscale.svc.cluster.local",
            "targetPort": 5432,
        },
    ]
    world, pods = _world({"database": DATABASE, "gateway": {"services": {"proxies": proxies}}})
    assert world.can(pods["router"], pods["gateway"], 5432), "the routers reach the proxy"
    assert world.can(pods["gateway"], pods["db"], 5432), "the proxy reaches PostgreSQL"
    assert not world.can(pods["router"], pods["db"], 5432), "only through the proxy"
    assert not world.can(pods["gateway"], pods["headscale"], 9090)
    world, pods = _world({"database": DATABASE, "gateway": {"services": {"proxies": proxies[:1]}}})
    assert not world.can(pods["gateway"], pods["db"], 5432), "no proxy to the database: no path"


def test_kernel_routers_reach_the_gateway_from_their_own_namespace() -> None:
    world, pods = _world({"gateway": {"routers": {"mode": "kernel"}}})
    router = Pod(namespace="tailnet-gateway-routers", labels=pods["router"].labels)
    assert world.can(router, pods["gateway"], 6443)
    assert world.can(TAILNET_CLIENT, pods["gateway"], 1053, "UDP")
    assert not world.can(pods["router"], pods["gateway"], 6443), "router labels in the gateway namespace"
    assert not world.can(STRANGER, router, gateway_module.HEALTH_PORT)
    assert {p["metadata"]["namespace"] for p in world.policies} == {
        "headscale",
        "tailnet-gateway",
        "tailnet-gateway-routers",
    }


def test_disabled_policies_render_none(project_copy, stack_outputs) -> None:
    project = project_copy(
        lab="config:\n  headscale-ha:role: active\n"
        "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
        "  headscale-ha:networkPolicy: {enabled: false}\n"
    )
    from tools.plan import plan_stack

    objects = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs).kubernetes_objects()
    assert network_policies_of(objects) == []


# ------------------------------------------------------------------------------- the gateway LoadBalancer


def test_the_gateway_load_balancer_takes_source_ranges(run_stack) -> None:
    config = parse("hydra", gateway={"services": {"loadBalancerSourceRanges": ["10.244.0.0/16", "100.64.0.0/10"]}})
    assert gateway_services_args(config).load_balancer_source_ranges == ("10.244.0.0/16", "100.64.0.0/10")
    assert gateway_services_args(parse("hydra")).load_balancer_source_ranges == ()
    (service,) = [
        o
        for o in run_stack("hydra").kubernetes_objects()
        if o["kind"] == "Service" and o["metadata"]["name"] == gateway_module.SERVICES
    ]
    assert "loadBalancerSourceRanges" not in service["spec"], "default: any source (the policies admit routers only)"
    assert service["spec"]["externalTrafficPolicy"] == "Cluster"


def test_a_bad_source_range_is_refused_with_its_key() -> None:
    from headscale_ha.program.config import ConfigError

    with pytest.raises(ConfigError, match="loadBalancerSourceRanges"):
        parse("hydra", gateway={"services": {"loadBalancerSourceRanges": ["10.0.0.0/33"]}})


def test_source_ranges_reach_the_rendered_service(project_copy, stack_outputs) -> None:
    project = project_copy(
        lab="config:\n  headscale-ha:role: active\n"
        "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
        "  headscale-ha:gateway: {services: {loadBalancerSourceRanges: [10.244.0.0/16]}}\n"
        "  headscale-ha:networkPolicy: {apiServerCidrs: [10.10.0.0/24]}\n"
    )
    from tools.plan import plan_stack

    objects = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs).kubernetes_objects()
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == gateway_module.SERVICES]
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.244.0.0/16"]
