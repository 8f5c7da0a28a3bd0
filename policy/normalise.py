"""Reading a policy document the way Headscale does, before the schema sees it: keys matched like Go's JSON
decoder (case-insensitive, ``_``/``-`` ignored), JSON null as "absent" where Go reads it so, ``#`` keys dropped
from ACL rules, protocols lower-cased (0.29 also names known numbers), CIDRs masked and addresses written
canonically, 0.29's trimming of aliases, SSH actions and users, and its ``[v6]:port`` destinations.

:func:`read_document` returns the normalised document with the lints of what the reading changed and the
problems it refused; :func:`normalise_keys` is the key reading alone, for the render. The value readings come
from :mod:`.values`; it depends on :mod:`.values`, :mod:`.versions` and :mod:`.problems`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from headscale_ha.policy.problems import PolicyLint, PolicyProblem, format_path
from headscale_ha.policy.values import (
    canonical_prefix,
    go_trim,
    normalised_protocol,
    parse_prefix,
    split_destination,
)
from headscale_ha.policy.versions import headscale_minor

__all__ = ["Reading", "normalise_keys", "read_document"]

#: Object fields per section (Go struct fields); the maps (groups, hosts, tagOwners, routes, app) are keyed by data.
_TOP_028 = ("groups", "hosts", "tagOwners", "acls", "autoApprovers", "ssh")
_TOP_029 = (*_TOP_028, "grants", "nodeAttrs", "tests", "sshTests", "randomizeClientPort")
_OBJECT_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.28": {
        "acls": ("action", "proto", "src", "dst"),
        "ssh": ("action", "src", "dst", "users", "checkPeriod"),
        "autoApprovers": ("routes", "exitNode"),
    },
    "0.29": {
        "acls": ("action", "proto", "src", "dst"),
        "ssh": ("action", "src", "dst", "users", "checkPeriod", "acceptEnv"),
        "autoApprovers": ("routes", "exitNode"),
        "grants": ("src", "dst", "ip", "app", "via"),
        "nodeAttrs": ("target", "attr", "ipPool"),
        "tests": ("src", "proto", "accept", "deny"),
        "sshTests": ("src", "dst", "accept", "deny", "check"),
    },
}
#: New in 0.29 at the top level, with a pointer for 0.28 users.
_NEW_IN_029 = {
    "grants": "; render_policy() and grants_to_acls() turn IP grants into ACLs for 0.28",
    "nodeAttrs": "",
    "tests": "",
    "sshTests": "",
    "randomizeClientPort": "; on 0.28 it is the server setting randomize_client_port",
}
#: Scalars whose JSON null Headscale does not read as "absent" (refused, see DELIBERATE_DIFFERENCES).
_NULL_REFUSED = {
    ("acls", "action"),
    ("acls", "proto"),
    ("ssh", "action"),
    ("tests", "src"),
    ("tests", "proto"),
    ("sshTests", "src"),
}


@dataclass
class Reading:
    """The normalised document and what reading it changed (for lints) or refused (for errors)."""

    minor: str
    document: dict[str, Any] = field(default_factory=dict)
    notes: list[PolicyLint] = field(default_factory=list)
    problems: list[PolicyProblem] = field(default_factory=list)

    def note(self, parts: Sequence[str | int], code: str, finding: str, hazard: str) -> None:
        self.notes.append(PolicyLint(format_path(parts), code, finding, hazard))

    def problem(self, parts: Sequence[str | int], reason: str) -> None:
        self.problems.append(PolicyProblem(format_path(parts), reason))


_KEY_HAZARD = "other tools (Headplane's editor, Tailscale tooling, diffs) read policy keys case-sensitively"


def _fold(name: str) -> str:
    """Go ``encoding/json/v2`` name folding: ignore ``_`` and ``-``, ASCII upper case, Unicode simple folding."""
    out: list[str] = []
    for c in name:
        if c < "\x80":
            if c not in "_-":
                out.append(c.upper())
            continue
        orbit = {c, c.lower(), c.upper(), c.upper().lower(), c.lower().upper()}
        out.append(min(x for x in orbit if len(x) == 1))
    return "".join(out)


def _canonical_keys(
    obj: dict[str, Any], names: Sequence[str], parts: list[str | int], reading: Reading, *, section: str
) -> dict[str, Any]:
    """Match keys like Go's v2 decoder (folded), refuse fold-duplicates, read null as absent where Go does."""
    by_fold = {_fold(name): name for name in names}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if section == "acls" and key.startswith("#"):
            reading.note(
                [*parts, key],
                "comment-key",
                f"key {key!r} is dropped by Headscale",
                "the note is lost from the applied policy; keep notes as // comments",
            )
            continue
        name = by_fold.get(_fold(key))
        if name is None:
            newer = {_fold(n): n for n in _OBJECT_FIELDS["0.29"].get(section, ())}.get(_fold(key))
            if newer is not None and reading.minor == "0.28":
                reading.problem([*parts, key], f"{newer!r} needs Headscale 0.29 (target is 0.28)")
                continue
            out[key] = value  # unknown: refused by the model, with a hint
            continue
        if name in out:
            reading.problem(
                [*parts, key],
                f"{key!r} and {name!r} name the same field (Headscale matches keys "
                "case-insensitively, ignoring '_' and '-')",
            )
            continue
        if key != name:
            reading.note([*parts, key], "key-spelling", f"{key!r} is read as {name!r}", _KEY_HAZARD)
        if value is None:
            refused = (section, name) in _NULL_REFUSED or (name == "checkPeriod" and reading.minor == "0.28")
            if refused:
                reading.problem([*parts, name], f"null is not a value for {name!r}")
                out[name] = None
            continue  # otherwise null is Go's zero value: absent
        out[name] = value
    return out


