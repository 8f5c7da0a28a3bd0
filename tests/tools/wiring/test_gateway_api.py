"""Gateway API: parents, listeners and the attachment rules, backends, ReferenceGrants, listener certificates."""

from __future__ import annotations

from typing import Any

from tests.support.wiring_objects import (
    NS,
    certificate,
    check,
    container,
    deployment,
    meta,
    only,
    pod_spec,
    service,
    web,
)
from tools.wiring import External


def gateway(listeners: list[dict[str, Any]] | None = None, name: str = "gw", ns: str = NS) -> dict[str, Any]:
    default = [
        {
            "name": "https",
            "port": 443,
            "protocol": "HTTPS",
            "hostname": "a.example.com",
            "tls": {"certificateRefs": [{"kind": "Secret", "name": "public-tls"}]},
        },
        {"name": "http", "port": 80, "protocol": "HTTP"},
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": meta(name, ns),
        "spec": {"gatewayClassName": "cilium", "listeners": default if listeners is None else listeners},
    }


def route(kind: str = "HTTPRoute", parent: dict | None = None, backends=None, ns: str = NS, **spec: Any) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": kind,
        "metadata": meta("r", ns),
        "spec": {
            "parentRefs": [parent or {"name": "gw", "sectionName": "https"}],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}] if backends is None else backends}],
            **spec,
        },
    }


SITE = (web(), service(), certificate())


def test_a_sound_gateway_setup() -> None:
    assert check(*SITE, gateway(), route(hostnames=["a.example.com"])) == []


def test_route_backend_service_must_exist_with_port() -> None:
    missing = only(check(*SITE, gateway(), route(backends=[{"name": "api", "port": 80}])))
    assert (missing.path, "BackendNotFound" in missing.message) == ("spec.rules[0].backendRefs[0]", True)
    wrong_port = only(check(*SITE, gateway(), route(backends=[{"name": "web", "port": 8080}])))
    assert wrong_port.path == "spec.rules[0].backendRefs[0].port"
    assert len(check(*SITE, gateway(), route(backends=[{"name": "web"}]))) == 1


def test_route_backend_of_another_kind_is_not_checked() -> None:
    assert check(*SITE, gateway(), route(backends=[{"group": "example.com", "kind": "Bucket", "name": "b"}])) == []


def test_route_cross_namespace_backend_needs_a_reference_grant() -> None:
    backends = [{"name": "web", "namespace": "other", "port": 80}]
    other = (
        deployment(pod_spec(container(ports=[{"name": "http", "containerPort": 8080}])), ns="other"),
        service(ns="other"),
    )
    assert "RefNotPermitted" in only(check(*SITE, *other, gateway(), route(backends=backends))).message
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": meta("allow", "other"),
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": NS}],
            "to": [{"group": "", "kind": "Service"}],
        },
    }
    assert check(*SITE, *other, grant, gateway(), route(backends=backends)) == []


def test_route_parent_gateway_must_resolve() -> None:
    assert "never be Accepted" in only(check(*SITE, route())).message
    external = External(kind="Gateway", namespace=NS, name="gw", created_by="the platform team")
    assert check(*SITE, route(), externals=[external]) == []


def test_route_section_name_must_be_a_listener() -> None:
    finding = only(check(*SITE, gateway(), route(parent={"name": "gw", "sectionName": "grpc"})))
    assert (finding.path, "NoMatchingParent" in finding.message) == ("spec.parentRefs[0].sectionName", True)
    assert check(*SITE, gateway(), route(parent={"name": "gw", "sectionName": "http"})) == []


def test_route_must_be_attachable_to_the_listener() -> None:
    tls_route = route("TLSRoute", parent={"name": "gw", "sectionName": "https"})
    assert "protocol HTTPS does not carry TLSRoute" in only(check(*SITE, gateway(), tls_route)).message
    elsewhere = route(ns="other", backends=[], parent={"name": "gw", "namespace": NS, "sectionName": "https"})
    assert "only takes routes from namespace 'app'" in only(check(gateway(), certificate(), elsewhere)).message
    listeners = gateway()["spec"]["listeners"]
    listeners[0]["allowedRoutes"] = {"namespaces": {"from": "All"}}
    assert check(gateway(listeners), certificate(), elsewhere) == []
    hosts = route(hostnames=["b.example.com"])
    assert "NoMatchingListenerHostname" in only(check(*SITE, gateway(), hosts)).message
    wildcard = gateway([{**gateway()["spec"]["listeners"][0], "hostname": "*.example.com"}])
    assert check(*SITE, wildcard, route(hostnames=["a.example.com"])) == []


def test_gateway_certificate_refs() -> None:
    finding = only(check(gateway()))
    assert (finding.path, "InvalidCertificateRef" in finding.message) == (
        "spec.listeners[0].tls.certificateRefs[0]",
        True,
    )
    assert check(gateway(), certificate()) == []
    external = External(kind="Secret", namespace=NS, name="public-tls", created_by="the user")
    assert check(gateway(), externals=[external]) == []
