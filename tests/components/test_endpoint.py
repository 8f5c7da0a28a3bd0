"""PublicEndpoint: one hostname, `/` → Headscale, `/admin` → Headplane, TLS from cert-manager.

At the component seam: each test builds one PublicEndpoint from hand-written args. The stack-level checks (the
stacks' hostname, Services and endpoint settings reaching it) are in tests/program/test_site_endpoint.py.
"""

from __future__ import annotations

from headscale_ha.components.endpoint import Backend, PublicEndpoint, PublicEndpointArgs
from headscale_ha.components.settings import EndpointSettings, RouteKind
from tests.support.component_run import build_component
from tools.harness import ProgramRun

HOSTNAME = "vpn.example.org"


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def _lone_endpoint(endpoint: EndpointSettings | None = None) -> ProgramRun:
    """PublicEndpoint alone, for the caller's hostname and Services (no stack file, no other component)."""
    args = PublicEndpointArgs(
        namespace="apps",
        hostname=HOSTNAME,
        headscale=Backend(service="headscale", port=8080),
        headplane=Backend(service="headplane", port=3000),
        endpoint=endpoint or EndpointSettings(),
        primary_site="east",
        dns_record_target=None,
    )
    return build_component(lambda: PublicEndpoint("public", args))


def test_gateway_routes_admin_before_root_and_keeps_streams_open() -> None:
    run = _lone_endpoint(EndpointSettings(route=RouteKind.GATEWAY))
    (gateway,) = _objects(run, "Gateway")
    https = next(listener for listener in gateway["spec"]["listeners"] if listener["name"] == "https")
    assert https["hostname"] == HOSTNAME
    assert https["tls"]["certificateRefs"] == [{"kind": "Secret", "name": "headscale-public-tls"}]
    route = next(r for r in _objects(run, "HTTPRoute") if r["metadata"]["name"] == "headscale-public")
    rules = route["spec"]["rules"]
    assert [
        (r["matches"][0]["path"]["value"], r["backendRefs"][0]["name"], r["backendRefs"][0]["port"]) for r in rules
    ] == [
        ("/admin", "headplane", 3000),
        ("/", "headscale", 8080),
    ]
    assert rules[1]["timeouts"] == {"request": "0s"}, "/ts2021 and map long-polls must not be cut"
    assert "filters" not in rules[1], "nothing may rewrite the Noise upgrade"


def test_plain_http_redirects_to_https() -> None:
    redirect = next(r for r in _objects(_lone_endpoint(), "HTTPRoute") if r["metadata"]["name"].endswith("redirect"))
    assert redirect["spec"]["parentRefs"] == [{"name": "headscale-public", "sectionName": "http"}]
    assert redirect["spec"]["rules"][0]["filters"][0]["requestRedirect"] == {"scheme": "https", "statusCode": 301}


def test_certificate_comes_from_the_configured_issuer() -> None:
    (certificate,) = _objects(
        _lone_endpoint(EndpointSettings(tls_issuer="letsencrypt", tls_issuer_kind="ClusterIssuer")), "Certificate"
    )
    assert certificate["spec"]["dnsNames"] == [HOSTNAME]
    assert certificate["spec"]["secretName"] == "headscale-public-tls"
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "ClusterIssuer",
        "name": "letsencrypt",
    }


def test_ingress_mode_serves_the_same_paths() -> None:
    run = _lone_endpoint(EndpointSettings(route=RouteKind.INGRESS, ingress_class="nginx"))
    assert _objects(run, "Gateway") == []
    (ingress,) = _objects(run, "Ingress")
    paths = ingress["spec"]["rules"][0]["http"]["paths"]
    assert [(p["path"], p["backend"]["service"]["name"]) for p in paths] == [
        ("/admin", "headplane"),
        ("/", "headscale"),
    ]
    assert ingress["spec"]["tls"] == [{"hosts": [HOSTNAME], "secretName": "headscale-public-tls"}]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