def _trim(value: Any, parts: list[str | int], reading: Reading, what: str) -> Any:
    if isinstance(value, str):
        trimmed = go_trim(value)
        if trimmed != value:
            reading.note(
                parts,
                "whitespace",
                f"{what} {value!r} is read as {trimmed!r}",
                "Headscale 0.28 and other tools take the padded text literally: it names nothing",
            )
            return trimmed
    return value


def _canonical_alias(value: Any, parts: list[str | int], reading: Reading) -> Any:
    if isinstance(value, str) and (canonical := canonical_prefix(value)) is not None and canonical != value:
        _note_address(value, canonical, parts, reading)
        return canonical
    return value


def _note_address(value: str, canonical: str, parts: list[str | int], reading: Reading) -> None:
    network, bare = parse_prefix(value)
    if not bare and ipaddress.ip_address(value.rpartition("/")[0]) != network.network_address:
        reading.note(
            parts,
            "host-bits",
            f"{value!r} has host bits set; Headscale reads it as {canonical!r}",
            "the text suggests a host or network other than the one the rule covers",
        )
    else:
        reading.note(
            parts,
            "address-spelling",
            f"{value!r} is read as {canonical!r}",
            "non-canonical spellings make reviews and diffs miss equal addresses",
        )


def _canonical_destination(value: Any, parts: list[str | int], reading: Reading, version: str) -> Any:
    if not isinstance(value, str) or ":" not in value:
        return value
    try:
        alias_text, ports = split_destination(value, version)
    except ValueError:
        return value
    canonical = canonical_prefix(alias_text)
    if canonical is None:
        return value
    result = f"{canonical}:{ports}"
    if canonical != alias_text:
        _note_address(alias_text, canonical, parts, reading)
    elif result != value:
        reading.note(
            parts,
            "address-spelling",
            f"{value!r} is read as {result!r}",
            "0.28 and other tools do not read bracketed destinations",
        )
    return result


def _list(value: Any, parts: list[str | int], fn: Callable[[Any, list[str | int]], Any]) -> Any:
    if not isinstance(value, list):
        return value
    return [fn(item, [*parts, index]) for index, item in enumerate(value)]


def read_document(data: dict[str, Any], minor: str) -> Reading:
    """Normalise a policy document as Headscale reads it; problems are what that reading itself refuses."""
    return _Reader(minor).read(data)


#: How one entry of a section is read, after its keys: ``fix(entry, path)`` returns the entry normalised.
_EntryReader = Callable[[dict[str, Any], list[str | int]], dict[str, Any]]


