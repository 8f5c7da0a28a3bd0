"""The package's PublicEndpoint: plain inputs in, the Python component's resources out, bad inputs named at their
schema path before anything is registered."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from headscale_ha.components import endpoint
from headscale_ha.components.settings import EndpointSettings, FailoverMode, RouteKind
from headscale_ha.package.endpoint import PublicEndpoint
from tests.support.component_run import build_component, refused
from tests.support.component_tree import subtree

HEADSCALE = {"service": "headscale", "port": 8080}
HEADPLANE = {"service": "headplane", "port": 3000}
BASE: dict[str, Any] = {
    "namespace": "headscale",
    "hostname": "vpn.example.org",
    "headscale": HEADSCALE,
    "primary_site": "hydra",
}

CASES: dict[str, dict[str, Any]] = {
    "gateway-headplane-k8gb": {
        **BASE,
        "headplane": HEADPLANE,
        "endpoint": {"failover": FailoverMode.K8GB, "ttl": 30, "gateway_class": "envoy"},
    },
    "ingress-alone-external-dns": {
        **BASE,
        "endpoint": {
            "failover": FailoverMode.EXTERNAL_DNS,
            "route": RouteKind.INGRESS,
            "ingress_class": "nginx",
            "tls_issuer": "internal",
            "tls_issuer_kind": "Issuer",
        },
        "dns_record_target": "203.0.113.7",
    },
    "ingress-headplane-standby": {
        **BASE,
        "headplane": HEADPLANE,
        "endpoint": {"failover": FailoverMode.EXTERNAL_DNS, "route": RouteKind.INGRESS, "ingress_class": "traefik"},
    },
    "gateway-alone-no-failover": {**BASE, "endpoint": {}},
}

#: What each case registers below the Python component: the routes of its kind and the failover record.
RESOURCES = {
    "gateway-headplane-k8gb": ["certificate", "gateway", "route", "redirect", "gslb"],
    "ingress-alone-external-dns": ["certificate", "ingress", "dns"],
    "ingress-headplane-standby": ["certificate", "ingress"],
    "gateway-alone-no-failover": ["certificate", "gateway", "route", "redirect"],
}


def _python_args(inputs: dict[str, Any]) -> endpoint.PublicEndpointArgs:
    """The Python args a program writes by hand for the same endpoint."""
    headplane = inputs.get("headplane")
    return endpoint.PublicEndpointArgs(
        namespace=inputs["namespace"],
        hostname=inputs["hostname"],
        headscale=endpoint.Backend(**inputs["headscale"]),
        headplane=None if headplane is None else endpoint.Backend(**headplane),
        endpoint=EndpointSettings(**inputs["endpoint"]),
        primary_site=inputs["primary_site"],
        dns_record_target=inputs.get("dns_record_target"),
    )


@pytest.mark.parametrize("case", list(CASES))
def test_registers_what_the_python_component_registers_one_level_down(case: str) -> None:
    inputs = CASES[case]
    package = build_component(lambda: PublicEndpoint("public", inputs))
    python = build_component(lambda: endpoint.PublicEndpoint("public", _python_args(inputs)))
    ours = subtree(package.resources, "headscale-ha:index:PublicEndpoint", "public")
    assert ours[0][:2] == ("headscale-ha:endpoint:PublicEndpoint", "public")
    below = [(chain.split("/", 1)[1], name, inputs) for chain, name, inputs in ours[1:]]
    assert below == subtree(python.resources, "headscale-ha:endpoint:PublicEndpoint", "public")
    assert sorted(name for _, name, _ in below) == sorted(f"public-{part}" for part in RESOURCES[case])


@pytest.mark.parametrize(
    ("case", "kind"), [("gateway-headplane-k8gb", "gateway"), ("ingress-alone-external-dns", "ingress")]
)
def test_the_outputs_name_the_url_certificate_and_route(case: str, kind: str) -> None:
    def program() -> None:
        public = PublicEndpoint("public", CASES[case])
        pulumi.export(
            "endpoint",
            {
                "hostname": public.hostname,
                "url": public.url,
                "tlsSecret": public.tls_secret,
                "routeKind": public.route_kind,
                "route": public.route,
            },
        )

    assert build_component(program).outputs["endpoint"] == {
        "hostname": "vpn.example.org",
        "url": "https://vpn.example.org",
        "tlsSecret": "headscale-public-tls",
        "routeKind": kind,
        "route": "headscale-public",
    }


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"headscale": {"service": "headscale"}}, "headscale.port", "headscale.port: is required"),
        ({"headplane": {"port": 3000}}, "headplane.service", "headplane.service: is required"),
        ({"headplane": {**HEADPLANE, "port": "admin"}}, "headplane.port", "valid integer"),
        ({"headscale": {**HEADSCALE, "port": 0}}, "headscale.port", "got 0"),
        ({"headscale": {**HEADSCALE, "path": "/"}}, "headscale.path", "is not an input"),
        ({"endpoint": {"route": "nginx"}}, "endpoint.route", "'gateway' or 'ingress', got 'nginx'"),
        ({"endpoint": {"failover": "route53"}}, "endpoint.failover", "got 'route53'"),
        ({"endpoint": {"ttl": 1}}, "endpoint.ttl", "got 1"),
        ({"endpoint": {"tls_issuer_kind": "Vault"}}, "endpoint.tlsIssuerKind", "got 'Vault'"),
        ({"endpoint": {"colour": "red"}}, "endpoint.colour", "is not an input"),
        ({"hostname": "VPN.example.org"}, "hostname", "lowercase fully qualified domain name"),
        ({"namespace": "Head_scale"}, "namespace", "must be a DNS label"),
        ({"dns_record_target": "2001:db8::7"}, "dnsRecordTarget", "must be an IPv4 address"),
        (
            {"endpoint": {"failover": FailoverMode.K8GB}, "primary_site": ""},
            "primarySite",
            "is required with endpoint.failover k8gb",
        ),
    ],
)
def test_a_bad_input_is_refused_at_its_schema_path_before_anything_is_registered(
    change: dict, path: str, message: str
) -> None:
    error = refused(lambda: PublicEndpoint("public", {**CASES["gateway-headplane-k8gb"], **change}))
    assert error.property_path == path
    assert message in error.reason
    assert error.reason.startswith(f"{path}: ")
