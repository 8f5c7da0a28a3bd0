"""Conformance with Headscale's policy parser, per minor: one minimal document per class of policy that Headscale
accepts although the model used to refuse it (each accepted, read the way Headscale reads it, and linted where the
project keeps its strictness), and the classes Headscale refuses (still refused: no false acceptance).

The documents are written for these tests from the documented behaviour of ``hscontrol/policy/v2`` (0.28, 0.29);
none is copied from upstream.
"""

from __future__ import annotations

from typing import Any

import pytest

from headscale_ha.policy.check import DELIBERATE_DIFFERENCES, check_policy, lint_policy, validate_policy
from headscale_ha.policy.hujson import load_hujson
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.schema import policy_document

VERSIONS = ("0.28", "0.29")
BASE: dict[str, Any] = {
    "groups": {"group:ops": ["bob@"]},
    "tagOwners": {"tag:router": ["group:ops"], "tag:server": ["group:ops"]},
    "hosts": {"db": "10.2.0.5"},
}


def doc(**extra: Any) -> dict[str, Any]:
    return {**BASE, **extra}


def acl(**rule: Any) -> dict[str, Any]:
    return doc(acls=[{"action": "accept", "src": ["group:ops"], "dst": ["tag:server:22"], **rule}])


def ssh(**rule: Any) -> dict[str, Any]:
    return doc(ssh=[{"action": "accept", "src": ["group:ops"], "dst": ["tag:server"], "users": ["root"], **rule}])


