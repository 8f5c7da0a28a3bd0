"""Services: the selector reaches one workload's pods and the target ports are ports they declare; a
StatefulSet's governing Service is headless.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.wiring_objects import check, container, deployment, only, pod_spec, service, web, with_template


def test_service_selector_must_match_a_pod_template() -> None:
    finding = only(check(web(), service(selector={"app": "api"})))
    assert (finding.path, "no endpoints" in finding.message) == ("spec.selector", True)
    assert check(web(), service()) == []


def test_service_selector_must_not_reach_another_workloads_pods() -> None:
    """A Job's pod labelled like the server (a rehearsal, a backup) would become an endpoint of the server's
    Service: traffic would reach a pod that does not serve."""
    ports = [{"name": "http", "containerPort": 8080}]
    twin = deployment(pod_spec(container(ports=ports)), name="rehearsal")
    finding = only(check(web(), twin, service()))
    assert finding.path == "spec.selector"
    assert "matches the pods of" in finding.message
    assert "rehearsal" in finding.message
    own = deployment(pod_spec(container(ports=ports)), name="rehearsal", labels={"app": "web-rehearsal"})
    assert check(web(), own, service()) == []


def test_service_selector_looks_only_in_its_namespace() -> None:
    assert len(check(web(), service(ns="other"))) == 1


def test_service_named_target_port() -> None:
    broken = service(ports=[{"name": "m", "port": 9090, "targetPort": "metrics"}])
    assert "named 'metrics'" in only(check(web(), broken)).message
    assert check(web(), service()) == []


def test_service_numeric_target_port() -> None:
    broken = service(ports=[{"port": 80, "targetPort": 8081}])
    assert "containerPort 8081/TCP" in only(check(web(), broken)).message
    defaulted = service(ports=[{"port": 8081}])
    assert "defaults to port" in only(check(web(), defaulted)).message
    assert check(web(), service(ports=[{"port": 80, "targetPort": 8080}])) == []


def test_service_port_protocol_must_agree() -> None:
    udp = service(ports=[{"port": 53, "targetPort": 8080, "protocol": "UDP"}])
    assert "8080/UDP" in only(check(web(), udp)).message
    dns = deployment(pod_spec(container(ports=[{"containerPort": 8080, "protocol": "UDP"}])))
    assert check(dns, udp) == []


def test_service_reaches_native_sidecar_ports() -> None:
    sidecar = container("proxy", restartPolicy="Always", ports=[{"name": "proxy", "containerPort": 9000}])
    workload = deployment(pod_spec(initContainers=[sidecar]))
    assert check(workload, service(ports=[{"port": 90, "targetPort": "proxy"}])) == []
    sidecar.pop("restartPolicy")  # a plain init container serves nothing
    assert (
        len(check(deployment(pod_spec(initContainers=[sidecar])), service(ports=[{"port": 90, "targetPort": "proxy"}])))
        == 1
    )


@pytest.mark.parametrize(
    "skipped",
    [
        service(selector={}),
        service(selector={"app": "none"}, type="ExternalName", externalName="example.com"),
        service(ports=[{"name": "none", "port": 1}], clusterIP="None"),
    ],
    ids=["no-selector", "external-name", "headless-numeric"],
)
def test_services_the_rules_do_not_apply_to(skipped: dict[str, Any]) -> None:
    assert check(web(), skipped) == []


def test_headless_service_named_port_is_still_checked() -> None:
    assert len(check(web(), service(ports=[{"port": 1, "targetPort": "nope"}], clusterIP="None"))) == 1


def test_statefulset_service_name_must_be_a_headless_service() -> None:
    sts = with_template("StatefulSet", pod_spec())
    sts["spec"]["serviceName"] = "peers"
    assert "stable DNS names" in only(check(sts)).message
    assert "not headless" in only(check(sts, service("peers", selector={}))).message
    assert check(sts, service("peers", selector={}, clusterIP="None")) == []
