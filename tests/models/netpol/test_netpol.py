"""The NetworkPolicy evaluator on hand-made policies: each rule of the semantics, ingress and egress, including the
classic traps."""

from __future__ import annotations

from typing import Any

import pytest

from tests.models.netpol.netpol import (
    Evaluator,
    External,
    Pod,
    PolicyError,
    admitted,
    pods_of,
    selecting_policies,
)

NAMESPACES = {"app": {"team": "a"}, "other": {"team": "b"}, "monitoring": {"team": "ops"}}
WEB = Pod(namespace="app", labels={"role": "web"}, ip="10.0.0.5", named_ports={"http": (8080, "TCP")})
DB = Pod(namespace="app", labels={"role": "db"}, ip="10.0.0.6", named_ports={"pg": (5432, "TCP")})
CLIENT = Pod(namespace="app", labels={"role": "client"}, ip="10.0.0.7")
FOREIGN_CLIENT = Pod(namespace="other", labels={"role": "client"}, ip="10.1.0.7")
PROMETHEUS = Pod(namespace="monitoring", labels={"app": "prometheus"}, ip="10.2.0.9")


def policy(spec: dict[str, Any], name: str = "p", namespace: str = "app") -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def db_policy(*rules: dict[str, Any]) -> dict[str, Any]:
    return policy({"podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress"], "ingress": list(rules)})


DENY_ALL = policy({"podSelector": {}, "policyTypes": ["Ingress"]}, name="deny")


def test_a_pod_no_policy_selects_admits_everything() -> None:
    assert admitted([], NAMESPACES, FOREIGN_CLIENT, DB, 5432)
    only_web = policy({"podSelector": {"matchLabels": {"role": "web"}}, "policyTypes": ["Ingress"]})
    assert admitted([only_web], NAMESPACES, FOREIGN_CLIENT, DB, 5432)
    assert not admitted([only_web], NAMESPACES, FOREIGN_CLIENT, WEB, 8080)


def test_default_deny_isolates_every_pod_of_its_namespace_only() -> None:
    assert not admitted([DENY_ALL], NAMESPACES, CLIENT, DB, 5432)
    assert not admitted([DENY_ALL], NAMESPACES, CLIENT, WEB, 8080, "UDP")
    assert admitted([DENY_ALL], NAMESPACES, CLIENT, FOREIGN_CLIENT, 80), "another namespace is not isolated"


def test_policy_types_decide_isolation() -> None:
    egress_only = policy({"podSelector": {}, "policyTypes": ["Egress"]})
    assert admitted([egress_only], NAMESPACES, CLIENT, DB, 5432)
    implied = policy({"podSelector": {}})  # no policyTypes: Ingress is implied
    assert not admitted([implied], NAMESPACES, CLIENT, DB, 5432)
    with pytest.raises(PolicyError):
        admitted([policy({"podSelector": {}, "policyTypes": ["Inbound"]})], NAMESPACES, CLIENT, DB, 5432)


def test_allows_are_a_union_over_policies_and_rules() -> None:
    clients = {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}], "ports": [{"port": 5432}]}
    web = {"from": [{"podSelector": {"matchLabels": {"role": "web"}}}], "ports": [{"port": 5432}]}
    policies = [DENY_ALL, db_policy(clients), db_policy(web) | {"metadata": {"name": "q", "namespace": "app"}}]
    assert admitted(policies, NAMESPACES, CLIENT, DB, 5432)
    assert admitted(policies, NAMESPACES, WEB, DB, 5432)
    assert not admitted(policies, NAMESPACES, PROMETHEUS, DB, 5432)
    assert not admitted(policies, NAMESPACES, CLIENT, DB, 5433)


def test_a_rule_without_from_admits_every_source_and_without_ports_every_port() -> None:
    assert admitted([db_policy({"ports": [{"port": 5432}]})], NAMESPACES, External(ip="203.0.113.1"), DB, 5432)
    anyone_anyport = db_policy({"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]})
    assert admitted([anyone_anyport], NAMESPACES, CLIENT, DB, 1, "UDP")
    assert not admitted([db_policy()], NAMESPACES, CLIENT, DB, 5432), "no rules: nothing admitted"


def test_pod_selector_alone_stays_in_the_policy_namespace() -> None:
    rule = {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}
    assert admitted([db_policy(rule)], NAMESPACES, CLIENT, DB, 5432)
    assert not admitted([db_policy(rule)], NAMESPACES, FOREIGN_CLIENT, DB, 5432), "same labels, other namespace"


def test_namespace_selector_alone_admits_every_pod_there() -> None:
    rule = {"from": [{"namespaceSelector": {"matchLabels": {"team": "ops"}}}]}
    assert admitted([db_policy(rule)], NAMESPACES, PROMETHEUS, DB, 5432)
    assert not admitted([db_policy(rule)], NAMESPACES, CLIENT, DB, 5432)
    by_name = {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}]}
    assert admitted([db_policy(by_name)], NAMESPACES, FOREIGN_CLIENT, DB, 5432), "the name label is implied"
    assert not admitted([db_policy(rule)], NAMESPACES, External(ip="10.2.0.9"), DB, 5432), "selectors select pods"


