"""NetworkPolicies over whole stacks: default-deny ingress in every namespace the program owns and exactly the
intended flows in, for both stacks and every option set of tests/support/option_sets.py (the rendered policies
evaluated, tests/models/netpol/netpol.py); `networkPolicy.enabled: false`; the gateway LoadBalancer's source ranges from
the stack's config. The component and the options evaluated at the Args are in
tests/components/test_network_policy.py."""

from __future__ import annotations

import pytest

from headscale_ha.components import gateway_services, subnet_routers
from headscale_ha.components.network_policy import (
    DEFAULT_DENY,
)
from headscale_ha.program.args import gateway_services_args
from tests.models.netpol.netpol import (
    Pod,
    namespaces_of,
    network_policies_of,
)
from tests.models.netpol.netpol_world import INGRESS, INTERNET, LAN_CLIENT, STRANGER, World, gateway_ports
from tests.support.config_samples import parse
from tests.support.option_sets import ALL_SETS, option_set_run
from tests.support.site_netpol import OPERATOR, PROMETHEUS, TAILNET_CLIENT, TAILNET_CLIENT_V6


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
    assert (gateway_services.DNS_PORT, "UDP") in ports
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
        assert not world.can(source, router, subnet_routers.HEALTH_PORT)

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


def test_disabled_policies_render_none(project_copy, stack_outputs) -> None:
    project = project_copy(
        lab="config:\n  headscale-ha:role: active\n"
        "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
        "  headscale-ha:networkPolicy: {enabled: false}\n"
    )
    from tools.plan import plan_stack

    objects = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs).kubernetes_objects()
    assert network_policies_of(objects) == []


def test_the_gateway_load_balancer_takes_source_ranges(run_stack) -> None:
    config = parse("hydra", gateway={"services": {"loadBalancerSourceRanges": ["10.244.0.0/16", "100.64.0.0/10"]}})
    assert gateway_services_args(config).load_balancer_source_ranges == ("10.244.0.0/16", "100.64.0.0/10")
    assert gateway_services_args(parse("hydra")).load_balancer_source_ranges == ()
    (service,) = [
        o
        for o in run_stack("hydra").kubernetes_objects()
        if o["kind"] == "Service" and o["metadata"]["name"] == gateway_services.SERVICES
    ]
    assert "loadBalancerSourceRanges" not in service["spec"], "default: any source (the policies admit routers only)"
    assert service["spec"]["externalTrafficPolicy"] == "Cluster"


def test_source_ranges_reach_the_rendered_service(project_copy, stack_outputs) -> None:
    project = project_copy(
        lab="config:\n  headscale-ha:role: active\n"
        "  headscale-ha:cluster: {name: hydra, nodes: 3, apiServer: {host: 10.10.0.10}}\n"
        "  headscale-ha:gateway: {services: {loadBalancerSourceRanges: [10.244.0.0/16]}}\n"
        "  headscale-ha:networkPolicy: {apiServerCidrs: [10.10.0.0/24]}\n"
    )
    from tools.plan import plan_stack

    objects = plan_stack("lab", project_dir=project, stack_outputs=stack_outputs).kubernetes_objects()
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == gateway_services.SERVICES]
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.244.0.0/16"]
