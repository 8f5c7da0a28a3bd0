"""NetworkPolicies: HTTP from the ingress data plane (and Headplane), metrics from monitoring only."""

from __future__ import annotations

from components.network_policy import ProtectedApp, policy_spec
from components.settings import Derp, NetworkPolicy
from tools.harness import PROJECT_DIR

HEADSCALE = ProtectedApp(app="headscale", http_port=8080, metrics_port=9090, also_from_apps=("headplane",))


def test_metrics_only_from_the_monitoring_namespace() -> None:
    spec = policy_spec(HEADSCALE, NetworkPolicy(monitoring_namespace="prometheus"))
    metrics = next(rule for rule in spec["ingress"] if rule["ports"][0]["port"] == 9090)
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}}]
    assert spec["policyTypes"] == ["Ingress"]


def test_named_ingress_sources_and_headplane_reach_the_api_port() -> None:
    settings = NetworkPolicy(ingress_namespaces=["ingress-nginx"], ingress_cidrs=["10.0.0.0/24"])
    http = policy_spec(HEADSCALE, settings)["ingress"][0]
    assert http["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert http["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
        {"ipBlock": {"cidr": "10.0.0.0/24"}},
        {
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "headplane", "app.kubernetes.io/part-of": "headscale-ha"}
            }
        },
    ]


def test_without_named_sources_the_public_port_stays_open_but_metrics_do_not() -> None:
    spec = policy_spec(HEADSCALE, NetworkPolicy())
    http, metrics = spec["ingress"]
    assert "from" not in http
    assert "from" in metrics


def test_both_applications_get_a_policy(run_stack) -> None:
    names = sorted(
        o["metadata"]["name"] for o in run_stack("hydra").kubernetes_objects() if o["kind"] == "NetworkPolicy"
    )
    assert names == ["headplane", "headscale"]


def test_no_policy_blocks_what_headscale_needs_at_start(run_stack) -> None:
    """Headscale stops at start when a DERP map URL cannot be fetched, and with onlyStartIfAvailable when the OIDC
    issuer is unreachable: no rendered policy may restrict egress without allowing them (README: Prerequisites)."""
    for stack in ("hydra", "cosmos"):
        policies = [o for o in run_stack(stack).kubernetes_objects() if o["kind"] == "NetworkPolicy"]
        assert policies
        assert all("Egress" not in p["spec"]["policyTypes"] for p in policies)
    readme = (PROJECT_DIR / "README.md").read_text()
    prerequisites = readme.split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    for default_map in Derp().urls:
        assert default_map in prerequisites
    assert "onlyStartIfAvailable" in prerequisites
