"""NetworkPolicies: HTTP from the ingress data plane (and Headplane), metrics from monitoring only."""

from __future__ import annotations

from components.config import NetworkPolicy
from components.network_policy import ProtectedApp, policy_spec

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
