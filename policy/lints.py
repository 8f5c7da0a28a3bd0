"""Lints: the project's own strictness on a policy the target Headscale accepts.

Each finding is a :class:`PolicyLint` with its path, what was found, the hazard it prevents and a stable code
(names outside the usual characters, rules that match nothing, what the 0.28→0.29 upgrade would refuse, default
routes in ``autoApprovers``, SSH users that never match a login, …). A lint rule is one function per family of
findings; :func:`policy_lints` runs them in the order of :data:`LINT_RULES`, which is the order of the findings.
The lints of the reading itself (key spellings, whitespace, addresses) come from :mod:`.normalise`.
It depends on :mod:`.schema`, :mod:`.semantics` (:func:`ownership_cycle`), :mod:`.values` and :mod:`.problems`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

from headscale_ha.policy.problems import PolicyLint, format_path
from headscale_ha.policy.schema import Policy, SshRule
from headscale_ha.policy.semantics import ownership_cycle
from headscale_ha.policy.values import (
    ALL_PORTS,
    GO_DURATION_RE,
    LOCALPART_RE,
    MAX_CHECK_PERIOD_NS,
    PORT_PROTOCOLS,
    AliasKind,
    canonical_prefix,
    go_atoi,
    parse_alias,
    parse_go_duration_ns,
    parse_grant_ip,
    parse_prefix,
)

__all__ = ["LINT_RULES", "LintRule", "policy_lints"]

_USER_RE = re.compile(r"^[^\s@:,]+@(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)?$")
_NAME_RE = {
    "group": re.compile(r"^group:[A-Za-z0-9][A-Za-z0-9._-]*$"),
    "tag": re.compile(r"^tag:[A-Za-z][A-Za-z0-9-]*$"),
    "host": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
}
_LOGIN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_ATTR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._/-]*$")
_CAP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*/\S+$")
_UPGRADE = "Headscale 0.29 refuses this: the 0.28→0.29 upgrade would fail to load or write the policy"

#: A family of lints: the findings of one kind in a validated policy for a minor, in document order.
LintRule = Callable[[Policy, str], Iterator[PolicyLint]]


def policy_lints(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Every finding of every lint rule on a validated policy (``version`` is a minor), rule after rule."""
    for rule in LINT_RULES:
        yield from rule(policy, version)


def _lint(parts: Sequence[str | int], code: str, finding: str, hazard: str) -> PolicyLint:
    return PolicyLint(format_path(parts), code, finding, hazard)


