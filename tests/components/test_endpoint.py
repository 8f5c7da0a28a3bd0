"""PublicEndpoint: one hostname, `/` → Headscale, `/admin` → Headplane, TLS from cert-manager."""

from __future__ import annotations

from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def test_gateway_routes_admin_before_root_and_keeps_streams_open(run_stack) -> None:
    run = run_stack("hydra")
    (gateway,) = _objects(run, "Gateway")
    https = next(listener for listener in gateway["spec"]["listeners"] if listener["name"] == "https")
    assert https["hostname"] == "headscale.example.com"
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


def test_plain_http_redirects_to_https(run_stack) -> None:
    redirect = next(r for r in _objects(run_stack("hydra"), "HTTPRoute") if r["metadata"]["name"].endswith("redirect"))
    assert redirect["spec"]["parentRefs"] == [{"name": "headscale-public", "sectionName": "http"}]
    assert redirect["spec"]["rules"][0]["filters"][0]["requestRedirect"] == {"scheme": "https", "statusCode": 301}


def test_certificate_comes_from_the_configured_issuer(run_stack) -> None:
    (certificate,) = _objects(run_stack("hydra"), "Certificate")
    assert certificate["spec"]["dnsNames"] == ["headscale.example.com"]
    assert certificate["spec"]["secretName"] == "headscale-public-tls"
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "ClusterIssuer",
        "name": "letsencrypt",
    }


def test_ingress_mode_serves_the_same_paths(run_stack, lab_project) -> None:
    project = lab_project("  headscale-ha:endpoint: {route: ingress, ingressClass: nginx}\n")
    run = run_stack("lab", project_dir=project)
    assert _objects(run, "Gateway") == []
    (ingress,) = _objects(run, "Ingress")
    paths = ingress["spec"]["rules"][0]["http"]["paths"]
    assert [(p["path"], p["backend"]["service"]["name"]) for p in paths] == [
        ("/admin", "headplane"),
        ("/", "headscale"),
    ]
    assert ingress["spec"]["tls"] == [{"hosts": ["headscale.example.com"], "secretName": "headscale-public-tls"}]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
