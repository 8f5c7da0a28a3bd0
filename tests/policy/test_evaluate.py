"""The policy's own ``tests`` and ``sshTests`` (0.29), evaluated offline: what passes, what fails (refused, as 0.29
refuses the write) and what depends on live nodes ("checked at apply").

The offline verdicts are checked against a brute-force evaluation over concrete tailnets (nodes with users, tags
and addresses), written here independently of the model from Headscale 0.29's documented test semantics: every
source address must reach some destination address, addresses match by overlap, a test whose source or
destination resolves to nothing fails.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headscale_ha.policy.check import check_policy, validate_policy
from headscale_ha.policy.evaluate import evaluate_policy_tests
from headscale_ha.policy.problems import PolicyError
from headscale_ha.policy.render import SiteRoutes, render_policy
from headscale_ha.policy.schema import Policy

GROUPS = {"group:ops": ["bob@", "carol@"], "group:adm": ["alice@"]}
TAGS = {"tag:srv": ["group:adm"], "tag:mon": ["group:adm"]}
HOSTS = {"db": "10.2.0.5", "lan": "10.1.0.0/24"}
BASE: dict[str, Any] = {"groups": GROUPS, "tagOwners": TAGS, "hosts": HOSTS}


def policy(**extra: Any) -> dict[str, Any]:
    return {**BASE, **extra}


def outcomes(data: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {o.path: (o.verdict, o.reason) for o in check_policy(data, version="0.29").test_outcomes}


def verdicts(data: dict[str, Any]) -> dict[str, str]:
    return {path: verdict for path, (verdict, _) in outcomes(data).items()}


ACLS = [
    {"action": "accept", "src": ["group:ops"], "proto": "tcp", "dst": ["tag:srv:22", "db:5432"]},
    {"action": "accept", "src": ["lan"], "dst": ["db:*"]},
    {"action": "accept", "src": ["tag:mon"], "proto": "tcp", "dst": ["tag:srv:9100"]},
]


def test_assertions_the_policy_decides_pass() -> None:
    data = policy(
        acls=ACLS,
        tests=[
            {"src": "group:ops", "proto": "tcp", "accept": ["tag:srv:22", "db:5432"], "deny": ["tag:srv:80"]},
            {"src": "bob@", "accept": ["db:5432"], "deny": ["db:22"]},
            {"src": "10.1.0.7", "accept": ["db:443"], "deny": ["10.2.0.6:443"]},
            {"src": "lan", "proto": "udp", "accept": ["db:53"]},
        ],
    )
    assert set(verdicts(data).values()) == {"pass"}
    assert outcomes(data)["tests[0].deny[0]"] == ("pass", "group:ops → tag:srv:80 is denied")


@pytest.mark.parametrize(
    ("test", "path", "reason"),
    [
        ({"src": "group:adm", "accept": ["tag:srv:22"]}, "tests[0].accept[0]", "is denied, expected ALLOWED"),
        ({"src": "bob@", "deny": ["tag:srv:22"]}, "tests[0].deny[0]", "is allowed, expected DENIED"),
        ({"src": "bob@", "proto": "udp", "accept": ["tag:srv:22"]}, "tests[0].accept[0]", "expected ALLOWED"),
        ({"src": "10.1.0.7", "accept": ["tag:srv:22"]}, "tests[0].accept[0]", "expected ALLOWED"),
        ({"src": "tag:mon", "proto": "udp", "accept": ["tag:srv:9100"]}, "tests[0].accept[0]", "expected ALLOWED"),
    ],
)
def test_a_test_that_fails_is_refused_like_headscale_refuses_the_write(
    test: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        validate_policy(policy(acls=ACLS, tests=[test]), version="0.29")
    (problem,) = caught.value.problems
    assert problem.path == path
    assert problem.reason.startswith("test fails: ")
    assert reason in problem.reason


@pytest.mark.parametrize(
    "test",
    [
        {"src": "autogroup:member", "accept": ["db:5432"]},  # which members have nodes is live
        {"src": "tag:srv", "deny": ["tag:srv:9100"]},  # a tag:srv node may also be tag:mon
        {"src": "bob@example.com", "accept": ["db:5432"]},  # may be bob@ matched by e-mail
        {"src": "100.64.0.1", "accept": ["db:5432"]},  # whose address is live
    ],
)
def test_assertions_that_depend_on_live_nodes_are_checked_at_apply(test: dict[str, Any]) -> None:
    (outcome,) = evaluate_policy_tests(validate_policy(policy(acls=ACLS, tests=[test]), version="0.29"), version="0.29")
    assert outcome.verdict == "checked at apply", outcome
    assert "live nodes" in outcome.reason


def test_one_uncovered_member_of_a_group_is_open_all_uncovered_is_a_failure() -> None:
    """Headscale only counts members that have nodes: one denied member among allowed ones fails only if it has a
    node; when every member is denied the test fails whatever the nodes."""
    acls = [{"action": "accept", "src": ["bob@"], "dst": ["db:22"]}]
    assert verdicts(policy(acls=acls, tests=[{"src": "group:ops", "accept": ["db:22"]}])) == {
        "tests[0].accept[0]": "checked at apply"
    }
    with pytest.raises(PolicyError, match="expected ALLOWED"):
        validate_policy(policy(acls=acls, tests=[{"src": "group:adm", "accept": ["db:22"]}]), version="0.29")


def test_without_acls_and_grants_everything_is_allowed() -> None:
    assert verdicts(policy(tests=[{"src": "bob@", "accept": ["db:1"]}])) == {"tests[0].accept[0]": "pass"}
    with pytest.raises(PolicyError, match="expected DENIED"):
        validate_policy(policy(tests=[{"src": "bob@", "deny": ["db:1"]}]), version="0.29")
    with pytest.raises(PolicyError, match="expected ALLOWED"):
        validate_policy(policy(acls=[], tests=[{"src": "bob@", "accept": ["db:1"]}]), version="0.29")


def test_grants_take_part_and_via_grants_are_checked_at_apply() -> None:
    grants = [{"src": ["group:ops"], "dst": ["db"], "ip": ["tcp:5432", "icmp:*"]}]
    assert verdicts(policy(grants=grants, tests=[{"src": "bob@", "proto": "tcp", "accept": ["db:5432"]}])) == {
        "tests[0].accept[0]": "pass"
    }
    via = [{"src": ["group:ops"], "dst": ["db"], "ip": ["*"], "via": ["tag:srv"]}]
    assert verdicts(policy(grants=via, tests=[{"src": "bob@", "accept": ["db:5432"]}])) == {
        "tests[0].accept[0]": "checked at apply"
    }


def test_a_source_or_destination_that_resolves_to_nothing_fails() -> None:
    empty = {**GROUPS, "group:none": []}
    with pytest.raises(PolicyError, match="resolves to no address"):
        validate_policy(
            policy(groups=empty, acls=ACLS, tests=[{"src": "group:none", "deny": ["db:1"]}]), version="0.29"
        )
    with pytest.raises(PolicyError, match="resolves to no address"):
        validate_policy(policy(acls=ACLS, tests=[{"src": "bob@", "deny": ["autogroup:self:22"]}]), version="0.29")


def test_undefined_names_in_tests_are_refused() -> None:
    with pytest.raises(PolicyError) as caught:
        validate_policy(
            policy(
                acls=ACLS,
                tests=[{"src": "group:nope", "accept": ["nohost:22"]}],
                sshTests=[{"src": "bob@", "dst": ["nohost"], "accept": ["root"]}],
            ),
            version="0.29",
        )
    assert [p.path for p in caught.value.problems] == ["tests[0].src", "tests[0].accept[0]", "sshTests[0].dst[0]"]


SSH = [
    {"action": "check", "src": ["group:adm"], "dst": ["tag:srv"], "users": ["root", "autogroup:nonroot"]},
    {"action": "accept", "src": ["group:ops"], "dst": ["tag:srv"], "users": ["autogroup:nonroot"]},
    {"action": "accept", "src": ["autogroup:member"], "dst": ["autogroup:self"], "users": ["autogroup:nonroot"]},
]


def test_ssh_tests_accept_deny_and_check() -> None:
    data = policy(
        ssh=SSH,
        sshTests=[
            {"src": "group:ops", "dst": ["tag:srv"], "accept": ["ubuntu"], "deny": ["root"]},
            {"src": "alice@", "dst": ["tag:srv"], "check": ["root", "ubuntu"]},
            {"src": "bob@", "dst": ["autogroup:self"], "accept": ["bob"], "deny": ["root"]},
            {"src": "bob@", "dst": ["db"], "accept": ["bob"]},
        ],
    )
    assert verdicts(data) == {
        "sshTests[0].accept[0]": "pass",
        "sshTests[0].deny[0]": "pass",
        "sshTests[1].check[0]": "pass",
        "sshTests[1].check[1]": "pass",
        "sshTests[2].accept[0]": "pass",
        "sshTests[2].deny[0]": "pass",
        "sshTests[3].accept[0]": "checked at apply",  # a host is a node only by its live address
    }


@pytest.mark.parametrize(
    ("test", "path", "reason"),
    [
        ({"src": "group:ops", "dst": ["tag:srv"], "check": ["ubuntu"]}, "sshTests[0].check[0]", "via check"),
        ({"src": "group:ops", "dst": ["tag:srv"], "accept": ["root"]}, "sshTests[0].accept[0]", "expected ALLOWED"),
        ({"src": "alice@", "dst": ["tag:srv"], "deny": ["root"]}, "sshTests[0].deny[0]", "expected DENIED"),
        ({"src": "tag:mon", "dst": ["tag:srv"], "accept": ["ubuntu"]}, "sshTests[0].accept[0]", "expected ALLOWED"),
    ],
)
def test_failing_ssh_tests_are_refused(test: dict[str, Any], path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as caught:
        validate_policy(policy(ssh=SSH, sshTests=[test]), version="0.29")
    assert [p.path for p in caught.value.problems] == [path]
    assert reason in caught.value.problems[0].reason


def test_028_has_no_tests_to_evaluate() -> None:
    assert evaluate_policy_tests(validate_policy(policy(acls=ACLS), version="0.28"), version="0.28") == []


def test_the_render_carries_the_outcomes_and_refuses_a_failing_test() -> None:
    import json

    hydra = SiteRoutes(name="hydra", gateway_ip="172.30.250.10", routes=("172.30.250.0/28",))
    base = policy(acls=ACLS, tests=[{"src": "group:adm", "accept": ["gateway-hydra:443"]}])
    rendered = render_policy(json.dumps(base), sites=(hydra,), version="0.29", router_tag_owner="group:adm")
    assert [(o.path, o.verdict) for o in rendered.test_outcomes] == [("tests[0].accept[0]", "pass")]
    denied = policy(acls=ACLS, tests=[{"src": "group:ops", "accept": ["gateway-hydra:443"]}])
    with pytest.raises(PolicyError, match="expected ALLOWED"):
        render_policy(json.dumps(denied), sites=(hydra,), version="0.29", router_tag_owner="group:adm")


# --- soundness against concrete tailnets --------------------------------------------------------------------------

USERS = ("alice", "bob", "carol")
SOURCES = [
    "group:ops",
    "group:adm",
    "alice@",
    "bob@",
    "tag:srv",
    "tag:mon",
    "autogroup:member",
    "autogroup:tagged",
    "*",
    "lan",
    "10.1.0.7",
    "db",
]
DESTINATIONS = ["tag:srv", "tag:mon", "db", "lan", "bob@", "group:adm", "autogroup:member", "autogroup:tagged"]
NUMBERS = {"tcp": {6}, "udp": {17}, None: {6, 17, 1, 58}}
_Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Node:
    user: str | None
    tags: frozenset[str]
    v4: str
    v6: str

    @property
    def prefixes(self) -> list[_Net]:
        return [ipaddress.ip_network(self.v4), ipaddress.ip_network(self.v6)]


def resolve(alias: str, nodes: list[Node]) -> list[_Net] | None:
    """Headscale 0.29 resolution over concrete nodes; None is a resolution error (the test fails)."""
    if alias in HOSTS:
        return [ipaddress.ip_network(HOSTS[alias])]
    if alias[0].isdigit():
        return [ipaddress.ip_network(alias)]
    if alias == "*":
        return [ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48")]
    if alias.endswith("@"):
        if not any(n.user == alias[:-1] for n in nodes):
            return None  # a user with no node here does not exist either
        return [p for n in nodes if n.user == alias[:-1] for p in n.prefixes]
    if alias.startswith("group:"):
        return [p for member in GROUPS[alias] for p in resolve(member, nodes) or []]
    if alias.startswith("tag:"):
        return [p for n in nodes if alias in n.tags for p in n.prefixes]
    if alias == "autogroup:member":
        return [p for n in nodes if n.user for p in n.prefixes]
    if alias == "autogroup:tagged":
        return [p for n in nodes if n.tags for p in n.prefixes]
    raise AssertionError(alias)


def concrete(data: dict[str, Any], nodes: list[Node], test: dict[str, Any], dst: str) -> bool:
    """Is ``dst`` reachable from every address of the test's source? (raises LookupError: the test fails)"""
    sources = resolve(test["src"], nodes)
    alias, _, port_text = dst.rpartition(":")
    targets = resolve(alias, nodes)
    if not sources or not targets:
        raise LookupError
    port, wanted = int(port_text), NUMBERS[test.get("proto")]
    rules = []
    for acl in data["acls"]:
        src = [p for a in acl["src"] for p in resolve(a, nodes) or []]
        for d in acl["dst"]:
            d_alias, _, ports = d.rpartition(":")
            first, _, last = ports.partition("-")
            span = (0, 65535) if ports == "*" else (int(first), int(last or first))
            rules.append((src, resolve(d_alias, nodes) or [], span, NUMBERS[acl.get("proto")]))

    def overlap(a: list[_Net], b: list[_Net]) -> bool:
        return any(x.version == y.version and x.overlaps(y) for x in a for y in b)  # type: ignore[arg-type]

    return all(
        any(
            overlap(src, [s]) and overlap(dst_set, targets) and span[0] <= port <= span[1] and protos & wanted
            for src, dst_set, span, protos in rules
        )
        for s in sources
    )


