"""Policy model: what Headscale 0.28 and 0.29 accept and refuse, with a path and a reason per problem. The
grants→ACL conversion is in test_grant_conversion.py; the classes of documents Headscale accepts or refuses, one
minimal document each, are in test_conformance.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headscale_ha.policy.check import check_policy, parse_policy, validate_policy
from headscale_ha.policy.problems import PolicyError, PolicyProblem
from headscale_ha.policy.schema import policy_document
from headscale_ha.policy.versions import headscale_minor
from tests.support.policy_samples import minimal

BASE = Path(__file__).resolve().parents[2] / "policy" / "base.hujson"
VERSIONS = ("0.28", "0.29")


def with_acl(rule: dict[str, Any]) -> dict[str, Any]:
    return minimal(acls=[{"action": "accept", **rule}])


def with_ssh(rule: dict[str, Any]) -> dict[str, Any]:
    return minimal(ssh=[{"action": "accept", "users": ["root"], **rule}])


def problems_of(data: Any, version: str) -> list[PolicyProblem]:
    with pytest.raises(PolicyError) as caught:
        validate_policy(data, version=version)
    return caught.value.problems


def assert_problem(data: Any, version: str, path: str, fragment: str) -> None:
    problems = problems_of(data, version)
    assert any(p.path == path and fragment in p.reason for p in problems), "\n".join(map(str, problems))


# --- the shipped base policy and HuJSON ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_shipped_base_policy_validates(version: str) -> None:
    policy = parse_policy(BASE.read_text(), version=version)
    assert policy.grants is None
    assert policy.acls
    assert all("@" in member for members in (policy.groups or {}).values() for member in members)
    assert not any(dst.startswith("*") for acl in policy.acls for dst in acl.dst)


def test_hujson_comments_and_trailing_commas_parse() -> None:
    text = """
    // a comment
    {
      /* block */ "groups": {"group:admins": ["alice@",],},
      "acls": [
        {"action": "accept", "src": ["group:admins"], "dst": ["autogroup:member:*",],}, // trailing
      ],
    }
    """
    policy = parse_policy(text, version="0.28")
    assert policy_document(policy) == {
        "groups": {"group:admins": ["alice@"]},
        "acls": [{"action": "accept", "src": ["group:admins"], "dst": ["autogroup:member:*"]}],
    }


def test_duplicate_keys_are_refused_like_headscale() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy('{"acls": [], "acls": []}', version="0.29")
    assert caught.value.problems[0].path == "(root)"
    assert "Duplicate key" in caught.value.problems[0].reason


@pytest.mark.parametrize(("text", "fragment"), [("{", "not valid HuJSON"), ("[]", "must be a JSON object")])
def test_broken_documents_are_reported_at_the_root(text: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, version="0.28")
    assert caught.value.problems[0].path == "(root)"
    assert fragment in caught.value.problems[0].reason


def test_absent_and_empty_acls_stay_distinct() -> None:
    assert policy_document(validate_policy({}, version="0.28")) == {}
    assert policy_document(validate_policy({"acls": []}, version="0.28")) == {"acls": []}


def test_error_lists_every_problem_one_per_line() -> None:
    data = minimal(groups={"group:admins": ["alice"]}, hosts={"web": "10.1.0.300/24"}, acl=[])
    with pytest.raises(PolicyError) as caught:
        validate_policy(data, version="0.28")
    problems = caught.value.problems
    assert len(problems) == 3
    assert str(caught.value).splitlines() == [f"{p.path}: {p.reason}" for p in problems]
    assert {p.path for p in problems} == {'groups["group:admins"][0]', 'hosts["web"]', "acl"}


def test_semantic_problems_are_collected_together() -> None:
    data = with_acl({"src": ["group:nope", "tag:nope"], "dst": ["nohost:22"]})
    assert [p.path for p in problems_of(data, "0.29")] == ["acls[0].src[0]", "acls[0].src[1]", "acls[0].dst[0]"]


# --- error classes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (minimal(acl=[]), "acl", "did you mean 'acls'?"),
        (minimal(TagOwner={}), "TagOwner", "did you mean 'tagOwners'?"),
        (with_acl({"src": ["group:ops"], "dst": ["web:22"], "destination": []}), "acls[0].destination", "'dst'"),
        (minimal(**{"#note": "x"}), '["#note"]', "// comments"),
        (with_ssh({"src": ["group:ops"], "dst": ["tag:server"], "user": []}), "ssh[0].user", "'users'"),
        (minimal(autoApprovers={"exitNodes": []}), "autoApprovers.exitNodes", "did you mean 'exitNode'?"),
        (minimal(postures={}), "postures", "not supported"),
    ],
)
def test_unknown_keys_are_refused_with_a_hint(data: dict[str, Any], path: str, fragment: str, version: str) -> None:
    assert_problem(data, version, path, fragment)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (with_acl({"src": ["group:nope"], "dst": ["web:22"]}), "acls[0].src[0]", "group 'group:nope' is not defined"),
        (with_acl({"src": ["group:ops"], "dst": ["tag:nope:22"]}), "acls[0].dst[0]", "'tag:nope' has no tagOwners"),
        (with_acl({"src": ["group:ops"], "dst": ["wbe:22"]}), "acls[0].dst[0]", "did you mean 'web'?"),
        (with_acl({"src": ["bob"], "dst": ["web:22"]}), "acls[0].src[0]", "host 'bob' is not defined"),
        (with_ssh({"src": ["group:nope"], "dst": ["tag:server"]}), "ssh[0].src[0]", "'group:nope' is not defined"),
        (with_ssh({"src": ["group:ops"], "dst": ["tag:nope"]}), "ssh[0].dst[0]", "'tag:nope' has no tagOwners"),
        (
            minimal(autoApprovers={"routes": {"10.20.0.0/16": ["group:nope"]}}),
            'autoApprovers.routes["10.20.0.0/16"][0]',
            "'group:nope' is not defined",
        ),
        (minimal(autoApprovers={"exitNode": ["tag:nope"]}), "autoApprovers.exitNode[0]", "no tagOwners entry"),
        (minimal(tagOwners={"tag:server": ["group:nope"]}), 'tagOwners["tag:server"][0]', "'group:nope' is not"),
        (minimal(tagOwners={"tag:server": ["tag:nope"]}), 'tagOwners["tag:server"][0]', "'tag:nope' has no"),
    ],
)
def test_undefined_references_are_refused(data: dict[str, Any], path: str, fragment: str, version: str) -> None:
    assert_problem(data, version, path, fragment)


def test_undefined_host_hints_at_a_user() -> None:
    assert_problem(with_acl({"src": ["bob"], "dst": ["web:22"]}), "0.28", "acls[0].src[0]", "write 'bob@'")


@pytest.mark.parametrize("version", VERSIONS)
def test_auto_approver_tags_need_tag_owners(version: str) -> None:
    data = minimal(autoApprovers={"routes": {"10.20.0.0/16": ["tag:routr"]}})
    problems = problems_of(data, version)
    assert [p.path for p in problems] == ['autoApprovers.routes["10.20.0.0/16"][0]']
    assert "'tag:routr' has no tagOwners entry" in problems[0].reason
    assert "never applies" in problems[0].reason
    assert "did you mean 'tag:router'?" in problems[0].reason


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (minimal(hosts={"web": "10.1.0.300"}), 'hosts["web"]', "not a valid IP address"),
        (minimal(hosts={"web": "10.1.0.0/024"}), 'hosts["web"]', "bad prefix length '024'"),
        (minimal(hosts={"web": "FD00::1/129"}), 'hosts["web"]', "bad prefix length"),
        (minimal(hosts={"a:b": "10.1.0.1"}), 'hosts["a:b"]', "cannot be a host name"),
        # Headscale reads what is not an address and has no ':' as a host name:
        (with_acl({"src": ["group:ops"], "dst": ["10.0.0.0/33:22"]}), "acls[0].dst[0]", "'10.0.0.0/33' is not defined"),
        (with_acl({"src": ["10.0.0.1/8/9"], "dst": ["web:22"]}), "acls[0].src[0]", "is not defined in hosts"),
        (
            minimal(autoApprovers={"routes": {"10.20.0.0/33": ["tag:router"]}}),
            'autoApprovers.routes["10.20.0.0/33"]',
            "not a valid CIDR",
        ),
        (
            minimal(autoApprovers={"routes": {"10.20.0.1": ["tag:router"]}}),
            'autoApprovers.routes["10.20.0.1"]',
            "routes are CIDRs",
        ),
    ],
)
def test_invalid_addresses_are_refused(data: dict[str, Any], path: str, fragment: str, version: str) -> None:
    assert_problem(data, version, path, fragment)


@pytest.mark.parametrize(
    "dst", ["web:*", "web:22", "web:80,443", "web:1000-2000,3000", "db:1-65535", "fd00:1::/64:443", "web:0-10"]
)
def test_valid_ports_and_destinations(dst: str) -> None:
    validate_policy(with_acl({"src": ["group:ops"], "dst": [dst]}), version="0.28")


@pytest.mark.parametrize(
    ("dst", "fragment"),
    [
        ("web:0", "a single port must be above 0"),
        ("web:70000", "out of range"),
        ("web:90-80", "inverted"),
        ("web:22,,23", "invalid port ''"),
        ("web:http", "invalid port 'http'"),
        ("web:22, 23", "invalid port ' 23'"),
        ("web:1-2-3", "invalid port range '1-2-3'"),
        ("tag:server", "has no ports: write 'tag:server:*'"),
        ("web", "has no ports"),
        ("[10.0.0.1]:443", "only valid around an IPv6 address"),
    ],
)
def test_invalid_ports_are_refused(dst: str, fragment: str) -> None:
    assert_problem(with_acl({"src": ["group:ops"], "dst": [dst]}), "0.29", "acls[0].dst[0]", fragment)


@pytest.mark.parametrize(("version", "proto"), [(v, p) for v in VERSIONS for p in ("tcp", "udp", "17", "132", "gre")])
def test_valid_protocols(version: str, proto: str) -> None:
    validate_policy(with_acl({"src": ["group:ops"], "proto": proto, "dst": ["web:*"]}), version=version)


@pytest.mark.parametrize(
    ("version", "proto", "fragment"),
    [
        ("0.28", "TCPP", "did you mean 'tcp'?"),
        ("0.29", "*", "'*' is not a protocol"),
        ("0.28", "0", "leading zeros are not permitted"),
        ("0.29", "256", "out of range (0-255)"),
        ("0.28", "06", "leading zeros are not permitted"),
        ("0.29", "tcpp", "did you mean 'tcp'?"),
        ("0.28", "ipv6-icmp", "write '58'"),
        ("0.28", "fc", "write '133'"),
    ],
)
def test_invalid_protocols_are_refused(version: str, proto: str, fragment: str) -> None:
    data = with_acl({"src": ["group:ops"], "proto": proto, "dst": ["web:*"]})
    assert_problem(data, version, "acls[0].proto", fragment)


def test_protocol_names_new_in_029_are_accepted_there() -> None:
    for proto in ("ipv6-icmp", "fc"):
        validate_policy(with_acl({"src": ["group:ops"], "proto": proto, "dst": ["web:*"]}), version="0.29")


@pytest.mark.parametrize("version", VERSIONS)
def test_ports_on_a_protocol_without_ports_are_refused(version: str) -> None:
    data = with_acl({"src": ["group:ops"], "proto": "icmp", "dst": ["web:*", "db:22"]})
    problems = problems_of(data, version)
    assert [(p.path, p.reason) for p in problems] == [("acls[0].dst[1]", "protocol 'icmp' has no ports: write 'db:*'")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("data", "path"),
    [
        (minimal(groups={"group:admins": ["alice"]}), 'groups["group:admins"][0]'),
        (minimal(tagOwners={"tag:server": ["alice"]}), 'tagOwners["tag:server"][0]'),
        (minimal(autoApprovers={"exitNode": ["alice"]}), "autoApprovers.exitNode[0]"),
        (with_ssh({"src": ["alice"], "dst": ["tag:server"]}), "ssh[0].src[0]"),
    ],
)
def test_users_without_at_are_refused(data: dict[str, Any], path: str, version: str) -> None:
    assert_problem(data, version, path, "users must contain '@': write 'alice@'")


@pytest.mark.parametrize(
    ("data", "path", "fragment", "versions"),
    [
        (
            minimal(groups={"group:admins": ["group:ops"]}),
            'groups["group:admins"][0]',
            "groups cannot contain groups",
            VERSIONS,
        ),
        (minimal(groups={"admins": ["alice@"]}), 'groups["admins"]', "group names start with 'group:'", VERSIONS),
        (minimal(tagOwners={"tag:1st": ["alice@"]}), 'tagOwners["tag:1st"]', "starts with a letter", ("0.29",)),
        (
            minimal(tagOwners={"tag:a": ["tag:b"], "tag:b": ["tag:a"]}),
            'tagOwners["tag:a"]',
            "tag:a → tag:b → tag:a",
            ("0.28",),
        ),
        (
            with_acl({"src": ["autogroup:internet"], "dst": ["web:22"]}),
            "acls[0].src[0]",
            "only be used in ACL destinations",
            VERSIONS,
        ),
        (
            with_acl({"src": ["group:ops"], "dst": ["autogroup:nonroot:*"]}),
            "acls[0].dst[0]",
            "cannot be used in a",
            VERSIONS,
        ),
        (
            with_acl({"src": ["autogroup:admin"], "dst": ["web:22"]}),
            "acls[0].src[0]",
            "Headscale does not support",
            VERSIONS,
        ),
        (with_acl({"action": "deny", "src": ["group:ops"], "dst": ["web:22"]}), "acls[0].action", "'accept'", VERSIONS),
        (
            with_acl({"src": ["tag:server"], "dst": ["autogroup:self:*"]}),
            "acls[0].src[0]",
            "cannot reach autogroup:self",
            ("0.29",),
        ),
        (with_acl({"src": "group:ops", "dst": ["web:22"]}), "acls[0].src", "valid list", VERSIONS),
    ],
)
def test_structure_and_placement_rules(
    data: dict[str, Any], path: str, fragment: str, versions: tuple[str, ...]
) -> None:
    for version in versions:
        assert_problem(data, version, path, fragment)


SSH_029_ONLY = {"cannot be an SSH destination", "not an SSH user", "needs users", "only applies", "above the maximum"}


@pytest.mark.parametrize(
    ("rule", "path", "fragment"),
    [
        ({"src": ["group:ops"], "dst": ["*"]}, "ssh[0].dst[0]", "'*' is not an SSH destination"),
        ({"src": ["group:ops"], "dst": ["web"]}, "ssh[0].dst[0]", "cannot be an SSH destination"),
        ({"src": ["group:ops"], "dst": ["group:admins"]}, "ssh[0].dst[0]", "cannot be used in an SSH destination"),
        ({"src": ["tag:server"], "dst": ["alice@"]}, "ssh[0].dst[0]", "cannot SSH to user-owned devices"),
        ({"src": ["tag:server"], "dst": ["autogroup:member"]}, "ssh[0].dst[0]", "cannot SSH to autogroup:member"),
        ({"src": ["autogroup:tagged"], "dst": ["autogroup:self"]}, "ssh[0].dst[0]", "cannot SSH to autogroup:self"),
        ({"src": ["group:admins"], "dst": ["alice@"]}, "ssh[0].dst[0]", "as the only source; use autogroup:self"),
        ({"src": ["group:ops"], "dst": ["tag:server"], "users": ["*"]}, "ssh[0].users[0]", "not an SSH user"),
        ({"src": ["group:ops"], "dst": ["tag:server"], "users": []}, "ssh[0].users", "needs users"),
        ({"src": ["group:ops"], "dst": ["tag:server"], "checkPeriod": "1h"}, "ssh[0].checkPeriod", "only applies"),
        (
            {"action": "check", "src": ["group:ops"], "dst": ["tag:server"], "checkPeriod": "169h"},
            "ssh[0].checkPeriod",
            "above the maximum of 168h",
        ),
        ({"action": "reject", "src": ["group:ops"], "dst": ["tag:server"]}, "ssh[0].action", "'accept' or 'check'"),
    ],
)
def test_ssh_rules(rule: dict[str, Any], path: str, fragment: str) -> None:
    """Refused by 0.29; what 0.28 still takes is accepted there with an upgrade lint."""
    for version in VERSIONS:
        if version == "0.28" and any(only in fragment for only in SSH_029_ONLY):
            check = check_policy(with_ssh(rule), version=version)
            assert any(lint.code == "upgrade-0.29" and lint.path.startswith(path) for lint in check.lints), check
        else:
            assert_problem(with_ssh(rule), version, path, fragment)


def test_same_user_ssh_and_check_action_are_accepted() -> None:
    for version in VERSIONS:
        validate_policy(with_ssh({"src": ["alice@"], "dst": ["alice@"]}), version=version)
        validate_policy(
            with_ssh({"action": "check", "src": ["group:ops"], "dst": ["tag:server"], "checkPeriod": "1h30m"}),
            version=version,
        )


# --- 0.29-only features ---------------------------------------------------------------------------------------------

NEW_IN_029: list[tuple[dict[str, Any], str]] = [
    (minimal(grants=[{"src": ["group:ops"], "dst": ["tag:server"], "ip": ["tcp:22"]}]), "grants"),
    (minimal(nodeAttrs=[{"target": ["autogroup:member"], "attr": ["magicdns-aaaa"]}]), "nodeAttrs"),
    (minimal(tests=[{"src": "bob@", "proto": "tcp", "accept": ["tag:server:22"], "deny": ["db:5432"]}]), "tests"),
    (minimal(sshTests=[{"src": "bob@", "dst": ["tag:server"], "accept": ["ubuntu"], "deny": ["root"]}]), "sshTests"),
    (minimal(randomizeClientPort=True), "randomizeClientPort"),
    (with_ssh({"src": ["group:ops"], "dst": ["tag:server"], "acceptEnv": ["GIT_*"]}), "ssh[0].acceptEnv"),
    (
        with_ssh({"action": "check", "src": ["group:ops"], "dst": ["tag:server"], "checkPeriod": "always"}),
        "ssh[0].checkPeriod",
    ),
    (with_acl({"src": ["autogroup:danger-all"], "dst": ["web:443"]}), "acls[0].src[0]"),
    (with_acl({"src": ["group:ops"], "proto": "ipv6-icmp", "dst": ["web:*"]}), "acls[0].proto"),
]


@pytest.mark.parametrize(("data", "path"), NEW_IN_029, ids=[path for _, path in NEW_IN_029])
def test_features_new_in_029_are_refused_on_028(data: dict[str, Any], path: str) -> None:
    problems = problems_of(data, "0.28")
    assert [p.path for p in problems] == [path]
    assert "0.29" in problems[0].reason


@pytest.mark.parametrize(("data", "path"), NEW_IN_029, ids=[path for _, path in NEW_IN_029])
def test_features_new_in_029_are_accepted_on_029(data: dict[str, Any], path: str) -> None:
    validate_policy(data, version="0.29")


def test_grants_on_028_point_at_the_conversion_and_other_problems_still_show() -> None:
    data = minimal(grants=[{"src": ["*"]}], hosts={"web": "10.1.0.300/24"})
    problems = problems_of(data, "0.28")
    assert [p.path for p in problems] == ["grants", 'hosts["web"]']
    assert "grants_to_acls()" in problems[0].reason


@pytest.mark.parametrize(
    ("grant", "path", "fragment"),
    [
        ({"src": ["group:ops"], "dst": ["web"]}, "grants[0]", "needs 'ip' or 'app'"),
        ({"src": ["group:ops"], "dst": ["web"], "ip": ["icmp"]}, "grants[0].ip[0]", "invalid port 'icmp'"),
        ({"src": ["group:ops"], "dst": ["web"], "ip": ["tcp:22:23"]}, "grants[0].ip[0]", "more than one ':'"),
        ({"src": ["group:ops"], "dst": ["web"], "ip": ["*:22"]}, "grants[0].ip[0]", "'*' is not a protocol"),
        ({"src": ["group:ops"], "dst": ["0.0.0.0/0"], "ip": ["*"]}, "grants[0].dst[0]", "or autogroup:internet"),
        ({"src": ["*"], "dst": ["autogroup:self"], "ip": ["*"]}, "grants[0].src[0]", "'*' is refused too"),
        (
            {"src": ["group:ops"], "dst": ["web"], "ip": ["*"], "via": ["web"]},
            "grants[0].via[0]",
            "via takes tags only",
        ),
        ({"src": ["group:ops"], "dst": ["web"], "ip": ["*"], "via": ["tag:exit"]}, "grants[0].via[0]", "no tagOwners"),
        (
            {"src": ["group:ops"], "dst": ["autogroup:internet"], "app": {"example.com/cap/x": [{}]}},
            "grants[0].dst[0]",
            "app grants cannot target autogroup:internet",
        ),
        (
            {"src": ["group:ops"], "dst": ["web"], "app": {"tailscale.com/cap/funnel": [{}]}},
            'grants[0].app["tailscale.com/cap/funnel"]',
            "not grantable",
        ),
    ],
)
def test_grant_rules_on_029(grant: dict[str, Any], path: str, fragment: str) -> None:
    assert_problem(minimal(grants=[grant]), "0.29", path, fragment)


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (minimal(nodeAttrs=[{"target": ["autogroup:self"], "attr": ["x"]}]), "nodeAttrs[0].target[0]", "cannot be"),
        (minimal(nodeAttrs=[{"target": ["tag:server"], "attr": ["funnel"]}]), "nodeAttrs[0].attr[0]", "funnel"),
        (
            minimal(nodeAttrs=[{"target": ["*"], "attr": ["x"], "ipPool": ["100.80.0.0/16"]}]),
            "nodeAttrs[0].ipPool",
            "refuses ipPool",
        ),
        (minimal(tests=[{"src": "bob@", "accept": ["tag:server:22-23"]}]), "tests[0].accept[0]", "names one port"),
        (minimal(tests=[{"src": "bob@", "deny": ["10.0.0.0/8:22"]}]), "tests[0].deny[0]", "not a CIDR"),
        (minimal(tests=[{"src": "bob@", "accept": ["web:22"]}]), "tests[0].accept[0]", "'web' is a range"),
        (minimal(tests=[{"src": "bob@", "proto": "icmp", "accept": ["db:1"]}]), "tests[0].proto", "tcp, udp or sctp"),
        (minimal(tests=[{"src": "bob@"}]), "tests[0]", "needs 'accept' or 'deny'"),
        (minimal(sshTests=[{"src": "bob@", "dst": ["tag:nope"], "accept": ["a"]}]), "sshTests[0].dst[0]", "tagOwners"),
        (minimal(randomizeClientPort="yes"), "randomizeClientPort", "valid boolean"),
    ],
)
def test_other_029_sections(data: dict[str, Any], path: str, fragment: str) -> None:
    assert_problem(data, "0.29", path, fragment)


@pytest.mark.parametrize(
    ("version", "minor"), [("0.28", "0.28"), ("0.29.2", "0.29"), ("v0.28.0", "0.28"), (" 0.29", None), ("0.30", None)]
)
def test_headscale_minor(version: str, minor: str | None) -> None:
    if minor is None:
        with pytest.raises(ValueError, match="unsupported Headscale version"):
            headscale_minor(version)
    else:
        assert headscale_minor(version) == minor
