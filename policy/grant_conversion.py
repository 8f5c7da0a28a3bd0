"""Grants → ACLs: a policy written with 0.29's IP grants made to run on Headscale 0.28 (:func:`grants_to_acls`).

Each grant becomes ACL rules that allow the same flows, or a :class:`PolicyError` naming what has no 0.28
equivalent. The result is validated for 0.28 through :mod:`.check`, so this sits above it; only :mod:`.render`
uses it. It depends on :mod:`.check`, :mod:`.schema`, :mod:`.values`, :mod:`.versions` and :mod:`.problems`.
"""

from __future__ import annotations

from typing import Any

from headscale_ha.policy.check import validate_policy
from headscale_ha.policy.problems import PolicyError, PolicyProblem, format_path
from headscale_ha.policy.schema import Policy, policy_document
from headscale_ha.policy.values import ALL_PORTS, PORT_PROTOCOLS, parse_grant_ip
from headscale_ha.policy.versions import headscale_minor

__all__ = ["grants_to_acls"]


#: ACL protocol spelled for 0.28 by IANA number: names whose meaning is the same on 0.28 stay names; the rest
#: become numbers (0.28 reads "icmp" as ICMPv4+ICMPv6 and knows neither "ipv6-icmp" nor "fc").
_ACL_028_NAMES = {6: "tcp", 17: "udp", 132: "sctp"}


def grants_to_acls(policy: Policy, *, version: str) -> Policy:
    """Make a policy with IP grants run on ``version``: on 0.29 it is returned as is (grants are native there);
    on 0.28 every grant becomes ACL rules that allow the same flows, and the result is validated for 0.28.

    Per grant and per protocol of its ``ip`` entries, one ACL rule ``{src, dst: [d:ports], proto}`` (ports of one
    protocol merged). An entry without protocol (``*``, ``443``) means TCP, UDP, ICMP and ICMPv6 on 0.29, while a
    0.28 ACL without ``proto`` only allows TCP and UDP: such entries get a companion ``proto: icmp`` rule (0.28
    reads ``icmp`` as ICMPv4+ICMPv6; ICMP ignores ports). ``icmp`` in a grant (ICMPv4 only on 0.29) becomes
    ``proto: "1"``. ``autogroup:danger-all`` (all IPs) becomes ``*``, which means all IPs on 0.28. A grant with an
    empty ``src`` or ``dst`` allows nothing and becomes nothing.
    Refused, with the grant's path: ``app`` capabilities, ``via`` route steering, ``*`` in src/dst (tailnet
    ranges on 0.29, all IPs on 0.28 — not the same flows) and ports on a protocol without ports. A present
    ``grants`` key always yields an ``acls`` key, so ``"grants": []`` (deny all) does not turn into ``{}``.
    """
    minor = headscale_minor(version)
    if minor != "0.28":
        return policy
    document = policy_document(policy)
    if "grants" not in document:
        return validate_policy(document, version=minor)
    problems: list[PolicyProblem] = []
    converted: list[dict[str, Any]] = []
    for index, grant in enumerate(document.pop("grants")):
        converted += _grant_to_acls(index, grant, problems)
    if problems:
        raise PolicyError(problems)
    document["acls"] = [*document.get("acls", []), *converted]
    return validate_policy(document, version=minor)


def _grant_to_acls(index: int, grant: dict[str, Any], problems: list[PolicyProblem]) -> list[dict[str, Any]]:
    """One grant's ACL rules; what has no 0.28 equivalent goes to ``problems`` (then the grant yields nothing)."""
    base: list[str | int] = ["grants", index]
    before = len(problems)
    problems += _without_acl_equivalent(base, grant)
    by_proto = _ports_by_protocol(base, grant, problems)
    if len(problems) > before or not grant.get("src") or not grant.get("dst"):
        return []
    return _acl_rules(grant, by_proto)


def _without_acl_equivalent(base: list[str | int], grant: dict[str, Any]) -> list[PolicyProblem]:
    """App capabilities, via route steering and '*' sources or destinations: no 0.28 ACL allows the same flows."""
    problems: list[PolicyProblem] = []
    if grant.get("app"):
        problems.append(
            PolicyProblem(format_path([*base, "app"]), "app capability grants have no ACL equivalent on Headscale 0.28")
        )
    if grant.get("via"):
        problems.append(
            PolicyProblem(format_path([*base, "via"]), "via route steering has no ACL equivalent on Headscale 0.28")
        )
    for key in ("src", "dst"):
        for position, text in enumerate(grant.get(key, [])):
            if text == "*":
                problems.append(
                    PolicyProblem(
                        format_path([*base, key, position]),
                        "'*' is the tailnet ranges on 0.29 but every IP on 0.28, so it cannot be converted; name the "
                        + ("sources" if key == "src" else "destinations")
                        + " (autogroup:member, autogroup:tagged, groups, tags, CIDRs)",
                    )
                )
    return problems


def _ports_by_protocol(
    base: list[str | int], grant: dict[str, Any], problems: list[PolicyProblem]
) -> dict[int | None, list[str]]:
    """The port texts of the grant's ``ip`` entries per protocol (None: no protocol), in order and without repeats;
    ports on a protocol without ports go to ``problems``."""
    by_proto: dict[int | None, list[str]] = {}
    for position, entry in enumerate(grant.get("ip") or ()):
        proto, ports_range = parse_grant_ip(entry, version="0.29")
        if proto is not None and proto not in PORT_PROTOCOLS and ports_range != (ALL_PORTS,):
            problems.append(
                PolicyProblem(format_path([*base, "ip", position]), f"protocol {proto} has no ports: write '{proto}:*'")
            )
            continue
        ports = "*" if entry == "*" else entry.rpartition(":")[2]
        texts = by_proto.setdefault(proto, [])
        if ports not in texts:
            texts.append(ports)
    return by_proto


def _acl_rules(grant: dict[str, Any], by_proto: dict[int | None, list[str]]) -> list[dict[str, Any]]:
    """One ACL rule per protocol (no protocol first, then by number) and the ICMP companion of entries without one."""
    sources = ["*" if src == "autogroup:danger-all" else src for src in grant["src"]]
    rules: list[dict[str, Any]] = []
    for proto in sorted(by_proto, key=lambda p: -1 if p is None else p):
        texts = by_proto[proto]
        ports = "*" if "*" in texts else ",".join(texts)
        rule: dict[str, Any] = {"action": "accept", "src": list(sources), "dst": [f"{d}:{ports}" for d in grant["dst"]]}
        if proto is not None:
            rule["proto"] = _ACL_028_NAMES.get(proto, str(proto))
        rules.append(rule)
    if None in by_proto:
        rules.append(
            {"action": "accept", "src": list(sources), "proto": "icmp", "dst": [f"{d}:*" for d in grant["dst"]]}
        )
    return rules