@st.composite
def tailnets(draw: st.DrawFn, *, every_principal: bool) -> list[Node]:
    nodes: list[Node] = []
    minimum = 1 if every_principal else 0
    for user in USERS:
        nodes += [Node(user, frozenset(), "", "") for _ in range(draw(st.integers(minimum, 2)))]
    for tag in ("tag:srv", "tag:mon"):
        if every_principal or draw(st.booleans()):
            nodes.append(Node(None, frozenset({tag}), "", ""))
    for _ in range(draw(st.integers(0, 2))):
        nodes.append(Node(None, frozenset(draw(st.sets(st.sampled_from(["tag:srv", "tag:mon"]), min_size=1))), "", ""))
    return [Node(n.user, n.tags, f"100.64.0.{i + 1}/32", f"fd7a:115c:a1e0::{i + 1}/128") for i, n in enumerate(nodes)]


rule_strategy = st.fixed_dictionaries(
    {
        "action": st.just("accept"),
        "src": st.lists(st.sampled_from(SOURCES), min_size=1, max_size=3, unique=True),
        "dst": st.lists(
            st.builds("{}:{}".format, st.sampled_from(DESTINATIONS), st.sampled_from(["22", "80-90", "*"])),
            min_size=1,
            max_size=2,
            unique=True,
        ),
    },
    optional={"proto": st.sampled_from(["tcp", "udp"])},
)
test_strategy = st.fixed_dictionaries(
    {
        "src": st.sampled_from(SOURCES),
        "accept": st.lists(
            st.builds("{}:{}".format, st.sampled_from(DESTINATIONS), st.sampled_from(["22", "85", "443"])),
            min_size=1,
            max_size=2,
        ),
    },
    optional={
        "proto": st.sampled_from(["tcp", "udp"]),
        "deny": st.lists(
            st.builds("{}:{}".format, st.sampled_from(DESTINATIONS), st.sampled_from(["22", "85", "443"])),
            min_size=1,
            max_size=2,
        ),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    acls=st.lists(rule_strategy, min_size=1, max_size=4),
    test=test_strategy,
    assumed=tailnets(every_principal=True),
    any_tailnet=tailnets(every_principal=False),
)
def test_offline_verdicts_agree_with_every_concrete_tailnet(
    acls: list[dict[str, Any]], test: dict[str, Any], assumed: list[Node], any_tailnet: list[Node]
) -> None:
    data = policy(acls=acls)
    model = Policy.model_validate({**data, "tests": [test]}, context={"version": "0.29"})
    for outcome in evaluate_policy_tests(model, version="0.29"):
        key = "accept" if ".accept[" in outcome.path else "deny"
        dst = test[key][int(outcome.path.rsplit("[", 1)[1].rstrip("]"))]
        expected = key == "accept"
        if outcome.verdict == "pass":  # under the stated assumption: every named principal has a node
            assert concrete(data, assumed, test, dst) == expected, (outcome, assumed)
        elif outcome.verdict == "fail":  # on every tailnet, principals with nodes or not
            for nodes in (assumed, any_tailnet):
                with contextlib.suppress(LookupError):  # resolving to nothing fails the test too
                    assert concrete(data, nodes, test, dst) != expected, (outcome, nodes)