class _Reader:
    """One reading of a document for a minor: the top-level keys, then each section in Headscale's order."""

    def __init__(self, minor: str) -> None:
        self.minor = minor
        self.reading = Reading(minor)
        self.fields = _OBJECT_FIELDS[minor]
        self.trims = minor >= "0.29"  # 0.29 trims white space around aliases, SSH actions and SSH users

    def read(self, data: dict[str, Any]) -> Reading:
        reading = self.reading
        top = _canonical_keys(data, _TOP_029, [], reading, section="")
        if self.minor == "0.28":
            for key, pointer in _NEW_IN_029.items():
                if key in top:
                    del top[key]
                    reading.problem([key], f"{key!r} needs Headscale 0.29 (target is 0.28){pointer}")
        if isinstance(top.get("hosts"), dict):
            hosts = top["hosts"]
            top["hosts"] = {name: _canonical_alias(value, ["hosts", name], reading) for name, value in hosts.items()}
        if isinstance(top.get("tagOwners"), dict):
            top["tagOwners"] = {key: ([] if value is None else value) for key, value in top["tagOwners"].items()}
        sections: list[tuple[str, _EntryReader]] = [("acls", self.acl), ("ssh", self.ssh)]
        if self.minor >= "0.29":
            sections += [
                ("grants", self.grant),
                ("nodeAttrs", self.node_attr),
                ("tests", self.test),
                ("sshTests", self.ssh_test),
            ]
        for section, fix in sections:
            self.objects(top, section, fix)
        if isinstance(top.get("autoApprovers"), dict):
            top["autoApprovers"] = self.auto_approvers(top["autoApprovers"])
        reading.document = top
        return reading

    def objects(self, top: dict[str, Any], section: str, fix: _EntryReader) -> None:
        """Read each object of a section's list: its keys, then ``fix``; other entries are left to the schema."""
        value = top.get(section)
        if not isinstance(value, list):
            return
        out = []
        for index, item in enumerate(value):
            parts: list[str | int] = [section, index]
            if isinstance(item, dict):
                item = fix(_canonical_keys(item, self.fields[section], parts, self.reading, section=section), parts)
            out.append(item)
        top[section] = out

    def alias_list(self, value: Any, parts: list[str | int]) -> Any:
        def one(item: Any, where: list[str | int]) -> Any:
            if self.trims:
                item = _trim(item, where, self.reading, "alias")
            return _canonical_alias(item, where, self.reading)

        return _list(value, parts, one)

    def acl(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        reading, minor = self.reading, self.minor
        if isinstance(rule.get("proto"), str):
            normal = normalised_protocol(rule["proto"], minor)
            if normal != rule["proto"]:
                reading.note(
                    [*parts, "proto"],
                    "proto-spelling",
                    f"protocol {rule['proto']!r} is read as {normal!r}",
                    "Headscale 0.28 and other tools read protocols case-sensitively",
                )
            rule["proto"] = normal
        if "src" in rule:
            rule["src"] = self.alias_list(rule["src"], [*parts, "src"])
        if "dst" in rule:
            rule["dst"] = _list(rule["dst"], [*parts, "dst"], lambda v, w: _canonical_destination(v, w, reading, minor))
        return rule

    def ssh(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        reading = self.reading
        if self.trims:
            if "action" in rule:
                rule["action"] = _trim(rule["action"], [*parts, "action"], reading, "action")
            for key in ("src", "dst"):
                if key in rule:
                    rule[key] = self.alias_list(rule[key], [*parts, key])
            if "users" in rule:
                rule["users"] = _list(rule["users"], [*parts, "users"], lambda v, w: _trim(v, w, reading, "user"))
        return rule

    def grant(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        for key in ("src", "dst"):
            if key in rule:
                rule[key] = self.alias_list(rule[key], [*parts, key])
        return rule

    def node_attr(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if "target" in rule:
            rule["target"] = self.alias_list(rule["target"], [*parts, "target"])
        return rule

    def test(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if isinstance(rule.get("proto"), str):
            rule["proto"] = normalised_protocol(rule["proto"], self.minor)
        return rule

    def ssh_test(self, rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        reading = self.reading
        if "src" in rule:
            rule["src"] = _trim(rule["src"], [*parts, "src"], reading, "source")
        if "dst" in rule:
            rule["dst"] = self.alias_list(rule["dst"], [*parts, "dst"])
        for key in ("accept", "deny", "check"):
            if key in rule:
                rule[key] = _list(rule[key], [*parts, key], lambda v, w: _trim(v, w, reading, "user"))
        return rule

    def auto_approvers(self, approvers: dict[str, Any]) -> dict[str, Any]:
        names = self.fields["autoApprovers"]
        approvers = _canonical_keys(approvers, names, ["autoApprovers"], self.reading, section="")
        if isinstance(approvers.get("routes"), dict):
            approvers["routes"] = self.routes(approvers["routes"])
        return approvers

    def routes(self, routes: dict[str, Any]) -> dict[str, Any]:
        """Route keys masked and written canonically; two keys for one network merge their approvers."""
        merged: dict[str, Any] = {}
        for key, value in routes.items():
            value = [] if value is None else value
            canonical = canonical_prefix(key) if "/" in key else None
            if canonical is None:
                merged[key] = value
                continue
            if canonical != key:
                _note_address(key, canonical, ["autoApprovers", "routes", key], self.reading)
            if canonical in merged and isinstance(merged[canonical], list) and isinstance(value, list):
                merged[canonical] = [*merged[canonical], *(v for v in value if v not in merged[canonical])]
            else:
                merged[canonical] = value
        return merged


def normalise_keys(data: Any, *, version: str) -> tuple[Any, list[PolicyLint]]:
    """Only the key reading (case, ``_``/``-``, ``#`` keys in ACL rules, nulls), for callers that add entries to
    a document before it is validated (the render). Values are left alone; anything else passes through."""
    minor = headscale_minor(version)
    if not isinstance(data, dict):
        return data, []
    reading = Reading("0.29")
    top = _canonical_keys(data, _TOP_029, [], reading, section="")
    for section, names in _OBJECT_FIELDS["0.29"].items():
        if section == "autoApprovers":
            if isinstance(top.get(section), dict):
                top[section] = _canonical_keys(top[section], names, [section], reading, section="")
            continue
        if isinstance(top.get(section), list):
            top[section] = [
                _canonical_keys(item, names, [section, i], reading, section=section) if isinstance(item, dict) else item
                for i, item in enumerate(top[section])
            ]
    del minor  # keys are read alike by both minors; 0.29-only sections are refused later on 0.28
    return top, reading.notes
