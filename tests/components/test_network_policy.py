"""NetworkPolicies: the component's refusals and ordering, and who may connect for the options that change it,
evaluated on the policies rendered from the Args (tests/models/netpol/netpol.py), with no stack planned.

The intended flows of both stacks and every option set, and the stacks' own settings (policies off, the gateway
LoadBalancer's source ranges) are in tests/program/test_site_network_policy.py; what each pod may reach (egress)
is in test_network_egress.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from headscale_ha.components import gateway_services, subnet_routers
from headscale_ha.components.gateway_services import GatewayServices
from headscale_ha.components.network_policy import (
    DEFAULT_DENY,
    Allow,
    NamespacePolicies,
    Port,
    Protected,
)
from headscale_ha.components.pod import labels
from headscale_ha.program.network_ingress import ingress_policies
from tests.models.netpol.netpol import (
    External,
    Pod,
    network_policies_of,
)
from tests.models.netpol.netpol_world import INGRESS, INTERNET, OUTSIDE, STRANGER, World, rendered
from tests.support.component_run import build_component
from tests.support.config_samples import STORE_KEYS, STORE_SECRETS, parse
from tests.support.seam_samples import gateway_services_sample
from tests.support.site_netpol import DATABASE, OPERATOR, PROMETHEUS, TAILNET_CLIENT

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


# ----------------------------------------------------------------------- options that change the flows


def _world(config_overrides: dict[str, Any], *, stack: str = "hydra") -> tuple[World, dict[str, Pod]]:
    """Policies of a config rendered from its Args, and the pods the program would run (by their labels)."""
    config = parse(stack, secret_keys=STORE_SECRETS, **STORE_KEYS, **config_overrides)
    objects = rendered(ingress_policies(config))
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
    assert not world.can(STRANGER, router, subnet_routers.HEALTH_PORT)
    assert {p["metadata"]["namespace"] for p in world.policies} == {
        "headscale",
        "tailnet-gateway",
        "tailnet-gateway-routers",
    }


# ------------------------------------------------------------------------------- the gateway LoadBalancer


def test_a_bad_source_range_is_refused_with_its_key() -> None:
    from headscale_ha.program.config import ConfigError

    with pytest.raises(ConfigError, match="loadBalancerSourceRanges"):
        parse("hydra", gateway={"services": {"loadBalancerSourceRanges": ["10.0.0.0/33"]}})


def test_the_gateway_load_balancer_admits_any_source_unless_given_ranges() -> None:
    """At the component seam: GatewayServices alone, from hand-written Args."""

    def service(**overrides: object) -> dict:
        run = build_component(lambda: GatewayServices("gateway", gateway_services_sample(**overrides)))
        (found,) = [
            o
            for o in run.kubernetes_objects()
            if o["kind"] == "Service" and o["metadata"]["name"] == gateway_services.SERVICES
        ]
        return found["spec"]

    default = service()
    assert "loadBalancerSourceRanges" not in default, "default: any source (the policies admit routers only)"
    assert default["externalTrafficPolicy"] == "Cluster"
    ranged = service(load_balancer_source_ranges=("10.244.0.0/16", "100.64.0.0/10"))
    assert ranged["loadBalancerSourceRanges"] == ["10.244.0.0/16", "100.64.0.0/10"]
    assert ranged["externalTrafficPolicy"] == "Cluster"
