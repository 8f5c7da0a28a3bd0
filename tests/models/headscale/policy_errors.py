"""Headscale's wording of a refused policy, release by release, from the project's policy model's problems.

Why: the fake decides accept/refuse with the project's policy model (``policy/``), which names each problem by its
JSON path and the project's own reason; Headscale words the same refusals its own way, differently in 0.28 and
0.29, and a client sees only that text. This module maps the model's problems to Headscale's message after
``parsing policy: ``, following ``unmarshalPolicy`` in ``hscontrol/policy/v2/types.go`` of each release:

- the text is parsed by hujson first (:mod:`.hujson`): its error is the only one;
- then decoded by ``encoding/json/v2`` into the policy types, which stops at the first error in document order
  (unknown fields, an ACL or SSH action, a destination's ports);
- then ``Policy.validate`` collects every reference to an undefined group, tag or host, in its own order (ACLs,
  SSH, grants, node attributes, tag owners, auto-approvers), joined by ``multierr`` ("multiple errors:\\n\\t…").

A problem the model reports that is not one of these keeps the model's wording (``<path>: <reason>``): the fake
still refuses what Headscale refuses, only its message is not Headscale's for those.

Where the real server is not deterministic the fake picks one of its answers: Go's JSON errors say "cannot" or
"unable to" at random once per process (json/v2's "Hyrum-proofing"; the fake says "cannot"), and both releases
re-encode each ACL rule through a Go map, so of two decode errors in one rule either may be reported (the fake
reports the first written), as ``validate`` reports the tag owners and auto-approvers in map order.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from headscale_ha.policy.problems import PolicyProblem
from headscale_ha.policy.values import parse_ports, split_destination

_DECODE = "parsing policy from bytes: json: cannot unmarshal"
_UNDEFINED_028 = "{kind} {name} is not defined in the Policy, please define or remove the reference to it"
#: The model's reason for a bad port list (how it starts) → ``parsePortRange``'s error in 0.28 and in 0.29.
_PORT_ERRORS = (
    (re.compile(r"invalid port range "), "invalid port range format", "invalid port range format"),
    (re.compile(r"port range .* is inverted"), *["invalid port range: first port is greater than last port"] * 2),
    (re.compile(r"invalid port "), "invalid port number", "invalid first integer"),
    (re.compile(r"port \S+ is out of range"), "port number out of range", "port number out of range"),
    (re.compile(r"a single port must be above 0"), *["first port must be >0, or use '*' for wildcard"] * 2),
)
_QUOTED = r"(?P<lit>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
_UNDEFINED = {
    "group": re.compile(rf"group {_QUOTED} is not defined in groups"),
    "tag": re.compile(rf"tag {_QUOTED} has no tagOwners entry"),
    "host": re.compile(rf"host {_QUOTED} is not defined in hosts"),
}
_SSH_HOST = re.compile(rf"host {_QUOTED} cannot be an SSH destination")
_INTERNET = "autogroup:internet"
#: Where ``validate`` refuses autogroup:internet (a source, or an SSH destination), per release: its words there.
_INTERNET_REFUSED = {
    "0.28": {
        ("acls", "src"): '"autogroup:internet" used in source, it can only be used in ACL destinations',
        ("ssh", "src"): '"autogroup:internet" used in SSH source, it can only be used in ACL destinations',
        ("ssh", "dst"): '"autogroup:internet" used in SSH destination, it can only be used in ACL destinations',
    },
    "0.29": dict.fromkeys(
        [("acls", "src"), ("ssh", "src"), ("ssh", "dst"), ("grants", "src")],
        "autogroup:internet can only be used in ACL destinations",
    ),
}
#: Where ``validate`` looks for undefined references, per release: (section, field) → kinds it checks there.
_CHECKED = {
    "0.28": {
        ("acls", "src"): "group tag host",
        ("acls", "dst"): "group tag host",
        ("ssh", "src"): "group tag",
        ("ssh", "dst"): "tag",
        ("tagOwners", None): "group tag",
        ("autoApprovers", None): "group tag",
    },
    "0.29": {
        ("acls", "src"): "group tag host",
        ("acls", "dst"): "group tag host",
        ("ssh", "src"): "group tag",
        ("ssh", "dst"): "tag",
        ("grants", "src"): "group tag host",
        ("grants", "dst"): "group tag host",
        ("grants", "via"): "tag",
        ("nodeAttrs", "target"): "group tag host",
        ("tagOwners", None): "group tag",
        ("autoApprovers", None): "group tag",
    },
}
#: ``validate``'s order: sections, then (inside a rule) the fields it walks first.
_SECTIONS = {
    "0.28": ("acls", "ssh", "tagOwners", "flatten", "autoApprovers"),
    "0.29": ("acls", "ssh", "grants", "nodeAttrs", "tagOwners", "flatten", "autoApprovers"),
}
_FIELD_ORDER = {"action": -1, "src": 0, "dst": 1, "via": 2, "target": 0, "routes": 0, "exitNode": 1}


@dataclass(frozen=True)
class _Finding:
    """One problem as Headscale reports it: the phase that finds it, where it sorts, and Headscale's message."""

    phase: str  # "decode" (the first one stops the parse), "validate" (all are joined) or "unknown" (model's words)
    order: tuple[float, ...]
    message: str