def refusal(data: Any, version: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        validate_policy(data, version=version)
    return [str(problem) for problem in caught.value.problems]


def codes(data: Any, version: str) -> set[str]:
    return {lint.code for lint in check_policy(data, version=version).lints}


# --- classes Headscale accepts -------------------------------------------------------------------------------------

ACCEPTED: list[tuple[str, dict[str, Any], tuple[str, ...], str | None]] = [
    # (class, document, minors that accept it, lint code the project raises on it)
    (
        "default routes as auto-approver keys",
        doc(autoApprovers={"routes": {"0.0.0.0/0": ["tag:router"], "::/0": ["tag:router"]}}),
        VERSIONS,
        "route-default",
    ),
    ("empty proto", acl(proto=""), VERSIONS, None),
    ("protocol name in upper case", acl(proto="TCP"), VERSIONS, "proto-spelling"),
    (
        "rule keys in any case",
        doc(ACLs=[{"Action": "accept", "SRC": ["group:ops"], "Dst": ["tag:server:22"]}]),
        VERSIONS,
        "key-spelling",
    ),
    (
        "keys with '_' and '-' (Go's v2 folding)",
        {"tag_owners": {"tag:x": ["bob@"]}, "auto-approvers": {"exit_node": ["tag:x"]}},
        VERSIONS,
        "key-spelling",
    ),
    ("a known protocol number with a leading zero on 0.29 (read as its name)", acl(proto="06"), ("0.29",), None),
    ("CIDR with host bits", acl(src=["10.0.0.1/8"], dst=["10.2.0.7/16:443"]), VERSIONS, "host-bits"),
    ("host value with host bits", doc(hosts={"net": "10.1.0.1/24"}), VERSIONS, "host-bits"),
    (
        "route key with host bits",
        doc(autoApprovers={"routes": {"10.20.0.1/16": ["tag:router"]}}),
        VERSIONS,
        "host-bits",
    ),
    ("IPv6 in upper case", doc(hosts={"v6": "FD00::1"}), VERSIONS, "address-spelling"),
    ("bracketed IPv6 destination with a port", acl(dst=["[fd7a:115c:a1e0::1]:80"]), ("0.29",), "address-spelling"),
    ("bracketed IPv6 destination with a range", acl(dst=["[fd7a:115c:a1e0::1]:80-90"]), ("0.29",), None),
    ("bracketed IPv6 destination with '*'", acl(dst=["[fd7a:115c:a1e0::1]:*"]), ("0.29",), None),
    ("bracketed IPv6 prefix destination", acl(dst=["[fd7a:115c:a1e0::]/64:443,80"]), ("0.29",), None),
    ("whitespace around aliases", acl(src=[" group:ops "]), ("0.29",), "whitespace"),
    ("whitespace around an SSH action and users", ssh(action=" check ", users=[" root "]), ("0.29",), "whitespace"),
    ("empty src and dst in a grant", doc(grants=[{"src": [], "dst": [], "ip": ["*"]}]), ("0.29",), "empty-rule"),
    ("grant without src and dst keys", doc(grants=[{"ip": ["tcp:22"]}]), ("0.29",), "empty-rule"),
    ("empty src in an ACL", acl(src=[]), VERSIONS, "empty-rule"),
    ("ACL rule without action", doc(acls=[{"src": ["group:ops"], "dst": ["db:22"]}]), VERSIONS, "missing-action"),
    (
        "non-canonical localpart as a literal user",
        ssh(users=["localpart:alice@example.com"]),
        ("0.29",),
        "ssh-user-literal",
    ),
    ("canonical localpart on 0.28 is a literal", ssh(users=["localpart:*@example.com"]), ("0.28",), "ssh-user-literal"),
    ("unicode SSH user", ssh(users=["jürgen"]), VERSIONS, "ssh-user-literal"),
    ("autogroup spelled as an SSH user", ssh(users=["autogroup:admin"]), ("0.29",), "ssh-user-literal"),
    ("e-mail as an SSH user", ssh(users=["bob@example.com"]), VERSIONS, "ssh-user-literal"),
    ("nodeAttrs entry without attr", doc(nodeAttrs=[{"target": ["tag:server"]}]), ("0.29",), "empty-rule"),
    ("tag owners in a cycle", doc(tagOwners={"tag:a": ["tag:b"], "tag:b": ["tag:a", "bob@"]}), ("0.29",), "tag-cycle"),
    ("'#' keys inside ACL rules", acl(**{"#note": "why"}), VERSIONS, "comment-key"),
    ("port range starting at 0", acl(dst=["db:0-1023"]), VERSIONS, None),
    ("tag name starting with a digit on 0.28", doc(tagOwners={"tag:1st": ["bob@"]}), ("0.28",), "name-format"),
    ("wildcard SSH user on 0.28", ssh(users=["*"]), ("0.28",), "upgrade-0.29"),
    ("host as SSH destination on 0.28", ssh(dst=["db"]), ("0.28",), "upgrade-0.29"),
    ("checkPeriod on accept on 0.28", ssh(checkPeriod="1h"), ("0.28",), "upgrade-0.29"),
    (
        "tag reaching autogroup:self on 0.28",
        acl(src=["tag:server"], dst=["autogroup:self:*"]),
        ("0.28",),
        "upgrade-0.29",
    ),
    (
        "grant with ports on ICMP",
        doc(grants=[{"src": ["group:ops"], "dst": ["db"], "ip": ["icmp:22"]}]),
        ("0.29",),
        "port-on-portless",
    ),
    (
        "capability without a path",
        doc(grants=[{"src": ["group:ops"], "dst": ["db"], "app": {"example": [{}]}}]),
        ("0.29",),
        "cap-format",
    ),
    ("empty ipPool", doc(nodeAttrs=[{"target": ["*"], "attr": ["x"], "ipPool": []}]), ("0.29",), None),
    (
        "null sections and lists",
        doc(
            acls=None,
            ssh=[
                {
                    "action": "accept",
                    "src": ["group:ops"],
                    "dst": ["tag:server"],
                    "users": ["root"],
                    "checkPeriod": None,
                }
            ],
        ),
        ("0.29",),
        None,
    ),
]


@pytest.mark.parametrize(("name", "data", "minors", "code"), ACCEPTED, ids=[case[0] for case in ACCEPTED])
def test_headscale_accepts_it_and_so_does_the_model(
    name: str, data: dict[str, Any], minors: tuple[str, ...], code: str | None
) -> None:
    for version in minors:
        check = check_policy(data, version=version)
        if code is not None:
            assert code in {lint.code for lint in check.lints}, (version, check.lints)
        # What the model renders is read the same way again, with no further normalisation.
        again = check_policy(policy_document(check.policy), version=version)
        assert again.policy == check.policy
        assert not {lint.code for lint in again.lints} & {"whitespace", "key-spelling", "host-bits", "comment-key"}


def test_reading_normalises_like_headscale() -> None:
    data = {
        "Groups": {"group:ops": ["bob@"]},
        "tag-owners": {"tag:server": ["group:ops"]},
        "hosts": {"net": "10.1.0.1/24", "v6": "FD00::1"},
        "acls": [
            {
                "#why": "ops",
                "Action": "accept",
                "proto": "TCP",
                "src": [" group:ops", "10.0.0.1/8"],
                "dst": ["[fd7a:115c:a1e0::1]:443", "10.2.0.7/16:80"],
            },
            {"action": "accept", "proto": "6", "src": ["group:ops"], "dst": ["net:22"]},
        ],
        "ssh": [{"action": " accept", "src": ["group:ops"], "dst": ["tag:server "], "users": [" root"]}],
        "autoApprovers": {"routes": {"10.20.0.1/16": ["tag:server"], "10.20.0.0/16": ["group:ops"]}},
    }
    assert policy_document(validate_policy(data, version="0.29")) == {
        "groups": {"group:ops": ["bob@"]},
        "tagOwners": {"tag:server": ["group:ops"]},
        "hosts": {"net": "10.1.0.0/24", "v6": "fd00::1"},
        "acls": [
            {
                "action": "accept",
                "proto": "tcp",
                "src": ["group:ops", "10.0.0.0/8"],
                "dst": ["fd7a:115c:a1e0::1:443", "10.2.0.0/16:80"],
            },
            {"action": "accept", "proto": "tcp", "src": ["group:ops"], "dst": ["net:22"]},
        ],
        "ssh": [{"action": "accept", "src": ["group:ops"], "dst": ["tag:server"], "users": ["root"]}],
        "autoApprovers": {"routes": {"10.20.0.0/16": ["tag:server", "group:ops"]}},
    }


def test_028_keeps_numbers_and_whitespace_as_written() -> None:
    """0.28 neither trims nor turns numbers into names: '6' is not 'tcp' for its port check."""
    assert policy_document(validate_policy(acl(proto="6", dst=["db:*"]), version="0.28"))["acls"][0]["proto"] == "6"
    assert any("protocol '6' has no ports" in p for p in refusal(acl(proto="6", dst=["db:22"]), "0.28"))
    validate_policy(acl(proto="6", dst=["db:22"]), version="0.29")
    padded = doc(groups={"group:ops": [" bob@"]}, acls=[{"action": "accept", "src": [" bob@"], "dst": ["db:22"]}])
    assert policy_document(validate_policy(padded, version="0.28"))["acls"][0]["src"] == [" bob@"]
    assert "user-format" in codes(padded, "0.28")


# --- classes Headscale refuses (kept refused) --------------------------------------------------------------------

REFUSED: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = [
    ("unknown top-level key", doc(acl=[]), VERSIONS, "did you mean 'acls'?"),
    ("two spellings of one key", {"acls": [], "ACLS": []}, VERSIONS, "name the same field"),
    ("unknown key in a rule", acl(ports=["22"]), VERSIONS, "unknown key 'ports'"),
    ("'#' key outside an ACL rule", doc(**{"#note": "x"}), VERSIONS, "// comments"),
    ("ACL action other than accept", acl(action="deny"), VERSIONS, "only action is 'accept'"),
    ("padded ACL action (never trimmed)", acl(action=" accept"), VERSIONS, "only action is 'accept'"),
    ("null action", acl(action=None), VERSIONS, "null is not a value"),
    ("undefined group", acl(src=["group:nope"]), VERSIONS, "is not defined in groups"),
    ("undefined tag", acl(dst=["tag:nope:22"]), VERSIONS, "has no tagOwners entry"),
    ("undefined host", acl(dst=["nohost:22"]), VERSIONS, "is not defined in hosts"),
    ("plain name as a user", doc(groups={"group:ops": ["bob"]}), VERSIONS, "write 'bob@'"),
    ("nested group", doc(groups={"group:a": ["group:ops"], "group:ops": ["bob@"]}), VERSIONS, "cannot contain"),
    ("group-like member with '@' on 0.29", doc(groups={"group:a": ["group:b@x"]}), ("0.29",), "cannot contain"),
    ("host name with a colon", doc(hosts={"a:b": "10.0.0.1"}), VERSIONS, "cannot be a host name"),
    ("host value that is no address", doc(hosts={"h": "10.0.0.300"}), VERSIONS, "not a valid IP address"),
    ("prefix length with a leading zero", doc(hosts={"h": "10.0.0.0/08"}), VERSIONS, "bad prefix length"),
    ("padded host value", doc(hosts={"h": " 10.0.0.1"}), VERSIONS, "not a valid IP address"),
    ("IPv6 zone", doc(hosts={"h": "fe80::1%eth0"}), VERSIONS, "zones"),
    (
        "route key without a length",
        doc(autoApprovers={"routes": {"10.20.0.1": ["tag:router"]}}),
        VERSIONS,
        "routes are CIDRs",
    ),
    ("approver without '@' or prefix", doc(autoApprovers={"exitNode": ["bob"]}), VERSIONS, "write 'bob@'"),
    ("tag owner cycle on 0.28", doc(tagOwners={"tag:a": ["tag:b"], "tag:b": ["tag:a"]}), ("0.28",), "cycle"),
    ("tag name starting with a digit on 0.29", doc(tagOwners={"tag:1st": ["bob@"]}), ("0.29",), "starts with a letter"),
    ("port 0 alone", acl(dst=["db:0"]), VERSIONS, "above 0"),
    ("port above 65535", acl(dst=["db:70000"]), VERSIONS, "out of range"),
    ("inverted range", acl(dst=["db:90-80"]), VERSIONS, "inverted"),
    ("padded port", acl(dst=["db:22, 23"]), VERSIONS, "invalid port ' 23'"),
    ("destination without ports", acl(dst=["db"]), VERSIONS, "has no ports"),
    ("bracketed destination on 0.28", acl(dst=["[fd7a:115c:a1e0::1]:80"]), ("0.28",), "need Headscale 0.29"),
    ("brackets around IPv4", acl(dst=["[10.0.0.1]:80"]), ("0.29",), "only valid around an IPv6"),
    ("bracket without a port", acl(dst=["[fd7a:115c:a1e0::1]"]), ("0.29",), "write '[<IPv6>]:<ports>'"),
    ("padded destination (never trimmed)", acl(dst=[" tag:server:22"]), VERSIONS, "not an alias"),
    ("padded alias on 0.28", acl(src=[" group:ops"]), ("0.28",), "not an alias"),
    ("protocol '*'", acl(proto="*"), VERSIONS, "'*' is not a protocol"),
    ("protocol 0", acl(proto="0", dst=["db:*"]), VERSIONS, "leading zeros"),
    ("protocol with a leading zero on 0.28", acl(proto="06"), ("0.28",), "leading zeros"),
    ("unknown protocol number with a leading zero", acl(proto="099", dst=["db:*"]), VERSIONS, "leading zeros"),
    ("protocol above 255", acl(proto="256"), VERSIONS, "out of range"),
    ("0.29 protocol names on 0.28", acl(proto="ipv6-icmp", dst=["db:*"]), ("0.28",), "write '58'"),
    ("ports on a protocol without ports", acl(proto="icmp", dst=["db:22"]), VERSIONS, "has no ports"),
    ("autogroup:internet as a source", acl(src=["autogroup:internet"]), VERSIONS, "only be used in ACL destinations"),
    ("unknown autogroup", acl(dst=["autogroup:admin:*"]), VERSIONS, "does not support"),
    ("danger-all as a destination", acl(dst=["autogroup:danger-all:*"]), ("0.29",), "source only"),
    (
        "tags reaching autogroup:self on 0.29",
        acl(src=["tag:server"], dst=["autogroup:self:*"]),
        ("0.29",),
        "cannot reach autogroup:self",
    ),
    ("'*' as SSH destination", ssh(dst=["*"]), VERSIONS, "not an SSH destination"),
    ("host as SSH destination on 0.29", ssh(dst=["db"]), ("0.29",), "cannot be an SSH destination"),
    ("address as SSH source", ssh(src=["10.0.0.1"]), VERSIONS, "cannot be an SSH source"),
    ("tag SSH to a user", ssh(src=["tag:server"], dst=["bob@"]), VERSIONS, "cannot SSH to user-owned"),
    ("group SSH to a user", ssh(dst=["bob@"]), VERSIONS, "as the only source"),
    ("unknown autogroup as SSH user on 0.28", ssh(users=["autogroup:admin"]), ("0.28",), "only autogroup here"),
    ("wildcard SSH user on 0.29", ssh(users=["*"]), ("0.29",), "not an SSH user"),
    ("padded empty SSH user on 0.29", ssh(users=["  "]), ("0.29",), "not an SSH user"),
    ("SSH rule without users on 0.29", ssh(users=[]), ("0.29",), "needs users"),
    (
        "SSH rule without action on 0.29",
        doc(ssh=[{"src": ["group:ops"], "dst": ["tag:server"], "users": ["root"]}]),
        ("0.29",),
        "needs an action",
    ),
    ("checkPeriod on accept on 0.29", ssh(checkPeriod="1h"), ("0.29",), "only applies to action 'check'"),
    ("checkPeriod above 168h on 0.29", ssh(action="check", checkPeriod="169h"), ("0.29",), "above the maximum"),
    ("checkPeriod 'always' on 0.28", ssh(action="check", checkPeriod="always"), ("0.28",), "needs Headscale 0.29"),
    ("checkPeriod that is no duration", ssh(action="check", checkPeriod="12 hours"), VERSIONS, "duration"),
    ("acceptEnv on 0.28", ssh(acceptEnv=["LANG"]), ("0.28",), "needs Headscale 0.29"),
    ("empty acceptEnv entry", ssh(acceptEnv=[""]), ("0.29",), "cannot be empty"),
    ("grants on 0.28", doc(grants=[]), ("0.28",), "needs Headscale 0.29"),
    ("grant without ip or app", doc(grants=[{"src": ["group:ops"], "dst": ["db"]}]), ("0.29",), "needs 'ip' or 'app'"),
    (
        "upper-case protocol in a grant",
        doc(grants=[{"src": ["*"], "dst": ["db"], "ip": ["TCP:22"]}]),
        ("0.29",),
        "unknown protocol",
    ),
    (
        "default route as a grant destination",
        doc(grants=[{"src": ["*"], "dst": ["0.0.0.0/0"], "ip": ["*"]}]),
        ("0.29",),
        "use '*' or autogroup:internet",
    ),
    (
        "tailscale.com capability",
        doc(grants=[{"src": ["*"], "dst": ["db"], "app": {"tailscale.com/cap/funnel": []}}]),
        ("0.29",),
        "not grantable",
    ),
    (
        "via that is no tag",
        doc(grants=[{"src": ["*"], "dst": ["db"], "ip": ["*"], "via": ["db"]}]),
        ("0.29",),
        "via takes tags only",
    ),
    ("non-empty ipPool", doc(nodeAttrs=[{"target": ["*"], "ipPool": ["100.80.0.0/16"]}]), ("0.29",), "ipPool"),
    ("funnel attribute", doc(nodeAttrs=[{"target": ["*"], "attr": ["funnel"]}]), ("0.29",), "funnel"),
    ("test with several ports", doc(tests=[{"src": "db", "accept": ["db:22-23"]}]), ("0.29",), "names one port"),
    ("test without assertions", doc(tests=[{"src": "db"}]), ("0.29",), "needs 'accept' or 'deny'"),
    (
        "sshTests with an empty source",
        doc(sshTests=[{"src": " ", "dst": ["tag:server"], "accept": ["root"]}]),
        ("0.29",),
        "needs a source",
    ),
    ("HuJSON with JSON5 extras", {}, (), ""),  # see test_json5_extras_are_refused
]


@pytest.mark.parametrize(("name", "data", "minors", "fragment"), REFUSED, ids=[case[0] for case in REFUSED])
def test_headscale_refuses_it_and_so_does_the_model(
    name: str, data: dict[str, Any], minors: tuple[str, ...], fragment: str
) -> None:
    for version in minors:
        problems = refusal(data, version)
        assert any(fragment in problem for problem in problems), (version, problems)


@pytest.mark.parametrize(
    "text",
    [
        "{acls: []}",  # unquoted key
        "{'acls': []}",  # single quotes
        '{"randomizeClientPort": 0x1}',  # hex number
        '{"acls": [,]}',  # a comma after no value
        '{"acls": NaN}',
        '{"acls": [], "acls": []}',  # duplicate key
        '{"acls": []} /* open',
    ],
)
def test_json5_extras_are_refused(text: str) -> None:
    with pytest.raises(PolicyError, match="not valid HuJSON"):
        load_hujson(text)


def test_hujson_comments_and_trailing_commas() -> None:
    text = '// c\n{"acls": [ /* x */ {"action": "accept", "src": ["*",], "dst": ["*:*"],},], "s": "a // b, ]"}'
    assert load_hujson(text) == {"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}], "s": "a // b, ]"}


def test_lint_policy_takes_text_and_names_path_finding_and_hazard() -> None:
    lints = lint_policy('{"autoApprovers": {"routes": {"0.0.0.0/0": ["alice@"]}}}', version="0.29")
    assert [(lint.path, lint.code) for lint in lints] == [('autoApprovers.routes["0.0.0.0/0"]', "route-default")]
    assert "exit" in lints[0].finding
    assert "exitNode" in lints[0].hazard
    assert str(lints[0]).endswith("[route-default]")


def test_deliberate_differences_are_documented() -> None:
    assert len(DELIBERATE_DIFFERENCES) >= 4
    assert all(text.endswith(".") for text in DELIBERATE_DIFFERENCES)