def test_both_selectors_in_one_peer_is_and_in_two_peers_is_or() -> None:
    both = {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"team": "b"}},
                "podSelector": {"matchLabels": {"role": "client"}},
            }
        ]
    }
    assert admitted([db_policy(both)], NAMESPACES, FOREIGN_CLIENT, DB, 5432)
    assert not admitted([db_policy(both)], NAMESPACES, CLIENT, DB, 5432), "right labels, wrong namespace"
    other_pod = Pod(namespace="other", labels={"role": "batch"})
    assert not admitted([db_policy(both)], NAMESPACES, other_pod, DB, 5432), "right namespace, wrong labels"
    either = {
        "from": [
            {"namespaceSelector": {"matchLabels": {"team": "b"}}},
            {"podSelector": {"matchLabels": {"role": "client"}}},
        ]
    }
    assert admitted([db_policy(either)], NAMESPACES, other_pod, DB, 5432)
    assert admitted([db_policy(either)], NAMESPACES, CLIENT, DB, 5432)


def test_ip_block_with_except() -> None:
    rule = {"from": [{"ipBlock": {"cidr": "100.64.0.0/10", "except": ["100.100.0.0/16"]}}]}
    assert admitted([db_policy(rule)], NAMESPACES, External(ip="100.64.0.1"), DB, 5432)
    assert not admitted([db_policy(rule)], NAMESPACES, External(ip="100.100.3.4"), DB, 5432)
    assert not admitted([db_policy(rule)], NAMESPACES, External(ip="192.0.2.1"), DB, 5432)
    assert not admitted([db_policy(rule)], NAMESPACES, External(ip="fd7a:115c:a1e0::1"), DB, 5432)
    pod_in_block = Pod(namespace="other", labels={}, ip="100.64.9.9")
    assert admitted([db_policy(rule)], NAMESPACES, pod_in_block, DB, 5432), "the permissive reading (Calico)"
    bad = {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]}
    with pytest.raises(PolicyError, match="not inside"):
        admitted([db_policy(bad)], NAMESPACES, External(ip="10.0.0.1"), DB, 5432)


def test_ports_protocols_ranges_and_named_ports() -> None:
    udp = db_policy({"ports": [{"protocol": "UDP", "port": 53}]})
    assert admitted([udp], NAMESPACES, CLIENT, DB, 53, "UDP")
    assert not admitted([udp], NAMESPACES, CLIENT, DB, 53, "TCP"), "the protocol defaults to TCP and must match"
    ranged = db_policy({"ports": [{"port": 5000, "endPort": 5010}]})
    assert admitted([ranged], NAMESPACES, CLIENT, DB, 5010)
    assert not admitted([ranged], NAMESPACES, CLIENT, DB, 5011)
    named = db_policy({"ports": [{"port": "pg"}]})
    assert admitted([named], NAMESPACES, CLIENT, DB, 5432)
    assert not admitted([named], NAMESPACES, CLIENT, DB, 5433)
    every_tcp = db_policy({"ports": [{"protocol": "TCP"}]})
    assert admitted([every_tcp], NAMESPACES, CLIENT, DB, 1234)
    assert not admitted([every_tcp], NAMESPACES, CLIENT, DB, 1234, "UDP")


def test_named_port_resolves_per_destination_pod() -> None:
    both = policy({"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": "http"}]}]})
    assert admitted([both], NAMESPACES, CLIENT, WEB, 8080)
    assert not admitted([both], NAMESPACES, CLIENT, DB, 8080), "DB declares no port named http"