def headscale_policy_error(document: Any, problems: Sequence[PolicyProblem], *, minor: str) -> str:
    """Headscale ``minor``'s message (after ``parsing policy: ``) for a HuJSON ``document`` the model refused with
    ``problems`` (the text parsed: hujson's own errors are :func:`.hujson.hujson_error`'s)."""
    reader = _Reader(document, minor)
    findings = [reader.finding(problem) for problem in problems]
    stops = [finding for finding in findings if finding.phase != "validate"]
    if stops:
        return min(stops, key=lambda finding: finding.order).message
    messages = [finding.message for finding in sorted(findings, key=lambda finding: finding.order)]
    flatten = reader.flatten_error(problems)
    if flatten:
        messages.insert(sum(1 for finding in findings if finding.order < flatten.order), flatten.message)
    return messages[0] if len(messages) == 1 else "multiple errors:" + "".join(f"\n\t{m}" for m in messages)


def _unknown_field(name: str, *, minor: str) -> str:
    """``RejectUnknownMembers`` as ``unmarshalPolicy`` rewords it (the member's name as written)."""
    return f"unknown field: {_go_quote(name)}" if minor >= "0.29" else f"unknown field {_go_quote(name)}"


def _go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``): double quotes, Go's escapes, printable Unicode kept."""
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
    escapes |= {"\t": "\\t", "\v": "\\v"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _parse_path(path: str) -> list[str | int] | None:
    """The parts of a path :func:`headscale_ha.policy.problems.format_path` wrote (None if it is not one)."""
    if path == "(root)":
        return []
    token = re.compile(r'(?:^|\.)([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
    parts: list[str | int] = []
    at = 0
    while at < len(path):
        match = token.match(path, at)
        if match is None or (match[1] and at and path[at] != "."):
            return None
        parts.append(match[1] if match[1] else int(match[2]) if match[2] else json.loads(match[3]))
        at = match.end()
    return parts


def _fold(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _literal(match: re.Match[str]) -> str:
    return str(ast.literal_eval(match["lit"]))


class _Reader:
    """The document as Headscale's decoder walks it: where a path is, what is written there, and how it is named."""

    def __init__(self, document: Any, minor: str) -> None:
        self.document = document
        self.minor = minor

    def locate(self, parts: Sequence[str | int]) -> tuple[tuple[int, ...], list[str], Any] | None:
        """The path's position in document order, its JSON pointer tokens as written, and the value there."""
        node, positions, tokens = self.document, [], []
        for part in parts:
            if isinstance(part, int) and isinstance(node, list) and part < len(node):
                positions.append(part)
                tokens.append(str(part))
                node = node[part]
                continue
            if not isinstance(part, str) or not isinstance(node, dict):
                return None
            keys = list(node)
            written = part if part in node else next((k for k in keys if _fold(k) == _fold(part)), None)
            if written is None:
                return None
            positions.append(keys.index(written))
            tokens.append(written)
            node = node[written]
        return tuple(positions), tokens, node

    def finding(self, problem: PolicyProblem) -> _Finding:
        parts = _parse_path(problem.path)
        located = self.locate(parts) if parts is not None else None
        if parts is None or located is None:
            return _Finding("unknown", (math.inf,), str(problem))
        positions, tokens, value = located
        for classify in (self._unknown_key, self._action, self._ports):
            message = classify(parts, tokens, value, problem.reason)
            if message is not None:
                return _Finding("decode", positions, message)
        for check in (self._undefined, self._internet, self._ssh_action_missing):
            message = check(parts, value, problem.reason)
            if message is not None:
                return _Finding("validate", self._validate_order(parts, positions), message)
        return _Finding("unknown", positions, str(problem))

    # -- the decoder's errors ----------------------------------------------------------------------------------

    @staticmethod
    def _decode_error(go_type: str, tokens: Sequence[str], error: str) -> str:
        """A custom ``UnmarshalJSON``'s error as json/v2's ``SemanticError`` prints it (a JSON string here)."""
        pointer = "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)
        return f"{_DECODE} JSON string into Go v2.{go_type} within {_go_quote(pointer)}: {error}"

    def _unknown_key(self, parts: Sequence[str | int], tokens: Sequence[str], value: Any, reason: str) -> str | None:
        if not reason.startswith("unknown key ") and not re.match(r"'[^']*' is not supported: ", reason):
            return None
        return _unknown_field(tokens[-1], minor=self.minor) if tokens else None

    def _action(self, parts: Sequence[str | int], tokens: Sequence[str], value: Any, reason: str) -> str | None:
        if len(parts) != 3 or parts[2] != "action" or not isinstance(value, str):
            return None
        written = json.dumps(value, ensure_ascii=False)[1:-1]  # Go trims the quotes off the raw JSON
        if parts[0] == "acls" and reason.startswith("ACL action "):
            if self.minor >= "0.29":
                error = f"action={_go_quote(written)} is not supported: invalid ACL action"
            else:
                error = f'invalid action {_go_quote(written)}, must be "accept"'
            return self._decode_error("Action", tokens, error)
        if parts[0] == "ssh" and reason.startswith("SSH action "):
            if self.minor >= "0.29" and not written.strip():
                return None  # 0.29 takes an empty action here; validate refuses it (_ssh_action_missing)
            if self.minor >= "0.29":
                error = f"{_go_quote(written.strip())} is not a valid action"
            else:
                error = f"invalid SSH action {_go_quote(written)}, must be one of: accept, check"
            return self._decode_error("SSHAction", tokens, error)
        return None

    def _ports(self, parts: Sequence[str | int], tokens: Sequence[str], value: Any, reason: str) -> str | None:
        """An ACL destination's ``AliasWithPorts`` error: no ``:`` at all, or ``parsePortRange``'s on what follows
        the last ``:`` (which for ``tag:web`` is ``web``: the model calls that "no ports", Go a bad port)."""
        if len(parts) != 4 or parts[0] != "acls" or parts[2] != "dst" or not isinstance(value, str):
            return None
        if ":" not in value:
            error = "hostport must contain a colon" + ("" if self.minor >= "0.29" else ' (":")')
            return self._decode_error("AliasWithPorts", tokens, error) if "has no ports" in reason else None
        try:
            ports = split_destination(value, self.minor)[1]
        except ValueError:
            return None
        if "has no ports" in reason:
            try:
                parse_ports(ports)
            except ValueError as exc:
                reason = str(exc)
            else:
                return None  # the ports are fine: the alias is what Go refuses
        port_error = next(
            (old if self.minor < "0.29" else new for start, old, new in _PORT_ERRORS if start.match(reason)), None
        )
        if port_error is None or not reason.endswith("use '*', N, N-M or a comma list of those"):
            return None
        if self.minor >= "0.29":
            port_error = f"dst={_go_quote(value)}: port range {_go_quote(ports)}: {port_error}"
        return self._decode_error("AliasWithPorts", tokens, port_error)

    # -- validate's errors -------------------------------------------------------------------------------------

    @staticmethod
    def _rule_field(parts: Sequence[str | int]) -> tuple[str, str | None]:
        """(section, field) of a path: ``acls[0].src[1]`` → (acls, src); outside a rule's list the field is None."""
        field = str(parts[2]) if len(parts) > 2 and isinstance(parts[1], int) else None
        return str(parts[0]), field

    def _internet(self, parts: Sequence[str | int], value: Any, reason: str) -> str | None:
        """autogroup:internet where only an ACL destination may name it."""
        if len(parts) != 4 or not isinstance(value, str) or value.strip() != _INTERNET or _INTERNET not in reason:
            return None
        return _INTERNET_REFUSED[self.minor].get(self._rule_field(parts))

    def _ssh_action_missing(self, parts: Sequence[str | int], value: Any, reason: str) -> str | None:
        """0.29 decodes an empty SSH action and ``validate`` refuses it."""
        empty = isinstance(value, str) and not value.strip()
        if self.minor >= "0.29" and len(parts) == 3 and parts[0] == "ssh" and parts[2] == "action" and empty:
            return "action must be specified"
        return None

    def _undefined(self, parts: Sequence[str | int], value: Any, reason: str) -> str | None:
        """An undefined group, tag or host where this release's ``validate`` checks for one."""
        if not parts:
            return None
        section, field = self._rule_field(parts)
        checked = _CHECKED[self.minor].get((section, field), "")
        if self.minor >= "0.29" and parts[:1] == ["ssh"] and field == "dst" and (host := _SSH_HOST.match(reason)):
            return f"invalid dst {_go_quote(_literal(host))}"
        for kind, pattern in _UNDEFINED.items():
            match = pattern.match(reason)
            if match and kind in checked.split():
                return self._undefined_message(kind, _literal(match), str(parts[0]), field)
        return None

    def _undefined_message(self, kind: str, name: str, section: str, field: str | None) -> str:
        quoted = _go_quote(name)
        if self.minor < "0.29":
            return _UNDEFINED_028.format(kind=kind.capitalize(), name=quoted)
        if kind != "tag":
            return f"{kind} not defined in policy: {quoted}"
        wording: dict[tuple[str, str | None], Callable[[str], str]] = {
            ("acls", "src"): lambda q: f"src=tag not found: {q}",
            ("acls", "dst"): lambda q: f"dst={q}: tag not found: {q}",
            ("grants", "src"): lambda q: f"src=tag not found: {q}",
            ("grants", "via"): lambda q: f"tag {q} not found",
        }
        return wording.get((section, field), lambda q: f"tag not found: {q}")(quoted)

    def _validate_order(self, parts: Sequence[str | int], positions: tuple[int, ...]) -> tuple[float, ...]:
        sections = _SECTIONS[self.minor]
        rank = sections.index(str(parts[0])) if parts[0] in sections else len(sections)
        rest: list[float] = list(positions[1:])
        field_at = 1 if len(parts) > 2 and isinstance(parts[1], int) else 0 if parts[0] == "autoApprovers" else None
        if field_at is not None and len(parts) > field_at + 1 and str(parts[field_at + 1]) in _FIELD_ORDER:
            rest[field_at] = _FIELD_ORDER[str(parts[field_at + 1])]
        return (rank, *rest)

    def flatten_error(self, problems: Sequence[PolicyProblem]) -> _Finding | None:
        """``flattenTagOwners``: a tag owned by an undefined tag adds one more error (the first such owner)."""
        for problem in problems:
            parts = _parse_path(problem.path)
            match = _UNDEFINED["tag"].match(problem.reason)
            if match and parts and len(parts) == 3 and parts[0] == "tagOwners":
                message = f"tag {_go_quote(str(parts[1]))} references undefined tag {_go_quote(_literal(match))}"
                return _Finding("validate", (_SECTIONS[self.minor].index("flatten"),), message)
        return None
