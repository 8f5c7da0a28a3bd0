"""Offline evaluation of a policy's ``tests`` and ``sshTests`` with Headscale 0.29's semantics.

0.29 evaluates them when a policy is written and refuses the write when one fails. :func:`evaluate_policy_tests`
decides each assertion from the policy's own definitions, in three values: ``pass``, ``fail`` (refused by
:mod:`.check` like Headscale refuses it) or ``checked at apply`` when the answer depends on live nodes.
It depends on :mod:`.schema` (the validated models), :mod:`.values`, :mod:`.versions` and :mod:`.problems`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from headscale_ha.policy.problems import format_path
from headscale_ha.policy.schema import Policy, PolicyTest, SshPolicyTest
from headscale_ha.policy.values import (
    DEFAULT_PROTOCOLS,
    LOCALPART_RE,
    TAILNET_RANGES,
    Alias,
    AliasKind,
    IpNetwork,
    overlapping_tailnet_range,
    parse_alias,
    parse_destination,
    parse_grant_ip,
    parse_prefix,
    protocol_numbers,
)
from headscale_ha.policy.versions import headscale_minor

__all__ = ["PolicyTestOutcome", "evaluate_policy_tests"]


def evaluate_policy_tests(policy: Policy, *, version: str) -> list[PolicyTestOutcome]:
    """The offline outcome of the policy's ``tests`` and ``sshTests`` (0.29; nothing on 0.28, which has none)."""
    return list(_Evaluator(policy).run()) if headscale_minor(version) >= "0.29" else []


@dataclass(frozen=True, slots=True)
class PolicyTestOutcome:
    """One assertion of ``tests`` or ``sshTests``: ``pass``, ``fail`` or ``checked at apply``, and why.

    ``pass`` and ``fail`` are decided from the policy alone, assuming each user, group member and tag it names has
    a node (Headscale fails a test whose source or destination has none, so ``fail`` is certain either way);
    ``checked at apply`` depends on live nodes (addresses, multi-tag nodes, users matched by e-mail).
    """

    path: str
    verdict: Literal["pass", "fail", "checked at apply"]
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.verdict} ({self.reason})"


class _T(IntEnum):
    """Three-valued truth: known false, unknown without live state, known true."""

    NO = 0
    MAYBE = 1
    YES = 2


@dataclass(frozen=True, slots=True)
class _Atom:
    """A piece of a test's source or destination: a user's or tag's nodes, an address range, an autogroup."""

    kind: Literal["user", "tag", "ip", "member", "tagged", "self"]
    name: str = ""
    network: IpNetwork | None = None

    @property
    def identity(self) -> bool:
        return self.kind != "ip"


def _same_user(a: str, b: str) -> _T:
    """Two user tokens: equal → the same user; two bare names that differ → different users; else unknown
    (``alice@`` and ``alice@example.com`` may be one user, matched by name and e-mail)."""
    if a == b:
        return _T.YES
    bare = a.endswith("@") and b.endswith("@") and a.count("@") == 1 and b.count("@") == 1
    return _T.NO if bare else _T.MAYBE


_CHROMEOS = ipaddress.ip_network("100.115.92.0/23")


def _in_wildcard(network: IpNetwork) -> _T:
    """'*' on 0.29: the tailnet ranges (without ChromeOS's), plus approved subnet routes (live)."""
    in_tailnet = overlapping_tailnet_range(network) is not None
    if in_tailnet and not (network.version == 4 and network.subnet_of(_CHROMEOS)):  # type: ignore[arg-type]
        return _T.YES
    return _T.MAYBE


def _network_covers(network: IpNetwork | None, atom: _Atom) -> _T:
    """A rule's address or host against an atom: by overlap for an address, maybe for a user's or tag's nodes
    when the network overlaps the tailnet (their addresses are live); an undefined host covers nothing."""
    if network is None:
        return _T.NO
    if atom.identity:
        return _T.MAYBE if overlapping_tailnet_range(network) is not None else _T.NO
    assert atom.network is not None
    return _T.YES if atom.network.version == network.version and atom.network.overlaps(network) else _T.NO  # type: ignore[arg-type]