def test_label_expressions() -> None:
    rule = {
        "from": [
            {
                "podSelector": {
                    "matchExpressions": [
                        {"key": "role", "operator": "In", "values": ["client", "web"]},
                        {"key": "debug", "operator": "DoesNotExist"},
                    ]
                }
            }
        ]
    }
    assert admitted([db_policy(rule)], NAMESPACES, CLIENT, DB, 5432)
    debug = Pod(namespace="app", labels={"role": "client", "debug": "1"})
    assert not admitted([db_policy(rule)], NAMESPACES, debug, DB, 5432)
    not_in = {"from": [{"podSelector": {"matchExpressions": [{"key": "role", "operator": "NotIn", "values": ["x"]}]}}]}
    assert admitted([db_policy(not_in)], NAMESPACES, Pod(namespace="app"), DB, 5432), "NotIn admits absent keys"


@pytest.mark.parametrize(
    "rule",
    [
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
        {"from": [{}]},
        {"ports": [{"port": "pg", "endPort": 6000}]},
        {"ports": [{"port": 6000, "endPort": 5000}]},
        {"ports": [{"protocol": "ICMP", "port": 1}]},
        {"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}}]},
        {"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}]},
        {"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}}]},
        {"from": [{"podSelector": {"matchFields": {"a": "x"}}}]},
    ],
)
def test_policies_the_api_server_refuses_are_errors(rule: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        admitted([db_policy(rule)], NAMESPACES, CLIENT, DB, 5432)


def test_pods_are_read_from_templates_cron_jobs_and_cnpg_clusters() -> None:
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"ports": [{"name": "h", "containerPort": 1}]}]},
    }
    objects = [
        {"kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}, "spec": {"template": template}},
        {
            "kind": "CronJob",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"jobTemplate": {"spec": {"template": template}}},
        },
        {
            "kind": "Cluster",
            "apiVersion": "postgresql.cnpg.io/v1",
            "metadata": {"name": "db", "namespace": "n"},
            "spec": {},
        },
    ]
    pods = pods_of(objects)
    assert set(pods) == {"n/d", "n/c", "n/db-primary", "n/db-replica"}
    assert pods["n/d"].named_ports == {"h": (1, "TCP")}
    assert pods["n/db-primary"].labels["cnpg.io/cluster"] == "db"
    assert selecting_policies([DENY_ALL], pods["n/d"]) == []


# ------------------------------------------------------------------------------------------------------ egress

METADATA = External(ip="169.254.169.254")
INTERNET = External(ip="198.51.100.7")


def egress_policy(*rules: dict[str, Any], name: str = "e", role: str = "web") -> dict[str, Any]:
    spec = {"podSelector": {"matchLabels": {"role": role}}, "policyTypes": ["Egress"], "egress": list(rules)}
    return policy(spec, name=name)


DENY_EGRESS = policy({"podSelector": {}, "policyTypes": ["Egress"]}, name="deny-egress")


def test_egress_is_open_until_a_policy_with_egress_selects_the_pod() -> None:
    assert Evaluator([], NAMESPACES).lets_out(WEB, METADATA, 80)
    assert Evaluator([DENY_ALL], NAMESPACES).lets_out(WEB, METADATA, 80), "an ingress default-deny leaves egress open"
    assert not Evaluator([DENY_EGRESS], NAMESPACES).lets_out(WEB, METADATA, 80)
    assert Evaluator([DENY_EGRESS], NAMESPACES).lets_out(FOREIGN_CLIENT, METADATA, 80), "another namespace is open"
    implied = policy({"podSelector": {}, "egress": []})  # no policyTypes: Egress is implied by the egress key
    assert not Evaluator([implied], NAMESPACES).lets_out(WEB, METADATA, 80)
    assert Evaluator([policy({"podSelector": {}})], NAMESPACES).lets_out(WEB, METADATA, 80), (
        "no egress key: Ingress only"
    )
    with pytest.raises(PolicyError):
        Evaluator([policy({"podSelector": {}, "policyTypes": ["Outbound"]})], NAMESPACES).lets_out(WEB, METADATA, 80)


def test_egress_rules_are_a_union_of_to_and_ports() -> None:
    to_db = {"to": [{"podSelector": {"matchLabels": {"role": "db"}}}], "ports": [{"port": 5432}]}
    to_web = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}], "ports": [{"port": 443}]}
    policies = [DENY_EGRESS, egress_policy(to_db), egress_policy(to_web, name="f")]
    assert Evaluator(policies, NAMESPACES).lets_out(WEB, DB, 5432)
    assert not Evaluator(policies, NAMESPACES).lets_out(WEB, DB, 5433)
    assert Evaluator(policies, NAMESPACES).lets_out(WEB, INTERNET, 443)
    assert not Evaluator(policies, NAMESPACES).lets_out(WEB, METADATA, 443), "except"
    assert not Evaluator(policies, NAMESPACES).lets_out(WEB, INTERNET, 5432), "ports and peers of one rule together"
    assert not Evaluator(policies, NAMESPACES).lets_out(CLIENT, INTERNET, 443), "the policies select web only"
    anywhere = egress_policy({"ports": [{"port": 53, "protocol": "UDP"}]})
    assert Evaluator([anywhere], NAMESPACES).lets_out(WEB, METADATA, 53, "UDP"), "no `to`: every destination"
    assert not Evaluator([egress_policy()], NAMESPACES).lets_out(WEB, INTERNET, 443), "no rules: nothing"