def _name_formats(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Group, tag and host names outside the characters Tailscale tooling takes; host names that are addresses."""
    for kind, names in (("group", policy.groups or {}), ("tag", policy.tag_owners or {}), ("host", policy.hosts or {})):
        section = {"group": "groups", "tag": "tagOwners", "host": "hosts"}[kind]
        for name in names:
            if not _NAME_RE[kind].match(name):
                yield _lint(
                    [section, name],
                    "name-format",
                    f"{kind} name {name!r} is outside letters, digits, '.', "
                    "'_', '-'" + (" (after 'tag:' a letter first)" if kind == "tag" else ""),
                    "Tailscale tooling refuses it; 0.29 refuses tag names not starting with a letter",
                )
            if kind == "host" and canonical_prefix(name) is not None:
                yield _lint(
                    [section, name],
                    "name-format",
                    f"host name {name!r} is an address",
                    "a rule naming it reads the address, not this host entry",
                )


def _acl_rules(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Per ACL rule: no action, an empty side, and on 0.28 what 0.29 refuses or reads otherwise."""
    for index, acl in enumerate(policy.acls or ()):
        if acl.action is None:
            yield _lint(
                ["acls", index],
                "missing-action",
                "an ACL rule without 'action' is read as accept",
                "readers cannot tell the intent; Tailscale and other tools require 'action'",
            )
        if not acl.src or not acl.dst:
            yield _lint(
                ["acls", index],
                "empty-rule",
                "an ACL rule with an empty src or dst allows nothing",
                "a rule that silently matches nothing hides a typo or an emptied list",
            )
        if version == "0.28" and "autogroup:self" in [d.rpartition(":")[0] for d in acl.dst]:
            yield from _self_sources_028(index, acl.src, version)
        if version == "0.28" and acl.proto and go_atoi(acl.proto) is not None:
            yield _lint(
                ["acls", index, "proto"],
                "proto-spelling",
                f"protocol number {acl.proto!r} on 0.28",
                "0.28 allows ports only for the names tcp/udp/sctp, and 0.29 rewrites numbers as names",
            )


def _self_sources_028(index: int, sources: Sequence[str], version: str) -> Iterator[PolicyLint]:
    """0.28 lets any source reach autogroup:self; 0.29 only users, groups, '*' and autogroup:member."""
    for i, src in enumerate(sources):
        alias = parse_alias(src, version=version)
        if not (alias.kind in (AliasKind.USER, AliasKind.GROUP, AliasKind.WILDCARD) or src == "autogroup:member"):
            yield _lint(["acls", index, "src", i], "upgrade-0.29", f"{src!r} reaches autogroup:self", _UPGRADE)


def _user_formats(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Users (group members, owners, ACL and test sources) that can never match a Headscale user."""
    users: list[tuple[list[str | int], str]] = []
    for group, members in (policy.groups or {}).items():
        users += [(["groups", group, i], m) for i, m in enumerate(members)]
    for tag, owners in (policy.tag_owners or {}).items():
        users += [(["tagOwners", tag, i], o) for i, o in enumerate(owners) if "@" in o]
    for index, acl in enumerate(policy.acls or ()):
        users += [(["acls", index, "src", i], s) for i, s in enumerate(acl.src) if "@" in s]
    users += [(["tests", i, "src"], t.src) for i, t in enumerate(policy.tests or ()) if "@" in t.src]
    users += [(["sshTests", i, "src"], t.src) for i, t in enumerate(policy.ssh_tests or ()) if "@" in t.src]
    for position, user in users:
        if not _USER_RE.match(user):
            yield _lint(
                position,
                "user-format",
                f"user {user!r} is not 'name@' or 'name@domain'",
                "it never matches a Headscale user, so the entry grants nothing",
            )


def _tag_cycles(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """0.29 takes a tag ownership cycle (0.28 refuses it, see :mod:`.semantics`) and drops its closing edge."""
    owners = policy.tag_owners or {}
    if version < "0.29":
        return
    reported: set[frozenset[str]] = set()
    for tag in sorted(owners):
        cycle = ownership_cycle(tag, owners)
        if cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            yield _lint(
                ["tagOwners", tag],
                "tag-cycle",
                f"tag ownership cycle {' → '.join([*cycle, cycle[0]])} (0.29 drops the closing edge)",
                "the owners a reader sees are not the owners Headscale applies, and 0.28 refuses the policy",
            )


def _default_routes(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """A default route in ``autoApprovers.routes`` approves every subnet route of its family."""
    routes = (policy.auto_approvers.routes if policy.auto_approvers else None) or {}
    for route in routes:
        if parse_prefix(route)[0].prefixlen == 0:
            yield _lint(
                ["autoApprovers", "routes", route],
                "route-default",
                f"{route} approves every subnet route of its family (not exit routes)",
                "any node of these approvers can announce and get approved "
                "routes over another site's networks; approve exit nodes with autoApprovers.exitNode",
            )


def _ssh_rules(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Per SSH rule: on 0.28 what 0.29 refuses, then SSH users that never match a login."""
    for index, rule in enumerate(policy.ssh or ()):
        base: list[str | int] = ["ssh", index]
        if version == "0.28":
            yield from _ssh_upgrade_028(base, rule, version)
        yield from _ssh_users(base, rule, version)


def _ssh_upgrade_028(base: list[str | int], rule: SshRule, version: str) -> Iterator[PolicyLint]:
    """An SSH rule 0.28 takes and 0.29 refuses: no action or users, a host destination, a checkPeriod 0.29 refuses."""
    if not rule.action:
        yield _lint([*base, "action"], "upgrade-0.29", "an SSH rule without action", _UPGRADE)
    if not rule.users:
        yield _lint([*base, "users"], "upgrade-0.29", "an SSH rule without users", _UPGRADE)
    for i, dst in enumerate(rule.dst):
        if parse_alias(dst, version=version).kind is AliasKind.HOST:
            yield _lint([*base, "dst", i], "upgrade-0.29", f"host {dst!r} as an SSH destination", _UPGRADE)
    if rule.check_period is not None and rule.action != "check":
        yield _lint([*base, "checkPeriod"], "upgrade-0.29", "checkPeriod on a non-check rule", _UPGRADE)
    elif rule.check_period is not None and not GO_DURATION_RE.fullmatch(rule.check_period):
        yield _lint(
            [*base, "checkPeriod"],
            "upgrade-0.29",
            f"checkPeriod {rule.check_period!r} is no Go duration",
            _UPGRADE,
        )
    elif rule.check_period is not None and abs(parse_go_duration_ns(rule.check_period)) > MAX_CHECK_PERIOD_NS:
        yield _lint([*base, "checkPeriod"], "upgrade-0.29", "checkPeriod above 168h", _UPGRADE)


def _ssh_users(base: list[str | int], rule: SshRule, version: str) -> Iterator[PolicyLint]:
    """SSH users kept as literal login names that no destination has (and 0.28's wildcards 0.29 refuses)."""
    for i, user in enumerate(rule.users):
        where = [*base, "users", i]
        if user in ("root", "autogroup:nonroot") or _LOGIN_RE.match(user):
            continue
        if version == "0.28" and user in ("", "*"):
            yield _lint(where, "upgrade-0.29", f"SSH user {user!r}", _UPGRADE)
        elif user.startswith("localpart:") and LOCALPART_RE.match(user) and version == "0.28":
            yield _lint(
                where,
                "ssh-user-literal",
                f"{user!r} is a literal login name on 0.28",
                "no such login exists: localpart: mapping works from 0.29 on",
            )
        elif not LOCALPART_RE.match(user):
            yield _lint(
                where,
                "ssh-user-literal",
                f"SSH user {user!r} is kept as a literal login name",
                "it never matches a login on the destination (meant localpart:*@<domain> or autogroup:nonroot?)",
            )


def _grant_rules(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Per grant: an empty side, ports on a protocol without ports, a capability that is not '<domain>/<path>'."""
    for index, grant in enumerate(policy.grants or ()):
        base: list[str | int] = ["grants", index]
        if not grant.src or not grant.dst:
            yield _lint(
                base,
                "empty-rule",
                "a grant with an empty src or dst grants nothing",
                "a rule that silently matches nothing hides a typo or an emptied list",
            )
        for i, entry in enumerate(grant.ip or ()):
            proto, ports = parse_grant_ip(entry, version=version)
            if proto is not None and proto not in PORT_PROTOCOLS and ports != (ALL_PORTS,):
                yield _lint(
                    [*base, "ip", i],
                    "port-on-portless",
                    f"{entry!r}: protocol {proto} has no ports",
                    "the ports are meaningless; the 0.28 ACL conversion refuses it",
                )
        for cap in grant.app or {}:
            if not _CAP_RE.match(cap):
                yield _lint(
                    [*base, "app", cap],
                    "cap-format",
                    f"capability {cap!r} is not '<domain>/<path>'",
                    "Tailscale refuses it, and no client acts on it",
                )


def _node_attr_rules(policy: Policy, version: str) -> Iterator[PolicyLint]:
    """Per nodeAttrs entry: no attr (it does nothing), attribute names outside the usual characters."""
    for index, attr in enumerate(policy.node_attrs or ()):
        if not attr.attr:
            yield _lint(
                ["nodeAttrs", index],
                "empty-rule",
                "a nodeAttrs entry without attr does nothing",
                "a rule that silently does nothing hides a typo or an emptied list",
            )
        for i, name in enumerate(attr.attr or ()):
            if not _ATTR_RE.match(name):
                yield _lint(
                    ["nodeAttrs", index, "attr", i],
                    "name-format",
                    f"node attribute {name!r} is unusual",
                    "clients ignore attributes they do not know",
                )


#: The lint rules in the order their findings are reported (the order the tests and the plan output rely on).
LINT_RULES: tuple[LintRule, ...] = (
    _name_formats,
    _acl_rules,
    _user_formats,
    _tag_cycles,
    _default_routes,
    _ssh_rules,
    _grant_rules,
    _node_attr_rules,
)
