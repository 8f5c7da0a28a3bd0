"""The rules across a validated document, per minor (Headscale's ``Policy.validate``): every group, tag and host
a rule names is defined, autogroups only where that minor places them, SSH's identity rules, ports only on
protocols with ports, grant, nodeAttrs and test shapes, and (0.28) no tag ownership cycle.

:func:`semantic_problems` returns every problem at once, in document order. It depends on :mod:`.schema` (the
validated models), :mod:`.values` and :mod:`.problems`; :mod:`.lints` reuses :func:`ownership_cycle`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headscale_ha.policy.problems import PolicyProblem, did_you_mean, format_path
from headscale_ha.policy.schema import (
    IP_POOL_REFUSAL,
    Acl,
    Grant,
    NodeAttr,
    Policy,
    PolicyTest,
    SshPolicyTest,
    SshRule,
)
from headscale_ha.policy.values import (
    ALL_PORTS,
    AUTOGROUPS,
    MAX_CHECK_PERIOD_NS,
    Alias,
    AliasKind,
    autogroup_problem,
    could_be_user,
    parse_alias,
    parse_destination,
    parse_go_duration_ns,
    parse_prefix,
    protocol_takes_ports,
)

__all__ = ["ownership_cycle", "semantic_problems"]


def semantic_problems(policy: Policy, version: str) -> list[PolicyProblem]:
    """What a minor refuses across the validated document (``version`` is a minor), in document order."""
    return _Semantics(policy, version).run()


_SRC_AUTOGROUPS = {
    "0.28": ("autogroup:member", "autogroup:tagged"),
    "0.29": ("autogroup:member", "autogroup:tagged", "autogroup:danger-all"),
}
_DST_AUTOGROUPS = ("autogroup:internet", "autogroup:member", "autogroup:tagged", "autogroup:self")
_SSH_SRC_AUTOGROUPS = ("autogroup:member", "autogroup:tagged")
_SSH_DST_AUTOGROUPS = ("autogroup:member", "autogroup:tagged", "autogroup:self")
_TARGET_AUTOGROUPS = ("autogroup:member", "autogroup:tagged")


class _Semantics:
    """References, autogroup placement, SSH identity rules, ports per protocol, grants, nodeAttrs, test shapes."""

    def __init__(self, policy: Policy, version: str) -> None:
        self.policy = policy
        self.version = version
        self.groups = set(policy.groups or {})
        self.tags = set(policy.tag_owners or {})
        self.hosts = dict(policy.hosts or {})
        self.problems: list[PolicyProblem] = []

    def add(self, parts: Sequence[str | int], reason: str) -> None:
        self.problems.append(PolicyProblem(format_path(parts), reason))

    def alias(self, text: str) -> Alias:
        return parse_alias(text, version=self.version)

    def refer(self, parts: Sequence[str | int], alias: Alias, *, tag_why: str = "", hosts: bool = True) -> None:
        """Report a group, tag or host the policy uses without defining it."""
        text = alias.text
        if alias.kind is AliasKind.GROUP and text not in self.groups:
            self.add(parts, f"group {text!r} is not defined in groups{did_you_mean(text, self.groups)}")
        elif alias.kind is AliasKind.TAG and text not in self.tags:
            self.add(parts, f"tag {text!r} has no tagOwners entry{tag_why}{did_you_mean(text, self.tags)}")
        elif hosts and alias.kind is AliasKind.HOST and text not in self.hosts:
            user_hint = f"; if it is a user, write '{text}@'" if could_be_user(text) else ""
            self.add(parts, f"host {text!r} is not defined in hosts{did_you_mean(text, self.hosts)}{user_hint}")

    def principal(self, parts: Sequence[str | int], text: str, *, tag_why: str = "") -> None:
        kind = AliasKind.USER if "@" in text else AliasKind.GROUP if text.startswith("group:") else AliasKind.TAG
        self.refer(parts, Alias(kind, text), tag_why=tag_why)

    def autogroup(self, parts: Sequence[str | int], alias: Alias, allowed: Sequence[str], where: str) -> None:
        if alias.kind is not AliasKind.AUTOGROUP or alias.text in allowed:
            return
        if alias.text == "autogroup:internet" and "destination" not in where:
            self.add(parts, "autogroup:internet can only be used in ACL destinations")
        elif alias.text == "autogroup:self" and where == "a source":
            self.add(parts, "autogroup:self cannot be a source; it is a destination")
        elif alias.text == "autogroup:danger-all" and where == "a destination":
            self.add(parts, "autogroup:danger-all cannot be a destination; it is a source only")
        elif alias.text not in AUTOGROUPS[self.version]:
            self.add(parts, autogroup_problem(alias.text, self.version))
        else:
            self.add(parts, f"{alias.text!r} cannot be used in {where} (allowed: {', '.join(allowed)})")

    def run(self) -> list[PolicyProblem]:
        self.tag_owners()
        for index, acl in enumerate(self.policy.acls or ()):
            self.acl(index, acl)
        for index, grant in enumerate(self.policy.grants or ()):
            self.grant(index, grant)
        for index, rule in enumerate(self.policy.ssh or ()):
            self.ssh(index, rule)
        self.auto_approvers()
        for index, attr in enumerate(self.policy.node_attrs or ()):
            self.node_attr(index, attr)
        for index, test in enumerate(self.policy.tests or ()):
            self.test(index, test)
        for index, ssh_test in enumerate(self.policy.ssh_tests or ()):
            self.ssh_test(index, ssh_test)
        return self.problems

    def tag_owners(self) -> None:
        owners = self.policy.tag_owners or {}
        for tag, tag_owners in owners.items():
            for position, owner in enumerate(tag_owners):
                self.principal(["tagOwners", tag, position], owner)
        if self.version >= "0.29":
            return  # 0.29 drops the edge that closes a cycle (a lint)
        reported: set[frozenset[str]] = set()
        for tag in sorted(owners):
            cycle = ownership_cycle(tag, owners)
            if cycle and frozenset(cycle) not in reported:
                reported.add(frozenset(cycle))
                self.add(["tagOwners", tag], f"tag ownership cycle: {' → '.join([*cycle, cycle[0]])}")

    def sources(self, base: list[str | int], sources: Sequence[str]) -> list[Alias]:
        aliases = []
        for position, text in enumerate(sources):
            alias = self.alias(text)
            self.refer([*base, position], alias)
            self.autogroup([*base, position], alias, _SRC_AUTOGROUPS[self.version], "a source")
            aliases.append(alias)
        return aliases

    def destination(self, parts: list[str | int], alias: Alias) -> None:
        self.refer(parts, alias)
        self.autogroup(parts, alias, _DST_AUTOGROUPS, "a destination")

    def acl(self, index: int, acl: Acl) -> None:
        base: list[str | int] = ["acls", index]
        sources = self.sources([*base, "src"], acl.src)
        self_dst = False
        proto = acl.proto or ""
        for position, dst in enumerate(acl.dst):
            alias, ports = parse_destination(dst, version=self.version)
            self.destination([*base, "dst", position], alias)
            self_dst |= alias.text == "autogroup:self"
            if not protocol_takes_ports(proto) and any(r != ALL_PORTS for r in ports):
                self.add([*base, "dst", position], f"protocol {proto!r} has no ports: write '{alias.text}:*'")
        if self_dst and self.version >= "0.29":
            self.self_sources([*base, "src"], sources, wildcard_ok=True)

    def self_sources(self, parts: list[str | int], sources: Sequence[Alias], *, wildcard_ok: bool) -> None:
        """0.29: autogroup:self means 'the same user's devices': only user-like sources."""
        for position, alias in enumerate(sources):
            if alias.kind in (AliasKind.USER, AliasKind.GROUP) or alias.text == "autogroup:member":
                continue
            if alias.kind is AliasKind.WILDCARD and wildcard_ok:
                continue
            self.add(
                [*parts, position],
                f"{alias.text!r} cannot reach autogroup:self: only users, groups or autogroup:member"
                + ("" if wildcard_ok else " (in grants '*' is refused too)"),
            )

    def grant(self, index: int, grant: Grant) -> None:
        base: list[str | int] = ["grants", index]
        if not grant.ip and not grant.app:
            self.add(base, "a grant needs 'ip' or 'app'")
        sources = self.sources([*base, "src"], grant.src)
        for position, dst in enumerate(grant.dst):
            alias = self.alias(dst)
            self.destination([*base, "dst", position], alias)
            if alias.kind is AliasKind.PREFIX and alias.network is not None and alias.network.prefixlen == 0:
                self.add([*base, "dst", position], f"{dst!r} as a grant destination: use '*' or autogroup:internet")
            if grant.app and dst == "autogroup:internet":
                self.add([*base, "dst", position], "app grants cannot target autogroup:internet")
        for position, via in enumerate(grant.via or ()):
            if via not in self.tags:
                self.add([*base, "via", position], f"tag {via!r} has no tagOwners entry{did_you_mean(via, self.tags)}")
        if "autogroup:self" in grant.dst:
            self.self_sources([*base, "src"], sources, wildcard_ok=False)

    def ssh(self, index: int, rule: SshRule) -> None:
        base: list[str | int] = ["ssh", index]
        if self.version >= "0.29":
            if not rule.action:
                self.add([*base, "action"], "an SSH rule needs an action ('accept' or 'check')")
            if not rule.users:
                self.add([*base, "users"], "an SSH rule needs users")
        sources = self.ssh_sources(base, rule.src)
        self.ssh_destinations(base, rule.dst)
        self.ssh_identities(base, sources, rule.dst)
        if rule.check_period is not None and self.version >= "0.29":
            self.check_period(base, rule.action, rule.check_period)

    def ssh_sources(self, base: list[str | int], sources: Sequence[str]) -> list[Alias]:
        aliases = []
        for position, src in enumerate(sources):
            alias = self.alias(src)
            self.refer([*base, "src", position], alias)
            self.autogroup([*base, "src", position], alias, _SSH_SRC_AUTOGROUPS, "an SSH source")
            aliases.append(alias)
        return aliases

    def ssh_destinations(self, base: list[str | int], destinations: Sequence[str]) -> None:
        for position, dst in enumerate(destinations):
            alias = self.alias(dst)
            parts = [*base, "dst", position]
            if alias.kind is AliasKind.HOST:
                if self.version >= "0.29":
                    self.add(parts, f"host {dst!r} cannot be an SSH destination (Headscale 0.29 refuses hosts here)")
                continue  # 0.28 takes a host here and does not look it up
            self.refer(parts, alias)
            self.autogroup(parts, alias, _SSH_DST_AUTOGROUPS, "an SSH destination")

    def check_period(self, base: list[str | int], action: str | None, check_period: str) -> None:
        """0.29: a checkPeriod only on a 'check' rule, and 'always' or a Go duration from 0 to 168h."""
        if action != "check":
            self.add([*base, "checkPeriod"], "checkPeriod only applies to action 'check'")
        elif check_period != "always":
            nanos = parse_go_duration_ns(check_period)
            if nanos < 0:
                self.add([*base, "checkPeriod"], f"checkPeriod {check_period!r} must not be negative")
            elif nanos > MAX_CHECK_PERIOD_NS:
                self.add([*base, "checkPeriod"], f"checkPeriod {check_period!r} is above the maximum of 168h")

    def ssh_identities(self, base: list[str | int], sources: Sequence[Alias], destinations: Sequence[str]) -> None:
        """Tailscale's SSH identity model (refused since 0.28)."""
        tagged = [s.text for s in sources if s.kind is AliasKind.TAG or s.text == "autogroup:tagged"]
        users = {s.text for s in sources if s.kind is AliasKind.USER}
        user_sets = any(s.kind is AliasKind.GROUP or s.text == "autogroup:member" for s in sources)
        for position, dst in enumerate(destinations):
            alias = self.alias(dst)
            parts = [*base, "dst", position]
            if alias.kind is AliasKind.USER:
                if tagged:
                    self.add(parts, f"tagged sources ({', '.join(tagged)}) cannot SSH to user-owned devices ({dst!r})")
                elif user_sets or users != {dst}:
                    self.add(parts, f"user destination {dst!r} needs {dst!r} as the only source; use autogroup:self")
            elif dst in ("autogroup:self", "autogroup:member") and tagged:
                self.add(parts, f"tagged sources ({', '.join(tagged)}) cannot SSH to {dst} (user-owned devices)")

    def auto_approvers(self) -> None:
        approvers = self.policy.auto_approvers
        if approvers is None:
            return
        why = ", so no node can carry it and the approval never applies"
        for route, route_approvers in (approvers.routes or {}).items():
            for position, approver in enumerate(route_approvers):
                self.principal(["autoApprovers", "routes", route, position], approver, tag_why=why)
        for position, approver in enumerate(approvers.exit_node or ()):
            self.principal(["autoApprovers", "exitNode", position], approver, tag_why=why)

    def node_attr(self, index: int, attr: NodeAttr) -> None:
        base: list[str | int] = ["nodeAttrs", index]
        for position, target in enumerate(attr.target):
            alias = self.alias(target)
            self.refer([*base, "target", position], alias)
            self.autogroup([*base, "target", position], alias, _TARGET_AUTOGROUPS, "a nodeAttrs target")
        if attr.ip_pool:
            self.add([*base, "ipPool"], IP_POOL_REFUSAL)

    def test(self, index: int, test: PolicyTest) -> None:
        base: list[str | int] = ["tests", index]
        try:
            src = self.alias(test.src)
        except ValueError as exc:
            self.add([*base, "src"], f"{exc} (the test fails when the policy is written)")
        else:
            self.refer([*base, "src"], src)
        if not test.accept and not test.deny:
            self.add(base, "a test needs 'accept' or 'deny'")
        for key, destinations in (("accept", test.accept), ("deny", test.deny)):
            for position, dst in enumerate(destinations or ()):
                alias, _ = parse_destination(dst, version=self.version)
                self.refer([*base, key, position], alias)
                host = self.hosts.get(alias.text)
                if alias.kind is AliasKind.HOST and host and parse_prefix(host)[0].num_addresses != 1:
                    self.add([*base, key, position], f"host {alias.text!r} is a range; a test names one host")

    def ssh_test(self, index: int, test: SshPolicyTest) -> None:
        base: list[str | int] = ["sshTests", index]
        self.refer([*base, "src"], self.alias(test.src))
        if not test.dst:
            self.add([*base, "dst"], "an sshTests entry needs at least one destination")
        if not (test.accept or test.deny or test.check):
            self.add(base, "an sshTests entry needs 'accept', 'deny' or 'check'")
        for position, dst in enumerate(test.dst):
            alias = self.alias(dst)
            self.refer([*base, "dst", position], alias)
            host = self.hosts.get(dst)
            if alias.kind is AliasKind.HOST and host and parse_prefix(host)[0].num_addresses != 1:
                self.add([*base, "dst", position], f"host {dst!r} is a range; an sshTests destination is one host")


def ownership_cycle(start: str, owners: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The tags of a cycle through ``start`` in the tag→owning-tag graph, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        tag, trail = stack.pop()
        for owner in owners.get(tag, ()):
            if owner == start:
                return trail
            if owner.startswith("tag:") and "@" not in owner and owner not in seen:
                seen.add(owner)
                stack.append((owner, [*trail, owner]))
    return None
