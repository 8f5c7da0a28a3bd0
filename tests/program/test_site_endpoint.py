"""The stack-level checks of PublicEndpoint: the stacks' public hostname, their Headscale and Headplane Services
and their `endpoint` settings reach it. The component's own behaviour is tested at its seam, in
tests/components/test_endpoint.py."""

from __future__ import annotations

from tools.harness import ProgramRun


def _objects(run: ProgramRun, kind: str) -> list[dict]:
    return [o for o in run.kubernetes_objects() if o["kind"] == kind]


def test_the_stack_serves_its_hostname_from_its_services(run_stack) -> None:
    """hydra's public hostname, its Services' ports and the default issuer reach the Gateway, routes and Certificate."""
    run = run_stack("hydra")
    (gateway,) = _objects(run, "Gateway")
    https = next(listener for listener in gateway["spec"]["listeners"] if listener["name"] == "https")
    assert https["hostname"] == "headscale.example.com"
    route = next(r for r in _objects(run, "HTTPRoute") if r["metadata"]["name"] == "headscale-public")
    assert [
        (r["matches"][0]["path"]["value"], r["backendRefs"][0]["name"], r["backendRefs"][0]["port"])
        for r in route["spec"]["rules"]
    ] == [
        ("/admin", "headplane", 3000),
        ("/", "headscale", 8080),
    ]
    (certificate,) = _objects(run, "Certificate")
    assert certificate["spec"]["dnsNames"] == ["headscale.example.com"]
    assert certificate["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "ClusterIssuer",
        "name": "letsencrypt",
    }


def test_the_stacks_ingress_setting_reaches_the_endpoint(run_stack, lab_project) -> None:
    """`endpoint: {route: ingress, ingressClass: nginx}` in a stack file: an Ingress of that class for the
    stack's hostname, and no Gateway."""
    project = lab_project("  headscale-ha:endpoint: {route: ingress, ingressClass: nginx}\n")
    run = run_stack("lab", project_dir=project)
    assert _objects(run, "Gateway") == []
    (ingress,) = _objects(run, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert [rule["host"] for rule in ingress["spec"]["rules"]] == ["headscale.example.com"]
    assert ingress["spec"]["tls"] == [{"hosts": ["headscale.example.com"], "secretName": "headscale-public-tls"}]