#: (sources, destination alias, port ranges, protocols (None: every one), "rule without proto", certainty).
_IpRule = tuple[list[str], str, tuple[tuple[int, int], ...], frozenset[int] | None, bool, _T]


class _Evaluator:
    """Headscale 0.29's test evaluation over the policy's own definitions (three-valued)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.groups = {g: list(m) for g, m in (policy.groups or {}).items()}
        self.hosts = {h: parse_prefix(v)[0] for h, v in (policy.hosts or {}).items()}
        self.allow_all = policy.acls is None and policy.grants is None
        self.rules = list(self._ip_rules())

    # -- alias → atoms -----------------------------------------------------------------------------------------

    def atoms(self, text: str) -> list[_Atom] | None:
        """The atoms an alias resolves to ([] resolves to nothing), or None when that needs live state."""
        alias = parse_alias(text, version="0.29")
        if alias.kind is AliasKind.USER:
            return [_Atom("user", alias.text)]
        if alias.kind is AliasKind.GROUP:
            return [_Atom("user", m) for m in self.groups.get(alias.text, [])]
        if alias.kind is AliasKind.TAG:
            return [_Atom("tag", alias.text)]
        if alias.kind is AliasKind.HOST:
            return [_Atom("ip", network=self.hosts[alias.text])] if alias.text in self.hosts else []
        if alias.kind is AliasKind.PREFIX:
            return [_Atom("ip", network=alias.network)]
        if alias.kind is AliasKind.WILDCARD:
            return [_Atom("ip", network=network) for network in TAILNET_RANGES]
        if alias.text == "autogroup:member":
            return [_Atom("member")]
        if alias.text == "autogroup:tagged":
            return [_Atom("tagged")]
        if alias.text == "autogroup:danger-all":
            return [_Atom("ip", network=ipaddress.ip_network(every)) for every in ("0.0.0.0/0", "::/0")]
        if alias.text in ("autogroup:self", "autogroup:nonroot"):
            return []  # Headscale cannot resolve these here: the test fails
        return None

    def covers(self, rule_alias: str, atom: _Atom) -> _T:
        """Does a rule's alias match the atom? Addresses match by overlap (as Headscale's test evaluation);
        a user's or tag's nodes only by identity (their addresses are live)."""
        alias = parse_alias(rule_alias, version="0.29")
        if alias.text == "autogroup:danger-all":
            return _T.YES
        if alias.kind is AliasKind.WILDCARD:
            return _T.YES if atom.identity else _in_wildcard(atom.network)  # type: ignore[arg-type]
        if alias.kind in (AliasKind.PREFIX, AliasKind.HOST):
            network = alias.network if alias.kind is AliasKind.PREFIX else self.hosts.get(alias.text)
            return _network_covers(network, atom)
        if not atom.identity:
            return _T.MAYBE if overlapping_tailnet_range(atom.network) is not None else _T.NO  # type: ignore[arg-type]
        return self.identity_covers(alias, atom)

    def identity_covers(self, alias: Alias, atom: _Atom) -> _T:
        """An autogroup, user, group or tag alias against a user's or tag's nodes (never an address)."""
        if alias.text == "autogroup:member":
            return _T.YES if atom.kind in ("user", "member", "self") else _T.NO
        if alias.text == "autogroup:tagged":
            return _T.YES if atom.kind in ("tag", "tagged") else _T.NO
        if alias.kind is AliasKind.AUTOGROUP:
            return _T.MAYBE if atom.kind in ("user", "member", "self") else _T.NO
        if alias.kind is AliasKind.USER:
            if atom.kind == "user":
                return _same_user(alias.text, atom.name)
            return _T.MAYBE if atom.kind in ("member", "self") else _T.NO
        if alias.kind is AliasKind.GROUP:
            if atom.kind == "user":
                return max((_same_user(m, atom.name) for m in self.groups.get(alias.text, [])), default=_T.NO)
            return _T.MAYBE if atom.kind in ("member", "self") and self.groups.get(alias.text) else _T.NO
        if alias.kind is AliasKind.TAG:
            if atom.kind == "tag":
                return _T.YES if atom.name == alias.text else _T.MAYBE  # a node may carry both tags
            return _T.MAYBE if atom.kind == "tagged" else _T.NO
        return _T.MAYBE

    # -- IP rules ----------------------------------------------------------------------------------------------

    def _ip_rules(self) -> Iterator[_IpRule]:
        """(sources, destination alias, ports, protocols (None: all; DEFAULT: rule without proto), default?, sure)."""
        for acl in self.policy.acls or ():
            protos = protocol_numbers(acl.proto or "", version="0.29")
            for dst in acl.dst:
                alias, ports = parse_destination(dst, version="0.29")
                yield list(acl.src), alias.text, ports, protos, protos is None, _T.YES
        for grant in self.policy.grants or ():
            sure = _T.MAYBE if grant.via else _T.YES  # via grants filter per node
            for entry in grant.ip or ():
                proto, ports = parse_grant_ip(entry, version="0.29")
                for dst in grant.dst:
                    yield list(grant.src), dst, ports, None if proto is None else frozenset({proto}), False, sure

    def allowed(self, src: _Atom, dst_atoms: Sequence[_Atom], port: int, wanted: frozenset[int]) -> _T:
        if self.allow_all:
            return _T.YES
        best = _T.NO
        for sources, dst_alias, ports, protos, default, sure in self.rules:
            if not any(first <= port <= last for first, last in ports):
                continue
            if protos is None:
                proto_ok = (_T.YES if wanted & DEFAULT_PROTOCOLS else _T.MAYBE) if default else _T.YES
            else:
                proto_ok = _T.YES if protos & wanted else _T.NO
            if proto_ok is _T.NO:
                continue
            source_ok = max((self.covers(s, src) for s in sources), default=_T.NO)
            if dst_alias == "autogroup:self":
                dst_ok = _T.MAYBE if any(d.kind in ("user", "member") for d in dst_atoms) else _T.NO
            else:
                dst_ok = max((self.covers(dst_alias, d) for d in dst_atoms), default=_T.NO)
            best = max(best, min(source_ok, dst_ok, proto_ok, sure))
            if best is _T.YES:
                break
        return best

    # -- verdicts ----------------------------------------------------------------------------------------------

    def run(self) -> Iterator[PolicyTestOutcome]:
        for index, test in enumerate(self.policy.tests or ()):
            yield from self.test(index, test)
        for index, ssh_test in enumerate(self.policy.ssh_tests or ()):
            yield from self.ssh_test(index, ssh_test)

    def test(self, index: int, test: PolicyTest) -> Iterator[PolicyTestOutcome]:
        sources = self.atoms(test.src)
        wanted = {None: DEFAULT_PROTOCOLS, "tcp": frozenset({6}), "udp": frozenset({17}), "sctp": frozenset({132})}[
            test.proto or None
        ]
        for key, expect in (("accept", True), ("deny", False)):
            for position, dst in enumerate(getattr(test, key) or ()):
                path = format_path(["tests", index, key, position])
                alias, ports = parse_destination(dst, version="0.29")
                targets = self.atoms(alias.text) if alias.text != "autogroup:self" else []
                if sources is None or targets is None:
                    yield PolicyTestOutcome(path, "checked at apply", f"{test.src} → {dst} depends on live nodes")
                    continue
                if not sources or not targets:
                    empty = test.src if not sources else dst
                    yield PolicyTestOutcome(path, "fail", f"{empty} resolves to no address")
                    continue
                results = [self.allowed(s, targets, ports[0][0], wanted) for s in sources]
                yield self.verdict(path, f"{test.src} → {dst}", expect, sources, results)

    @staticmethod
    def verdict(
        path: str, flow: str, expect: bool, sources: Sequence[_Atom], results: Sequence[_T]
    ) -> PolicyTestOutcome:
        """Headscale allows a flow when every source address reaches the destination. An address source always
        has addresses; a user's or tag's may have none, so one denied identity among allowed ones stays open."""
        allowed = all(r is _T.YES for r in results)
        denied = all(r is _T.NO for r in results) or any(
            r is _T.NO and not s.identity for s, r in zip(sources, results, strict=True)
        )
        if allowed:
            verdict: Literal["pass", "fail"] = "pass" if expect else "fail"
            return PolicyTestOutcome(path, verdict, f"{flow} is allowed" + ("" if expect else ", expected DENIED"))
        if denied:
            verdict = "fail" if expect else "pass"
            return PolicyTestOutcome(path, verdict, f"{flow} is denied" + (", expected ALLOWED" if expect else ""))
        return PolicyTestOutcome(path, "checked at apply", f"{flow} depends on live nodes")

    def ssh_test(self, index: int, test: SshPolicyTest) -> Iterator[PolicyTestOutcome]:
        sources = self.atoms(test.src)
        for key in ("accept", "deny", "check"):
            for position, user in enumerate(getattr(test, key) or ()):
                path = format_path(["sshTests", index, key, position])
                flow = f"{test.src} as {user!r} → {', '.join(test.dst)}"
                via = " via check" if key == "check" else ""
                if user == "":
                    yield PolicyTestOutcome(path, "fail" if key != "deny" else "pass", "an empty login never matches")
                    continue
                resolved = [self.ssh_atoms(d, sources) for d in test.dst]
                targets = [atoms for atoms in resolved if atoms is not None]
                if sources is None or len(targets) < len(resolved):
                    yield PolicyTestOutcome(path, "checked at apply", f"{flow} depends on live nodes")
                    continue
                if not sources or any(not t for t in targets):
                    yield PolicyTestOutcome(path, "fail", f"{flow}: a source or destination resolves to no node")
                    continue
                per_dst = [[self.ssh_allowed(s, t, user, key == "check") for s in sources] for t in targets]
                if key == "deny":
                    if any(all(r is _T.YES for r in results) for results in per_dst):
                        yield PolicyTestOutcome(path, "fail", f"{flow} is expected DENIED, the policy allows it")
                    elif all(r is _T.NO for results in per_dst for r in results):
                        yield PolicyTestOutcome(path, "pass", f"{flow} is denied")
                    else:
                        yield PolicyTestOutcome(path, "checked at apply", f"{flow} depends on live nodes")
                elif all(r is _T.YES for results in per_dst for r in results):
                    yield PolicyTestOutcome(path, "pass", f"{flow} is allowed{via}")
                elif any(all(r is _T.NO for r in results) for results in per_dst):
                    yield PolicyTestOutcome(path, "fail", f"{flow} is denied{via}, expected ALLOWED{via}")
                else:
                    yield PolicyTestOutcome(path, "checked at apply", f"{flow} depends on live nodes")

    def ssh_atoms(self, text: str, sources: list[_Atom] | None) -> list[_Atom] | None:
        if text == "autogroup:self":
            return [_Atom("self")]
        atoms = self.atoms(text)
        if atoms is None or any(not a.identity for a in atoms):
            return None  # an address matches a node only by its live IPs
        return atoms

    def ssh_allowed(self, src: _Atom, dst: Sequence[_Atom], user: str, check: bool) -> _T:
        """Every node of ``dst`` reachable from ``src`` as login ``user`` (through a check rule if ``check``)."""
        results = []
        for target in dst:
            best = _T.NO
            for rule in self.policy.ssh or ():
                if check and rule.action != "check":
                    continue
                source_ok = max((self.covers(s, src) for s in rule.src), default=_T.NO)
                dst_ok = max((self.ssh_dst_covers(d, target, src) for d in rule.dst), default=_T.NO)
                best = max(best, min(source_ok, dst_ok, self.login_ok(rule.users, user)))
            results.append(best)
        return min(results, default=_T.NO)

    def ssh_dst_covers(self, rule_dst: str, target: _Atom, src: _Atom) -> _T:
        if rule_dst == "autogroup:self":
            if target.kind == "self":
                return _T.YES if src.kind == "user" else _T.MAYBE
            return _T.MAYBE if target.kind in ("user", "member") and src.kind in ("user", "member") else _T.NO
        if target.kind == "self":
            target = _Atom("user", src.name) if src.kind == "user" else _Atom("member")
        return self.covers(rule_dst, target)

    @staticmethod
    def login_ok(users: Sequence[str], user: str) -> _T:
        if user in users:
            return _T.YES
        if user != "root" and "autogroup:nonroot" in users:
            return _T.YES
        if user != "root" and any(LOCALPART_RE.match(u) for u in users):
            return _T.MAYBE
        return _T.NO
