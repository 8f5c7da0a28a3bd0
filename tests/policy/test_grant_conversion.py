"""Grants → ACLs for Headscale 0.28: the conversion's rules and refusals, and the converted ACLs checked flow by
flow against a small reference evaluator (the same flows as the grants on 0.29)."""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headscale_ha.policy.check import validate_policy
from headscale_ha.policy.grant_conversion import grants_to_acls
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.schema import policy_document
from tests.support.policy_samples import minimal


def grants_policy(*grants: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return minimal(grants=list(grants), **extra)


def converted_acls(*grants: dict[str, Any]) -> list[dict[str, Any]]:
    """The ACL rules the grants became (after the base policy's own rule)."""
    policy = grants_to_acls(validate_policy(grants_policy(*grants), version="0.29"), version="0.28")
    document = policy_document(policy)
    assert "grants" not in document
    return document["acls"][1:]


def test_grant_protocols_become_one_acl_rule_each() -> None:
    grant = {"src": ["group:ops"], "dst": ["tag:server", "web"], "ip": ["tcp:22", "udp:53", "tcp:443", "icmp:*"]}
    assert converted_acls(grant) == [
        {"action": "accept", "proto": "1", "src": ["group:ops"], "dst": ["tag:server:*", "web:*"]},
        {"action": "accept", "proto": "tcp", "src": ["group:ops"], "dst": ["tag:server:22,443", "web:22,443"]},
        {"action": "accept", "proto": "udp", "src": ["group:ops"], "dst": ["tag:server:53", "web:53"]},
    ]


def test_grant_without_protocol_gets_an_icmp_companion_rule() -> None:
    grant = {"src": ["autogroup:danger-all"], "dst": ["web"], "ip": ["443", "80"]}
    assert converted_acls(grant) == [
        {"action": "accept", "src": ["*"], "dst": ["web:443,80"]},
        {"action": "accept", "proto": "icmp", "src": ["*"], "dst": ["web:*"]},
    ]


def test_grants_without_acl_equivalent_are_refused_with_their_paths() -> None:
    policy = validate_policy(
        grants_policy(
            {"src": ["group:ops"], "dst": ["web"], "ip": ["tcp:22"]},
            {"src": ["group:ops"], "dst": ["web"], "app": {"example.com/cap/x": [{}]}},
            {"src": ["group:ops"], "dst": ["autogroup:internet"], "ip": ["*"], "via": ["tag:router"]},
            {"src": ["*"], "dst": ["*"], "ip": ["*"]},
        ),
        version="0.29",
    )
    with pytest.raises(PolicyError) as caught:
        grants_to_acls(policy, version="0.28")
    problems = caught.value.problems
    assert [p.path for p in problems] == ["grants[1].app", "grants[2].via", "grants[3].src[0]", "grants[3].dst[0]"]
    assert "no ACL equivalent" in problems[0].reason
    assert "every IP on 0.28" in problems[2].reason


def test_empty_grants_stay_deny_all_on_028() -> None:
    policy = validate_policy({"grants": []}, version="0.29")
    assert policy_document(grants_to_acls(policy, version="0.28")) == {"acls": []}


def test_grants_are_kept_on_029() -> None:
    policy = validate_policy(grants_policy({"src": ["group:ops"], "dst": ["web"], "ip": ["*"]}), version="0.29")
    assert grants_to_acls(policy, version="0.29") is policy


def test_conversion_still_refuses_other_029_features() -> None:
    data = grants_policy({"src": ["group:ops"], "dst": ["web"], "ip": ["*"]}, randomizeClientPort=True)
    with pytest.raises(PolicyError) as caught:
        grants_to_acls(validate_policy(data, version="0.29"), version="0.28")
    assert [p.path for p in caught.value.problems] == ["randomizeClientPort"]


# A tiny reference evaluator, written independently of the model: does a policy let (source, IP, protocol, port)
# through? Grants are read with 0.29 semantics, ACLs with 0.28 semantics; ICMP ignores ports, protocols without
# ports need '*', a rule without protocol means TCP+UDP+ICMP+ICMPv6 on 0.29 and TCP+UDP on 0.28.

TAG_NETWORKS = {"tag:server": "100.64.10.0/24", "autogroup:internet": "198.51.100.0/24"}
HOSTS = {"web": "10.1.0.0/24", "db": "10.2.0.5/32"}
GRANT_SOURCES = ["group:admins", "group:ops", "alice@", "tag:server", "autogroup:member", "autogroup:danger-all"]
PRINCIPALS = ["group:admins", "group:ops", "alice@", "tag:server", "autogroup:member", "bob@"]
GRANT_DESTINATIONS = ["web", "db", "10.20.0.0/16", "192.168.1.7", "fd00:1::/64", "tag:server", "autogroup:internet"]
NUMBERS = {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "ipv6-icmp": 58, "gre": 47, "esp": 50}
PORT_PROTOCOLS = (6, 17, 132)
PORTLESS = (1, 58, 47, 50)


def network(alias: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(HOSTS.get(alias) or TAG_NETWORKS.get(alias) or alias)


def port_ranges(text: str) -> list[tuple[int, int]]:
    if text == "*":
        return [(0, 65535)]
    ranges = []
    for item in text.split(","):
        first, _, last = item.partition("-")
        ranges.append((int(first), int(last or first)))
    return ranges


def ports_allow(proto: int, port: int, ranges: list[tuple[int, int]]) -> bool:
    if proto in PORT_PROTOCOLS:
        return any(first <= port <= last for first, last in ranges)
    return proto in (1, 58) or (0, 65535) in ranges


def number(proto: str) -> int:
    return NUMBERS[proto] if proto in NUMBERS else int(proto)


def grants_allow(grants: list[dict[str, Any]], flow: tuple[str, Any, int, int]) -> bool:
    src, address, proto, port = flow
    for grant in grants:
        if not any(s in (src, "autogroup:danger-all") for s in grant["src"]):
            continue
        if not any(address in network(d) for d in grant["dst"]):
            continue
        for entry in grant["ip"]:
            if ":" in entry:
                protos, ports = {number(entry.split(":")[0])}, entry.split(":")[1]
            else:
                protos, ports = {6, 17, 1, 58}, entry
            if proto in protos and ports_allow(proto, port, port_ranges(ports)):
                return True
    return False


def acls_allow(acls: list[dict[str, Any]], flow: tuple[str, Any, int, int]) -> bool:
    src, address, proto, port = flow
    for acl in acls:
        if not any(s in (src, "*") for s in acl["src"]):
            continue
        protos = {"icmp": {1, 58}}.get(acl.get("proto", ""), {number(acl["proto"])} if "proto" in acl else {6, 17})
        for dst in acl["dst"]:
            alias, _, ports = dst.rpartition(":")
            if address in network(alias) and proto in protos and ports_allow(proto, port, port_ranges(ports)):
                return True
    return False


def flows(grants: list[dict[str, Any]]) -> list[tuple[str, Any, int, int]]:
    """Every principal, edge addresses of each destination (and outside ones), boundary ports per protocol."""
    addresses = {ipaddress.ip_address(a) for a in ("10.1.1.1", "1.1.1.1", "fd00:2::1")}
    for alias in GRANT_DESTINATIONS:
        addresses |= {network(alias)[0], network(alias)[-1]}
    ports = {1, 22, 443, 65535}
    for grant in grants:
        for entry in grant["ip"]:
            for first, last in port_ranges(entry.rpartition(":")[2]):
                ports |= {p for p in (first - 1, first, last, last + 1) if 1 <= p <= 65535}
    combos = [(proto, port) for proto in PORT_PROTOCOLS for port in sorted(ports)] + [(p, 0) for p in PORTLESS]
    return [(s, a, proto, port) for s in PRINCIPALS for a in sorted(addresses, key=str) for proto, port in combos]


port = st.integers(1, 65535)
port_item = st.one_of(port.map(str), st.tuples(port, port).map(lambda t: f"{min(t)}-{max(t)}"))
port_list = st.lists(port_item, min_size=1, max_size=3).map(",".join)
ip_entry = st.one_of(
    st.just("*"),
    port_list,
    st.builds("{}:{}".format, st.sampled_from(["tcp", "udp", "sctp", "6", "17"]), st.one_of(st.just("*"), port_list)),
    st.sampled_from(["icmp:*", "ipv6-icmp:*", "gre:*", "47:*", "esp:*", "1:*", "58:*"]),
)
grant_strategy = st.fixed_dictionaries(
    {
        "src": st.lists(st.sampled_from(GRANT_SOURCES), min_size=1, max_size=3, unique=True),
        "dst": st.lists(st.sampled_from(GRANT_DESTINATIONS), min_size=1, max_size=3, unique=True),
        "ip": st.lists(ip_entry, min_size=1, max_size=4),
    }
)


@settings(max_examples=40, deadline=None)
@given(grants=st.lists(grant_strategy, min_size=1, max_size=3))
def test_converted_acls_allow_exactly_the_flows_of_the_grants(grants: list[dict[str, Any]]) -> None:
    data = {
        "groups": {"group:admins": ["alice@"], "group:ops": ["bob@"]},
        "tagOwners": {"tag:server": ["group:admins"]},
        "hosts": dict(HOSTS),
        "grants": copy.deepcopy(grants),
    }
    document = policy_document(grants_to_acls(validate_policy(data, version="0.29"), version="0.28"))
    assert "grants" not in document
    for flow in flows(grants):
        assert grants_allow(grants, flow) == acls_allow(document["acls"], flow), (flow, document["acls"])


def test_reference_evaluator_tells_the_versions_apart() -> None:
    """The evaluator itself: the same rule means different flows on 0.28 and 0.29 (so the test above can fail)."""
    flow = ("group:ops", ipaddress.ip_address("10.1.0.1"), 1, 0)
    assert grants_allow([{"src": ["group:ops"], "dst": ["web"], "ip": ["443"]}], flow)
    assert not acls_allow([{"action": "accept", "src": ["group:ops"], "dst": ["web:443"]}], flow)
    icmp6 = ("group:ops", ipaddress.ip_address("10.1.0.1"), 58, 0)
    assert not grants_allow([{"src": ["group:ops"], "dst": ["web"], "ip": ["icmp:*"]}], icmp6)
    assert acls_allow([{"action": "accept", "src": ["group:ops"], "proto": "icmp", "dst": ["web:*"]}], icmp6)