def test_egress_peers_select_destination_pods_like_ingress_peers_select_sources() -> None:
    same_namespace = {"to": [{"podSelector": {"matchLabels": {"role": "client"}}}]}
    assert Evaluator([egress_policy(same_namespace)], NAMESPACES).lets_out(WEB, CLIENT, 1)
    assert not Evaluator([egress_policy(same_namespace)], NAMESPACES).lets_out(WEB, FOREIGN_CLIENT, 1), (
        "other namespace"
    )
    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app": "prometheus"}},
            }
        ]
    }
    assert Evaluator([egress_policy(dns)], NAMESPACES).lets_out(WEB, PROMETHEUS, 9090)
    assert not Evaluator([egress_policy(dns)], NAMESPACES).lets_out(WEB, External(ip=PROMETHEUS.ip or ""), 9090), (
        "selectors select pods, not their addresses"
    )


def test_an_ip_block_matches_a_pod_only_in_the_permissive_reading() -> None:
    block = egress_policy({"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]})
    assert Evaluator([block], NAMESPACES).lets_out(WEB, DB, 5432), "Calico: a pod's address is in the block"
    assert not Evaluator([block], NAMESPACES, ip_blocks_select_pods=False).lets_out(WEB, DB, 5432), "Cilium: it is not"
    assert Evaluator([block], NAMESPACES, ip_blocks_select_pods=False).lets_out(WEB, External(ip="10.9.9.9"), 1)
    bad = egress_policy({"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]})
    with pytest.raises(PolicyError, match="not inside"):
        Evaluator([bad], NAMESPACES, ip_blocks_select_pods=False).lets_out(WEB, DB, 1)


def test_egress_ports_named_and_protocol_only() -> None:
    named = egress_policy({"ports": [{"port": "pg"}]})
    assert Evaluator([named], NAMESPACES).lets_out(WEB, DB, 5432), "the destination pod's named port"
    assert not Evaluator([named], NAMESPACES).lets_out(WEB, External(ip="10.0.0.6"), 5432), "an address has no names"
    every_udp = egress_policy({"ports": [{"protocol": "UDP"}]})
    assert Evaluator([every_udp], NAMESPACES).lets_out(WEB, INTERNET, 41641, "UDP")
    assert not Evaluator([every_udp], NAMESPACES).lets_out(WEB, INTERNET, 41641, "TCP")


def test_a_connection_needs_the_source_egress_and_the_destination_ingress() -> None:
    out = egress_policy({"to": [{"podSelector": {"matchLabels": {"role": "db"}}}], "ports": [{"port": 5432}]})
    into = db_policy({"from": [{"podSelector": {"matchLabels": {"role": "web"}}}], "ports": [{"port": 5432}]})
    assert Evaluator([DENY_ALL, DENY_EGRESS, out, into], NAMESPACES).connects(WEB, DB, 5432)
    assert not Evaluator([DENY_ALL, DENY_EGRESS, out], NAMESPACES).connects(WEB, DB, 5432), "the database admits nobody"
    assert not Evaluator([DENY_ALL, DENY_EGRESS, into], NAMESPACES).connects(WEB, DB, 5432), "web may not open it"
    assert Evaluator([DENY_EGRESS], NAMESPACES).connects(External(ip="203.0.113.1"), WEB, 80), (
        "outside sources: ingress only"
    )
    assert not Evaluator([DENY_EGRESS], NAMESPACES).connects(WEB, INTERNET, 443), "outside destinations: egress only"


def test_volsync_movers_are_read_from_replication_sources() -> None:
    source = {
        "kind": "ReplicationSource",
        "apiVersion": "volsync.backube/v1alpha1",
        "metadata": {"name": "headscale-data", "namespace": "n"},
        "spec": {},
    }
    (mover,) = pods_of([source]).values()
    assert mover.labels == {"app.kubernetes.io/created-by": "volsync"}
    assert mover.namespace == "n"
