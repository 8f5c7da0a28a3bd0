"""The Headscale tailnet policy for Headscale 0.28 and 0.29: parsing, validation, lints, grants→ACLs, tests.

Headscale only checks a policy when it is written, which is too late for ``pulumi preview``. This module decides,
before anything is deployed, exactly what the target minor's parser decides (Headscale's ``hscontrol/policy/v2``):

- **Refusals** (:class:`PolicyError`) are what that Headscale refuses, one problem per offending value with its
  JSON path. Nothing Headscale refuses is accepted; nothing Headscale accepts is refused, apart from the few
  deliberate differences listed in :data:`DELIBERATE_DIFFERENCES`.
- **Normalisation** reads a policy the way Headscale does and renders what it understood: object keys match
  case-insensitively and ignore ``_``/``-`` (Go's ``encoding/json/v2`` with ``MatchCaseInsensitiveNames``), ``#``
  keys inside ACL rules are dropped, protocol names are lower-cased (0.29 also turns known numbers into names),
  CIDRs are masked and addresses written canonically, 0.29 trims whitespace around aliases, SSH actions and SSH
  users and reads ``[v6]:port`` destinations.
- **Lints** (:func:`lint_policy`, :class:`PolicyLint`) are the project's own strictness: findings with the reason
  and the hazard they prevent, for a policy the server accepts (wildcard SSH users on 0.28 that 0.29 refuses,
  default routes in ``autoApprovers``, whitespace Headscale trims, rules that match nothing, …).
- **Tests**: 0.29 evaluates the policy's ``tests`` and ``sshTests`` when it is written and refuses the write when
  one fails. :func:`evaluate_policy_tests` evaluates them offline over the policy's own definitions; a test proven
  to fail is refused like Headscale refuses it, one that depends on live nodes is reported "checked at apply".

The helpers :func:`parse_alias`, :func:`parse_destination`, :func:`parse_ports`, :func:`parse_prefix` and
:func:`protocol_numbers` give the typed reading of a value, with Go's parsing rules.
"""

from __future__ import annotations

import copy
import difflib
import ipaddress
import json
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = [
    "DELIBERATE_DIFFERENCES",
    "SUPPORTED_VERSIONS",
    "TAILNET_RANGES",
    "Acl",
    "Alias",
    "AliasKind",
    "AutoApprovers",
    "Grant",
    "NodeAttr",
    "Policy",
    "PolicyCheck",
    "PolicyError",
    "PolicyLint",
    "PolicyProblem",
    "PolicyTest",
    "PolicyTestOutcome",
    "SshPolicyTest",
    "SshRule",
    "check_policy",
    "evaluate_policy_tests",
    "format_path",
    "grants_to_acls",
    "headscale_minor",
    "lint_policy",
    "load_hujson",
    "normalise_keys",
    "parse_alias",
    "parse_destination",
    "parse_network",
    "parse_policy",
    "parse_ports",
    "parse_prefix",
    "policy_document",
    "protocol_number",
    "protocol_numbers",
    "validate_policy",
]

#: Headscale minors this model speaks.
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.28", "0.29")

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")

#: Where this model still differs from Headscale's parser on purpose, and why (each is a refusal of something
#: Headscale would take; none is an acceptance of something Headscale refuses).
DELIBERATE_DIFFERENCES: tuple[str, ...] = (
    "IPv6 zones ('fe80::1%eth0') are refused everywhere: Go's address parser takes them in a few places, but a "
    "zone is never meaningful in a tailnet policy and the semantics differ between Go releases.",
    "JSON null is read as 'absent' for sections, lists, maps and 0.29's checkPeriod (as Go does) but refused for "
    "the other scalars (action, proto, 0.28's checkPeriod, a test's src): Go reads some of those as '' or a "
    "default, which hides a mistake.",
    "A non-empty text that is not HuJSON is refused; Headscale reads an empty policy text as 'no policy' "
    "(allow all), the model only takes an object (write '{}' for allow-all on purpose).",
    "0.28 is modelled from the 0.28-era parser and its release notes (wildcard SSH destinations and the SSH "
    "source/destination rules refused); where the 0.28.0 behaviour is not certain, the stricter reading is kept.",
    "A 'tests'/'sshTests' entry whose source or destination names an undefined group, tag or host, or a test "
    "proven to fail, is refused: 0.29 refuses it when the policy is written (API, CLI, reload) but only logs a "
    "warning when it starts from a policy file that has it.",
)


def headscale_minor(version: str) -> str:
    """``"0.29.2"``, ``"v0.29.2"`` or ``"0.29"`` → ``"0.29"``; anything this model does not speak is refused."""
    match = _VERSION_RE.match(version) if isinstance(version, str) else None
    minor = f"{int(match[1])}.{int(match[2])}" if match else None
    if minor not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported Headscale version {version!r}: the policy model speaks {SUPPORTED_VERSIONS}")
    return minor


# ---------------------------------------------------------------------------------------------------------------
# Problems and lints


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One bad value: where it is (``acls[2].dst[0]``) and why Headscale refuses it."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class PolicyError(ValueError):
    """Every problem of a policy at once, so a preview shows the whole list instead of the first hit."""

    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        if not problems:
            raise ValueError("PolicyError needs at least one problem")
        self.problems: list[PolicyProblem] = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)


@dataclass(frozen=True, slots=True)
class PolicyLint:
    """A finding in a policy Headscale accepts: where, what (``finding``), the hazard it prevents, a stable code."""

    path: str
    code: str
    finding: str
    hazard: str

    def __str__(self) -> str:
        return f"{self.path}: {self.finding} ({self.hazard}) [{self.code}]"


#: Fields whose value is a JSON object keyed by user data (a group, tag, host, route or capability name).
_KEYED_FIELDS = frozenset({"groups", "hosts", "tagOwners", "routes", "app"})
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(parts: Iterable[str | int]) -> str:
    """JSON-ish path: ``acls[2].dst[0]``, ``tagOwners["tag:server"][1]``; the document itself is ``(root)``."""
    out = ""
    previous: str | int | None = None
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif previous in _KEYED_FIELDS or not _IDENTIFIER.match(part):
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            out += f".{part}" if out else part
        previous = part
    return out or "(root)"


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A ``; did you mean 'x'?`` suffix when a candidate is close (case-insensitive first), else nothing."""
    pool = sorted(set(candidates))
    folded = [c for c in pool if c.lower() == word.lower()]
    if folded:
        return f"; did you mean {folded[0]!r}?"
    prefix = word.split(":", 1)[0] + ":" if ":" in word else ""
    names = {c[len(prefix) :]: c for c in pool if c.startswith(prefix)}
    close = difflib.get_close_matches(word[len(prefix) :], list(names), n=1, cutoff=0.6)
    return f"; did you mean {names[close[0]]!r}?" if close else ""


# ---------------------------------------------------------------------------------------------------------------
# HuJSON (JSON with comments and trailing commas; nothing else, as tailscale/hujson)


def _strip_hujson(text: str) -> str:
    """Blank out comments and drop trailing commas (only after a value), keeping every other character in place."""
    out: list[str] = []
    i, n = 0, len(text)
    comma: int | None = None  # index in ``out`` of a comma that follows a value and may be trailing
    last = ""  # the last significant character
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            comma, last, i = None, '"', j + 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j == -1 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j == -1:
                raise ValueError("unterminated /* comment")
            out.append(re.sub(r"[^\n]", " ", text[i : j + 2]))
            i = j + 2
            continue
        if c in " \t\r\n":
            out.append(c)
            i += 1
            continue
        if c == "," and last not in ("", "[", "{", ",", ":"):
            comma = len(out)
        elif c in "]}" and comma is not None:
            out[comma] = " "
            comma = None
        else:
            comma = None
        out.append(c)
        last = c
        i += 1
    return "".join(out)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"Duplicate key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _no_lone_surrogates(value: Any) -> None:
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ValueError("invalid UTF-16 surrogate in a string")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_lone_surrogates(key)
            _no_lone_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _no_lone_surrogates(item)


def load_hujson(text: str) -> Any:
    """Parse HuJSON: JSON plus // and /* */ comments and trailing commas (tailscale/hujson, then Go's JSON).

    Duplicate keys, NaN/Infinity and lone surrogates are refused like Headscale; JSON5 extras (single quotes,
    unquoted keys, hex numbers) are refused too, because Headscale's parser refuses them.
    """
    try:
        value = json.loads(_strip_hujson(text), object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        _no_lone_surrogates(value)
    except ValueError as exc:
        raise PolicyError([PolicyProblem("(root)", f"not valid HuJSON: {exc}")]) from None
    return value


# ---------------------------------------------------------------------------------------------------------------
# Go's readings of values: integers, addresses, prefixes, ports, protocols, durations, names

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_ATOI_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MAX = 2**63 - 1


def _go_atoi(text: str) -> int | None:
    """``strconv.Atoi``: optional sign, ASCII digits, int64 range; None when Go refuses the text."""
    if not _ATOI_RE.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _go_trim(text: str) -> str:
    """``strings.TrimSpace``: Unicode white space (not Python's extra separators \\x1c-\\x1f)."""

    def space(c: str) -> bool:
        return c in "\t\n\v\f\r \x85\xa0" or (ord(c) > 0xFF and c.isspace())

    start, end = 0, len(text)
    while start < end and space(text[start]):
        start += 1
    while end > start and space(text[end - 1]):
        end -= 1
    return text[start:end]


def _go_addr(text: str) -> _Address:
    """``netip.ParseAddr`` (zones refused on purpose)."""
    if "%" in text:
        raise ValueError(f"{text!r}: IPv6 zones are not accepted in a policy")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid IP address") from None


def parse_prefix(text: str) -> tuple[_Network, bool]:
    """Headscale's ``Prefix.parseString``: an address (→ /32 or /128) or a CIDR (``netip.ParsePrefix``: bits in
    decimal without leading zeros, host bits allowed). Returns the masked network and whether it was a bare address.
    """
    if "/" not in text:
        address = _go_addr(text)
        return ipaddress.ip_network(f"{address}/{address.max_prefixlen}"), True
    address_text, _, bits_text = text.rpartition("/")
    address = _go_addr(address_text)
    bits = _go_atoi(bits_text) if not (len(bits_text) > 1 and not "1" <= bits_text[0] <= "9") else None
    if bits is None or not 0 <= bits <= address.max_prefixlen:
        raise ValueError(f"{text!r} is not a valid CIDR: bad prefix length {bits_text!r}")
    return ipaddress.ip_network(f"{address}/{bits}", strict=False), False


def _canonical_prefix(text: str) -> str | None:
    """The canonical spelling Headscale understands (``10.0.0.1/8`` → ``10.0.0.0/8``), or None if not a prefix."""
    try:
        network, bare = parse_prefix(text)
    except ValueError:
        return None
    return str(network.network_address) if bare else str(network)


def parse_network(text: str) -> _Network:
    """A canonical IP (→ /32 or /128) or CIDR; host bits or a non-canonical spelling are refused with the fix.

    Stricter than Headscale on purpose: for the program's own inputs (site routes, gateway IPs).
    """
    if "/" in text:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not a valid CIDR") from None
        if str(network) != text:
            address = text.split("/", 1)[0]
            if ipaddress.ip_address(address) != network.network_address:
                raise ValueError(f"{text!r} has host bits set; the network is {str(network)!r}")
            raise ValueError(f"write {text!r} as {str(network)!r}")
        return network
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid IP address") from None
    if str(address) != text:
        raise ValueError(f"write {text!r} as {str(address)!r}")
    return ipaddress.ip_network(f"{address}/{address.max_prefixlen}")


class AliasKind(StrEnum):
    """What a policy alias names."""

    USER = "user"
    GROUP = "group"
    TAG = "tag"
    HOST = "host"
    PREFIX = "IP/CIDR"
    AUTOGROUP = "autogroup"
    WILDCARD = "'*'"


@dataclass(frozen=True, slots=True)
class Alias:
    """A parsed alias: its kind, the text as written and, for an IP/CIDR, the (masked) network."""

    kind: AliasKind
    text: str
    network: _Network | None = None


_AUTOGROUPS = {
    "0.28": ("autogroup:internet", "autogroup:member", "autogroup:nonroot", "autogroup:tagged", "autogroup:self"),
    "0.29": (
        "autogroup:internet",
        "autogroup:member",
        "autogroup:nonroot",
        "autogroup:tagged",
        "autogroup:self",
        "autogroup:danger-all",
    ),
}
#: Tailscale autogroups Headscale does not implement (a hint in the error).
_FOREIGN_AUTOGROUPS = frozenset({"autogroup:admin", "autogroup:owner", "autogroup:it-admin", "autogroup:shared"})


def parse_alias(text: str, *, version: str) -> Alias:
    """Classify an alias exactly as Headscale's ``parseAlias``: an IP/CIDR first, then ``*``, a user (any ``@``),
    ``group:``, ``tag:``, ``autogroup:`` prefixes, else a host name (no ``:``). No whitespace is trimmed here."""
    headscale_minor(version)
    try:
        network, _ = parse_prefix(text)
    except ValueError:
        pass
    else:
        return Alias(AliasKind.PREFIX, text, network)
    if text == "*":
        return Alias(AliasKind.WILDCARD, text)
    if "@" in text:
        return Alias(AliasKind.USER, text)
    for prefix, kind in (("group:", AliasKind.GROUP), ("tag:", AliasKind.TAG), ("autogroup:", AliasKind.AUTOGROUP)):
        if text.startswith(prefix):
            return Alias(kind, text)
    if ":" not in text:
        return Alias(AliasKind.HOST, text)
    raise ValueError(
        f"{text!r} is not an alias (user@, group:…, tag:…, autogroup:…, a host name from hosts, an IP or a CIDR)"
    )


def _tag_name_problem(text: str, version: str) -> str | None:
    """Headscale's ``Tag.Validate``: the ``tag:`` prefix; from 0.29 also an ASCII letter right after it."""
    if not text.startswith("tag:"):
        return f"{text!r} is not a tag: write 'tag:<name>'"
    rest = text[4:]
    if version >= "0.29" and not (rest and rest[0].isascii() and rest[0].isalpha()):
        return f"{text!r}: a tag name starts with a letter after 'tag:' (Headscale 0.29)"
    return None


def _validate_alias(alias: Alias, version: str) -> None:
    """Headscale's ``Alias.Validate`` (run on ACL and test destinations): known autogroups, 0.29 tag names."""
    if alias.kind is AliasKind.AUTOGROUP and alias.text not in _AUTOGROUPS[version]:
        raise ValueError(_autogroup_problem(alias.text, version))
    if alias.kind is AliasKind.TAG and (problem := _tag_name_problem(alias.text, version)):
        raise ValueError(problem)


def _autogroup_problem(text: str, version: str) -> str:
    known = _AUTOGROUPS[version]
    if text in _AUTOGROUPS["0.29"]:
        return f"{text!r} needs Headscale 0.29 (target is {version})"
    if text in _FOREIGN_AUTOGROUPS:
        return f"{text!r} is a Tailscale autogroup that Headscale does not support"
    return f"unknown autogroup {text!r}{_did_you_mean(text, known)}"


#: The port wildcard ``*`` as a range.
ALL_PORTS = (0, 65535)


def _go_port(text: str) -> int:
    value = _go_atoi(text)
    if value is None:
        raise ValueError(f"invalid port {text!r}")
    if not 0 <= value <= 65535:
        raise ValueError(f"port {text} is out of range (0-65535)")
    return value


def parse_ports(text: str) -> tuple[tuple[int, int], ...]:
    """Headscale's ``parsePortRange``: ``*``, or a comma list of ``N`` (>0) and ``N-M`` ranges (0-65535)."""
    if text == "*":
        return (ALL_PORTS,)
    ranges: list[tuple[int, int]] = []
    for item in text.split(","):
        where = "" if item == text else f" in {text!r}"
        try:
            if "-" in item:
                bounds = [bound for bound in item.split("-") if bound != ""]
                if len(bounds) != 2:
                    raise ValueError(f"invalid port range {item!r}")
                first, last = _go_port(bounds[0]), _go_port(bounds[1])
                if first > last:
                    raise ValueError(f"port range {item!r} is inverted")
            else:
                first = last = _go_port(item)
                if first < 1:
                    raise ValueError("a single port must be above 0 (write '*' for every port)")
        except ValueError as exc:
            raise ValueError(f"{exc}{where}: use '*', N, N-M or a comma list of those") from None
        ranges.append((first, last))
    return tuple(ranges)


def _split_destination(text: str, version: str) -> tuple[str, str]:
    """Headscale's ``splitDestinationAndPort``: ``[v6]:ports`` / ``[v6]/bits:ports`` from 0.29, then the last ``:``."""
    if version >= "0.29" and text.startswith("["):
        close = text.find("]")
        host = text[1:close] if close != -1 else ""
        try:
            if close == -1 or _go_addr(host).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError(f"{text!r}: square brackets are only valid around an IPv6 address") from None
        rest = text[close + 1 :]
        if not rest or rest[0] not in ":/":
            raise ValueError(f"{text!r}: write '[<IPv6>]:<ports>'")
        text = host + rest
    elif text.startswith("["):
        bare = text[1:].replace("]", "", 1)
        raise ValueError(f"{text!r}: bracketed IPv6 destinations need Headscale 0.29; write {bare!r}")
    cut = text.rfind(":")
    if cut == -1:
        raise ValueError(f"{text!r} has no ports: write '{text}:*' or '{text}:<port>'")
    if cut == 0 or cut == len(text) - 1:
        raise ValueError(f"{text!r} is not '<alias>:<ports>'")
    return text[:cut], text[cut + 1 :]


def parse_destination(text: str, *, version: str) -> tuple[Alias, tuple[tuple[int, int], ...]]:
    """``<alias>:<ports>`` as Headscale's ``AliasWithPorts``: split, ports, alias, then ``Validate``."""
    minor = headscale_minor(version)
    alias_text, ports_text = _split_destination(text, minor)
    ports = parse_ports(ports_text)
    alias = parse_alias(alias_text, version=minor)
    _validate_alias(alias, minor)
    return alias, ports


_PROTOCOLS_028: dict[str, tuple[int, ...]] = {
    "icmp": (1, 58),
    "igmp": (2,),
    "ipv4": (4,),
    "ip-in-ip": (4,),
    "tcp": (6,),
    "egp": (8,),
    "igp": (9,),
    "udp": (17,),
    "gre": (47,),
    "esp": (50,),
    "ah": (51,),
    "sctp": (132,),
}
_PROTOCOLS: dict[str, dict[str, tuple[int, ...]]] = {
    "0.28": _PROTOCOLS_028,
    "0.29": {**_PROTOCOLS_028, "icmp": (1,), "ipv6-icmp": (58,), "fc": (133,)},
}
#: 0.29 writes every known protocol number as its name (``Protocol.UnmarshalJSON``).
_NUMBER_TO_NAME = {
    1: "icmp",
    2: "igmp",
    4: "ipv4",
    6: "tcp",
    8: "egp",
    9: "igp",
    17: "udp",
    47: "gre",
    50: "esp",
    51: "ah",
    58: "ipv6-icmp",
    132: "sctp",
    133: "fc",
}
#: Protocols with ports; every other protocol only takes the port wildcard ``*``.
PORT_PROTOCOLS = frozenset({6, 17, 132})
#: What the clients apply for a rule without protocol (0.29) and what a test without protocol asks for.
DEFAULT_PROTOCOLS = frozenset({6, 17, 1, 58})


def _check_protocol(text: str, version: str) -> None:
    """Headscale's ``Protocol.validate`` on an already lower-cased text: '', a name, or 0-255 without leading 0."""
    if text == "" or text in _PROTOCOLS[version]:
        return
    if text == "*":
        raise ValueError("'*' is not a protocol: leave the protocol out for the default set")
    if text == "0" or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"protocol number {text!r}: leading zeros are not permitted (and 0 is not a protocol)")
    number = _go_atoi(text)
    if number is None:
        if text in _PROTOCOLS["0.29"]:
            numbers = _PROTOCOLS["0.29"][text]
            raise ValueError(
                f"{text!r} is a protocol name from Headscale 0.29 on (target is {version}); write {str(numbers[0])!r}"
            )
        raise ValueError(
            f"unknown protocol {text!r}{_did_you_mean(text, _PROTOCOLS[version])} (or give the IANA number 1-255)"
        )
    if not 0 <= number <= 255:
        raise ValueError(f"protocol number {text!r} is out of range (0-255)")


def _normalised_protocol(text: str, version: str) -> str:
    """What ``Protocol.UnmarshalJSON`` keeps: lower case; on 0.29 a known number becomes its name."""
    lowered = text.lower()
    if version >= "0.29":
        number = _go_atoi(lowered)
        if number is not None and number in _NUMBER_TO_NAME:
            return _NUMBER_TO_NAME[number]
    return lowered


def protocol_numbers(text: str, *, version: str) -> frozenset[int] | None:
    """The IANA numbers a protocol text allows on ``version`` (None: the default set, for '' or no protocol)."""
    minor = headscale_minor(version)
    text = _normalised_protocol(text, minor)
    _check_protocol(text, minor)
    if text == "":
        return None
    if text in _PROTOCOLS[minor]:
        return frozenset(_PROTOCOLS[minor][text])
    number = _go_atoi(text)
    assert number is not None
    return frozenset({number})


def protocol_number(text: str, *, version: str) -> int:
    """The main IANA number of a protocol (``icmp`` → 1 on both minors); '' is refused here."""
    numbers = protocol_numbers(text, version=version)
    if numbers is None:
        raise ValueError("an empty protocol is the default set, not one number")
    return min(numbers)


def _acl_ports_allowed(proto: str, version: str) -> bool:
    """Headscale allows specific ports only for the literal texts '', tcp, udp, sctp (0.28 compares the text)."""
    return proto in ("", "tcp", "udp", "sctp")


_WILDCARD_PROTO = "*"


def _parse_grant_ip(text: str, *, version: str) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """A grant ``ip`` entry as Headscale's ``ProtocolPort``: ``*``, ``<ports>`` or ``<proto>:<ports>`` (the
    protocol is not lower-cased here). Returns (protocol number, None for every protocol; port ranges)."""
    if text == "*":
        return None, (ALL_PORTS,)
    if ":" not in text:
        return None, parse_ports(text)
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"{text!r} has more than one ':'; write '<proto>:<ports>'")
    _check_protocol(parts[0], version)
    ports = parse_ports(parts[1])
    if parts[0] == "":
        return None, ports
    numbers = protocol_numbers(parts[0], version=version)
    assert numbers is not None
    return min(numbers), ports


#: Go ``time.ParseDuration`` (0.29 checkPeriod).
_GO_DURATION_RE = re.compile(r"^[+-]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)$")
_GO_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_GO_UNIT_NS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_GO_UNIT_NS["h"] = 3600 * 10**9
#: Prometheus ``model.ParseDuration`` (0.28 checkPeriod): units y w d h m s ms, biggest first, each once.
_PROM_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_PROM_DURATION_RE = re.compile("^" + "".join(rf"(?:([0-9]+){unit})?" for unit in _PROM_UNITS) + "$")
_PROM_UNIT_MS = (365 * 86400000, 7 * 86400000, 86400000, 3600000, 60000, 1000, 1)
_MAX_CHECK_PERIOD_NS = 168 * 3600 * 10**9


def _go_duration_ns(text: str) -> int:
    """Nanoseconds of a Go duration text (refused like ``time.ParseDuration``, overflow included)."""
    if not _GO_DURATION_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a Go duration like '12h', '30m' or '1h30m'")
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return 0
    total = Decimal(0)
    for number, unit in _GO_DURATION_PART.findall(body):
        total += Decimal(number or "0") * _GO_UNIT_NS[unit]
    if total > _INT64_MAX:
        raise ValueError(f"duration {text!r} overflows")
    return sign * int(total)


def _prometheus_duration_ok(text: str) -> bool:
    if text == "0":
        return True
    match = _PROM_DURATION_RE.fullmatch(text)
    if not text or match is None:
        return False
    total_ms = sum(int(value or 0) * unit for value, unit in zip(match.groups(), _PROM_UNIT_MS, strict=True))
    return total_ms * 10**6 <= _INT64_MAX


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


# ---------------------------------------------------------------------------------------------------------------
# Reading the document the way Headscale does: keys, nulls, '#' keys, whitespace, case, masks

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
class _Reading:
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


def _canonical_keys(
    obj: dict[str, Any], names: Sequence[str], parts: list[str | int], reading: _Reading, *, section: str
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


def _trim(value: Any, parts: list[str | int], reading: _Reading, what: str) -> Any:
    if isinstance(value, str):
        trimmed = _go_trim(value)
        if trimmed != value:
            reading.note(
                parts,
                "whitespace",
                f"{what} {value!r} is read as {trimmed!r}",
                "Headscale 0.28 and other tools take the padded text literally: it names nothing",
            )
            return trimmed
    return value


def _canonical_alias(value: Any, parts: list[str | int], reading: _Reading) -> Any:
    if isinstance(value, str) and (canonical := _canonical_prefix(value)) is not None and canonical != value:
        _note_address(value, canonical, parts, reading)
        return canonical
    return value


def _note_address(value: str, canonical: str, parts: list[str | int], reading: _Reading) -> None:
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


def _canonical_destination(value: Any, parts: list[str | int], reading: _Reading, version: str) -> Any:
    if not isinstance(value, str) or ":" not in value:
        return value
    try:
        alias_text, ports = _split_destination(value, version)
    except ValueError:
        return value
    canonical = _canonical_prefix(alias_text)
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


def _read(data: dict[str, Any], minor: str) -> _Reading:
    """Normalise a policy document as Headscale reads it; problems are what that reading itself refuses."""
    reading = _Reading(minor)
    top = _canonical_keys(data, _TOP_029, [], reading, section="")
    if minor == "0.28":
        for key, pointer in _NEW_IN_029.items():
            if key in top:
                del top[key]
                reading.problem([key], f"{key!r} needs Headscale 0.29 (target is 0.28){pointer}")
    fields = _OBJECT_FIELDS[minor]
    trims = minor >= "0.29"

    def alias_list(value: Any, parts: list[str | int]) -> Any:
        def one(item: Any, where: list[str | int]) -> Any:
            if trims:
                item = _trim(item, where, reading, "alias")
            return _canonical_alias(item, where, reading)

        return _list(value, parts, one)

    def objects(section: str, fix: Callable[[dict[str, Any], list[str | int]], dict[str, Any]]) -> None:
        value = top.get(section)
        if not isinstance(value, list):
            return
        out = []
        for index, item in enumerate(value):
            parts: list[str | int] = [section, index]
            if isinstance(item, dict):
                item = fix(_canonical_keys(item, fields[section], parts, reading, section=section), parts)
            out.append(item)
        top[section] = out

    if isinstance(top.get("hosts"), dict):
        top["hosts"] = {name: _canonical_alias(value, ["hosts", name], reading) for name, value in top["hosts"].items()}
    for section in ("tagOwners",):
        if isinstance(top.get(section), dict):
            top[section] = {key: ([] if value is None else value) for key, value in top[section].items()}

    def acl(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if isinstance(rule.get("proto"), str):
            normal = _normalised_protocol(rule["proto"], minor)
            if normal != rule["proto"]:
                reading.note(
                    [*parts, "proto"],
                    "proto-spelling",
                    f"protocol {rule['proto']!r} is read as {normal!r}",
                    "Headscale 0.28 and other tools read protocols case-sensitively",
                )
            rule["proto"] = normal
        if "src" in rule:
            rule["src"] = alias_list(rule["src"], [*parts, "src"])
        if "dst" in rule:
            rule["dst"] = _list(rule["dst"], [*parts, "dst"], lambda v, w: _canonical_destination(v, w, reading, minor))
        return rule

    def ssh(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if trims:
            if "action" in rule:
                rule["action"] = _trim(rule["action"], [*parts, "action"], reading, "action")
            for key in ("src", "dst"):
                if key in rule:
                    rule[key] = alias_list(rule[key], [*parts, key])
            if "users" in rule:
                rule["users"] = _list(rule["users"], [*parts, "users"], lambda v, w: _trim(v, w, reading, "user"))
        return rule

    def grant(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        for key in ("src", "dst"):
            if key in rule:
                rule[key] = alias_list(rule[key], [*parts, key])
        return rule

    def node_attr(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if "target" in rule:
            rule["target"] = alias_list(rule["target"], [*parts, "target"])
        return rule

    def test(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if isinstance(rule.get("proto"), str):
            rule["proto"] = _normalised_protocol(rule["proto"], minor)
        return rule

    def ssh_test(rule: dict[str, Any], parts: list[str | int]) -> dict[str, Any]:
        if "src" in rule:
            rule["src"] = _trim(rule["src"], [*parts, "src"], reading, "source")
        if "dst" in rule:
            rule["dst"] = alias_list(rule["dst"], [*parts, "dst"])
        for key in ("accept", "deny", "check"):
            if key in rule:
                rule[key] = _list(rule[key], [*parts, key], lambda v, w: _trim(v, w, reading, "user"))
        return rule

    objects("acls", acl)
    objects("ssh", ssh)
    if minor >= "0.29":
        objects("grants", grant)
        objects("nodeAttrs", node_attr)
        objects("tests", test)
        objects("sshTests", ssh_test)
    approvers = top.get("autoApprovers")
    if isinstance(approvers, dict):
        approvers = _canonical_keys(approvers, fields["autoApprovers"], ["autoApprovers"], reading, section="")
        routes = approvers.get("routes")
        if isinstance(routes, dict):
            merged: dict[str, Any] = {}
            for key, value in routes.items():
                value = [] if value is None else value
                canonical = _canonical_prefix(key) if "/" in key else None
                if canonical is None:
                    merged[key] = value
                    continue
                if canonical != key:
                    _note_address(key, canonical, ["autoApprovers", "routes", key], reading)
                if canonical in merged and isinstance(merged[canonical], list) and isinstance(value, list):
                    merged[canonical] = [*merged[canonical], *(v for v in value if v not in merged[canonical])]
                else:
                    merged[canonical] = value
            approvers["routes"] = merged
        top["autoApprovers"] = approvers
    reading.document = top
    return reading


def normalise_keys(data: Any, *, version: str) -> tuple[Any, list[PolicyLint]]:
    """Only the key reading (case, ``_``/``-``, ``#`` keys in ACL rules, nulls), for callers that add entries to
    a document before it is validated (the render). Values are left alone; anything else passes through."""
    minor = headscale_minor(version)
    if not isinstance(data, dict):
        return data, []
    reading = _Reading("0.29")
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


# ---------------------------------------------------------------------------------------------------------------
# Field rules (run on the normalised document; the version comes from the validation context)


def _version_of(info: ValidationInfo) -> str:
    context = info.context
    if not isinstance(context, dict) or context.get("version") not in SUPPORTED_VERSIONS:
        raise RuntimeError("validate a Policy with validate_policy(): the Headscale version is part of the rules")
    return context["version"]


def _rule(check: Callable[[str, str], object]) -> AfterValidator:
    """Turn a ``check(text, version)`` that raises ValueError into a validator whose message is the reason alone."""

    def validate(value: str, info: ValidationInfo) -> str:
        try:
            check(value, _version_of(info))
        except ValueError as exc:
            raise PydanticCustomError("headscale_policy", "{reason}", {"reason": str(exc)}) from None
        return value

    return AfterValidator(validate)


def _check_any_alias(text: str, version: str) -> None:
    parse_alias(text, version=version)


def _check_acl_dst(text: str, version: str) -> None:
    try:
        parse_destination(text, version=version)
    except ValueError as exc:
        try:
            alias = parse_alias(text, version=version)
        except ValueError:
            raise exc from None
        prefixed = alias.kind in (AliasKind.GROUP, AliasKind.TAG, AliasKind.AUTOGROUP)
        if text.count(":") > prefixed and alias.kind is not AliasKind.PREFIX:
            raise  # a port part was there and is wrong: its own error
        raise ValueError(f"destination {text!r} has no ports: write '{text}:*' or '{text}:<port>'") from None


def _check_ssh_src(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.kind not in (AliasKind.USER, AliasKind.GROUP, AliasKind.TAG, AliasKind.AUTOGROUP):
        hint = f"; users must contain '@': write '{text}@'" if alias.kind is AliasKind.HOST else ""
        raise ValueError(
            f"{text!r} ({alias.kind.value}) cannot be an SSH source (users, groups, tags, autogroups){hint}"
        )


def _check_ssh_dst(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.kind is AliasKind.WILDCARD:
        raise ValueError("'*' is not an SSH destination (since 0.28): use autogroup:member, autogroup:tagged or tags")
    if alias.kind not in (AliasKind.USER, AliasKind.TAG, AliasKind.AUTOGROUP, AliasKind.HOST):
        raise ValueError(
            f"{text!r} ({alias.kind.value}) cannot be used in an SSH destination (users, tags, autogroups)"
        )


def _check_principal(text: str, version: str) -> None:
    """Headscale's ``parseOwner`` / ``parseAutoApprover``: any '@' is a user, then group:, tag:."""
    if "@" in text or text.startswith(("group:", "tag:")):
        return
    hint = f"; users must contain '@': write '{text}@'" if re.fullmatch(r"[A-Za-z0-9._-]+", text) else ""
    raise ValueError(f"{text!r} is not a user (with '@'), a group: or a tag:{hint}")


def _check_member(text: str, version: str) -> None:
    if version >= "0.29" and text.startswith("group:"):
        raise ValueError(f"groups cannot contain groups ({text!r}); list its users instead")
    if "@" not in text:
        if text.startswith("group:"):
            raise ValueError(f"groups cannot contain groups ({text!r}); list its users instead")
        raise ValueError(f"{text!r} is not a user: users must contain '@': write '{text}@'")


def _check_group_name(text: str, version: str) -> None:
    if not text.startswith("group:"):
        raise ValueError(f"group names start with 'group:' ({text!r})")


def _check_tag_name(text: str, version: str) -> None:
    if problem := _tag_name_problem(text, version):
        raise ValueError(f"tagOwners keys are tags: {problem}")


def _check_host_name(text: str, version: str) -> None:
    if "@" in text or ":" in text:
        raise ValueError(f"{text!r} cannot be a host name (no '@' or ':')")


def _check_host_value(text: str, version: str) -> None:
    parse_prefix(text)


def _check_route(text: str, version: str) -> None:
    if "/" not in text:
        raise ValueError(f"routes are CIDRs: write '{text}/{parse_prefix(text)[0].prefixlen}'")
    parse_prefix(text)


def _check_acl_proto(text: str, version: str) -> None:
    _check_protocol(text, version)


def _check_grant_ip(text: str, version: str) -> None:
    _parse_grant_ip(text, version=version)


def _check_acl_action(text: str, version: str) -> None:
    if text != "accept":
        raise ValueError(f"ACL action {text!r}: the only action is 'accept' (written exactly so)")


def _check_ssh_action(text: str, version: str) -> None:
    if text == "" and version >= "0.29":
        return  # 0.29 reports an empty action as missing, with the rule
    if text not in ("accept", "check"):
        raise ValueError(f"SSH action {text!r}: use 'accept' or 'check'")


def _check_ssh_user(text: str, version: str) -> None:
    if version == "0.28":
        if text.startswith("autogroup:") and text != "autogroup:nonroot":
            raise ValueError(f"{text!r} is not an SSH user on 0.28; the only autogroup here is autogroup:nonroot")
        return
    if text in ("", "*"):
        raise ValueError(f"{text!r} is not an SSH user: list the login names (or autogroup:nonroot)")


def _check_check_period(text: str, version: str) -> None:
    if version == "0.28":
        if not _prometheus_duration_ok(text):
            hint = " ('always' needs Headscale 0.29)" if text == "always" else ""
            raise ValueError(f"checkPeriod {text!r} is not a duration like '12h', '30m' or '1h30m'{hint}")
        return
    if text != "always":
        _go_duration_ns(text)


def _check_env(text: str, version: str) -> None:
    if text == "":
        raise ValueError("acceptEnv entries cannot be empty")


def _check_attr(text: str, version: str) -> None:
    if text == "funnel":
        raise ValueError("the 'funnel' node attribute is refused by Headscale (Funnel is not implemented)")


#: tailscale.com capabilities a policy may grant (Headscale refuses the rest of that domain).
_TAILSCALE_CAPS = frozenset(
    f"tailscale.com/cap/{name}" for name in ("drive", "relay", "webui", "kubernetes", "tsidp", "secrets")
)


def _check_cap(text: str, version: str) -> None:
    if "://" in text:
        raise ValueError(f"capability {text!r} must have the form '<domain>/<path>' (no URL scheme)")
    if text.startswith("tailscale.com/") and text not in _TAILSCALE_CAPS:
        raise ValueError(f"capability {text!r} is in the tailscale.com domain and not grantable by a policy")


def _check_via(text: str, version: str) -> None:
    if problem := _tag_name_problem(text, version):
        raise ValueError(f"via takes tags only: {problem}")


def _check_test_proto(text: str, version: str) -> None:
    _check_protocol(text, version)
    if text not in ("", "tcp", "udp", "sctp"):
        raise ValueError(f"tests only take tcp, udp or sctp (got {text!r})")


def _check_test_dst(text: str, version: str) -> None:
    alias, ports = parse_destination(text, version=version)
    if alias.text == "autogroup:internet":
        raise ValueError("autogroup:internet is not a test destination")
    if len(ports) != 1 or ports[0][0] != ports[0][1]:
        raise ValueError(f"a test destination names one port ({text!r})")
    if alias.kind is AliasKind.PREFIX and "/" in text:
        raise ValueError(f"a test destination names one host, not a CIDR ({text!r})")


def _check_ssh_test_src(text: str, version: str) -> None:
    if text == "":
        raise ValueError("an sshTests entry needs a source")
    parse_alias(text, version=version)


def _check_ssh_test_dst(text: str, version: str) -> None:
    alias = parse_alias(text, version=version)
    if alias.text == "autogroup:internet":
        raise ValueError("autogroup:internet is not an sshTests destination")
    if alias.kind is AliasKind.PREFIX and alias.network is not None and alias.network.num_addresses != 1:
        raise ValueError(f"an sshTests destination names one host, not a CIDR ({text!r})")
    if alias.kind is AliasKind.TAG:
        _validate_alias(alias, version)


def _check_ip_pool(text: str, version: str) -> None:
    parse_prefix(text)


AnyAlias = Annotated[str, _rule(_check_any_alias)]
AclDst = Annotated[str, _rule(_check_acl_dst)]
SshSrc = Annotated[str, _rule(_check_ssh_src)]
SshDst = Annotated[str, _rule(_check_ssh_dst)]
SshAction = Annotated[str, _rule(_check_ssh_action)]
AclAction = Annotated[str, _rule(_check_acl_action)]
SshUser = Annotated[str, _rule(_check_ssh_user)]
Principal = Annotated[str, _rule(_check_principal)]
GroupMember = Annotated[str, _rule(_check_member)]
GroupName = Annotated[str, _rule(_check_group_name)]
TagName = Annotated[str, _rule(_check_tag_name)]
HostName = Annotated[str, _rule(_check_host_name)]
HostValue = Annotated[str, _rule(_check_host_value)]
Route = Annotated[str, _rule(_check_route)]
Proto = Annotated[str, _rule(_check_acl_proto)]
TestProto = Annotated[str, _rule(_check_test_proto)]
GrantIp = Annotated[str, _rule(_check_grant_ip)]
CheckPeriod = Annotated[str, _rule(_check_check_period)]
EnvName = Annotated[str, _rule(_check_env)]
NodeAttrName = Annotated[str, _rule(_check_attr)]
CapName = Annotated[str, _rule(_check_cap)]
ViaTag = Annotated[str, _rule(_check_via)]
TestDst = Annotated[str, _rule(_check_test_dst)]
SshTestSrc = Annotated[str, _rule(_check_ssh_test_src)]
SshTestDst = Annotated[str, _rule(_check_ssh_test_dst)]
IpPool = Annotated[str, _rule(_check_ip_pool)]


# ---------------------------------------------------------------------------------------------------------------
# The model


class _Strict(BaseModel):
    """No coercion, no unknown keys, immutable: the (normalised) document is taken as written or refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class Acl(_Strict):
    """An ACL rule: ``src`` may reach ``dst`` (``alias:ports``) over ``proto`` (default set when absent).
    Headscale takes a rule without ``action`` (as accept) and empty ``src``/``dst`` (matches nothing)."""

    action: AclAction | None = None
    proto: Proto | None = None
    src: list[AnyAlias] = Field(default_factory=list)
    dst: list[AclDst] = Field(default_factory=list)


class Grant(_Strict):
    """A grant (0.29): IP-level access (``ip``), application capabilities (``app``) and route steering (``via``)."""

    src: list[AnyAlias] = Field(default_factory=list)
    dst: list[AnyAlias] = Field(default_factory=list)
    ip: list[GrantIp] | None = None
    app: dict[CapName, list[Any]] | None = None
    via: list[ViaTag] | None = None


class SshRule(_Strict):
    """A Tailscale SSH rule; ``check`` re-authenticates on 0.29 and behaves like ``accept`` on 0.28."""

    action: SshAction | None = None
    src: list[SshSrc] = Field(default_factory=list)
    dst: list[SshDst] = Field(default_factory=list)
    users: list[SshUser] = Field(default_factory=list)
    check_period: CheckPeriod | None = Field(default=None, alias="checkPeriod")
    accept_env: list[EnvName] | None = Field(default=None, alias="acceptEnv")


class AutoApprovers(_Strict):
    """Who may get advertised routes (per CIDR) or exit-node status approved without an operator."""

    routes: dict[Route, list[Principal]] | None = None
    exit_node: list[Principal] | None = Field(default=None, alias="exitNode")


class NodeAttr(_Strict):
    """Node capabilities handed to every node matching ``target`` (0.29); an entry without ``attr`` is a no-op."""

    target: list[AnyAlias] = Field(default_factory=list)
    attr: list[NodeAttrName] | None = None
    ip_pool: list[IpPool] | None = Field(default=None, alias="ipPool")


class PolicyTest(_Strict):
    """A reachability assertion Headscale evaluates when the policy is written (0.29)."""

    src: str
    proto: TestProto | None = None
    accept: list[TestDst] | None = None
    deny: list[TestDst] | None = None


class SshPolicyTest(_Strict):
    """An SSH reachability assertion per login user (0.29)."""

    src: SshTestSrc
    dst: list[SshTestDst] = Field(default_factory=list)
    accept: list[str] | None = None
    deny: list[str] | None = None
    check: list[str] | None = None


class Policy(_Strict):
    """A Headscale policy document; build it with :func:`validate_policy` (the version is part of the rules)."""

    groups: dict[GroupName, list[GroupMember]] | None = None
    hosts: dict[HostName, HostValue] | None = None
    tag_owners: dict[TagName, list[Principal]] | None = Field(default=None, alias="tagOwners")
    acls: list[Acl] | None = None
    grants: list[Grant] | None = None
    ssh: list[SshRule] | None = None
    auto_approvers: AutoApprovers | None = Field(default=None, alias="autoApprovers")
    node_attrs: list[NodeAttr] | None = Field(default=None, alias="nodeAttrs")
    tests: list[PolicyTest] | None = None
    ssh_tests: list[SshPolicyTest] | None = Field(default=None, alias="sshTests")
    randomize_client_port: bool | None = Field(default=None, alias="randomizeClientPort")


def policy_document(policy: Policy) -> dict[str, Any]:
    """The policy as a JSON-ready dict with Headscale's key names; absent keys stay absent ({} ≠ {"acls": []})."""
    return policy.model_dump(mode="json", by_alias=True, exclude_none=True)


# ---------------------------------------------------------------------------------------------------------------
# Parsing and validation


#: Tailscale keys Headscale does not implement at all.
_NOT_IN_HEADSCALE = {
    "postures": "device postures are not supported by Headscale",
    "srcPosture": "device postures are not supported by Headscale",
    "defaultSrcPosture": "device postures are not supported by Headscale",
    "ipsets": "IP sets are not supported by Headscale",
}
#: Words people write for a key that difflib cannot relate to the real name.
_KEY_SYNONYMS = {
    "source": "src",
    "sources": "src",
    "destination": "dst",
    "destinations": "dst",
    "protocol": "proto",
    "ports": "dst",
    "user": "users",
    "targets": "target",
    "attrs": "attr",
}


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """A validated policy with its lints and, on 0.29, the offline outcome of its tests."""

    policy: Policy
    lints: tuple[PolicyLint, ...]
    test_outcomes: tuple[PolicyTestOutcome, ...]


def check_policy(data: Any, *, version: str) -> PolicyCheck:
    """Validate a policy document (already parsed) for a Headscale minor, and lint it; every problem at once.

    Raises :class:`PolicyError` with what that Headscale refuses, including a ``tests``/``sshTests`` entry proven
    to fail (0.29 refuses the write).
    """
    minor = headscale_minor(version)
    if not isinstance(data, dict):
        raise PolicyError([PolicyProblem("(root)", "the policy must be a JSON object")])
    reading = _read(copy.deepcopy(data), minor)
    problems = list(reading.problems)
    try:
        policy = Policy.model_validate(reading.document, context={"version": minor})
    except ValidationError as exc:
        raise PolicyError(problems + _problems_from(exc)) from None
    problems += _Semantics(policy, minor).run()
    if problems:
        raise PolicyError(problems)
    outcomes = tuple(_Evaluator(policy).run()) if minor >= "0.29" else ()
    failed = [o for o in outcomes if o.verdict == "fail"]
    if failed:
        raise PolicyError([PolicyProblem(o.path, f"test fails: {o.reason}") for o in failed])
    lints = tuple(reading.notes) + tuple(_lints(policy, minor))
    return PolicyCheck(policy, lints, outcomes)


def validate_policy(data: Any, *, version: str) -> Policy:
    """Validate a policy document (already parsed) for a Headscale minor; the result is normalised."""
    return check_policy(data, version=version).policy


def parse_policy(text: str, *, version: str) -> Policy:
    """Parse a HuJSON policy and validate it for a Headscale minor (``"0.28"``, ``"0.29"``, or a full version)."""
    return validate_policy(load_hujson(text), version=version)


def lint_policy(document: str | Mapping[str, Any], *, version: str) -> list[PolicyLint]:
    """The project's findings on a policy the target Headscale accepts (HuJSON text or a parsed document).

    Each :class:`PolicyLint` names the path, what was found, the hazard it prevents and a stable ``code``. A policy
    Headscale refuses raises :class:`PolicyError` instead.
    """
    data = load_hujson(document) if isinstance(document, str) else dict(document)
    return list(check_policy(data, version=version).lints)


def evaluate_policy_tests(policy: Policy, *, version: str) -> list[PolicyTestOutcome]:
    """The offline outcome of the policy's ``tests`` and ``sshTests`` (0.29; nothing on 0.28, which has none)."""
    return list(_Evaluator(policy).run()) if headscale_minor(version) >= "0.29" else []


def _problems_from(exc: ValidationError) -> list[PolicyProblem]:
    problems: list[PolicyProblem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        path = format_path(part for part in loc if part != "[key]")
        if error["type"] == "extra_forbidden":
            reason = _unknown_key_reason(loc[:-1], str(loc[-1]))
        elif error["type"] == "missing":
            reason = "required key is missing"
        else:
            reason = error["msg"]
        problems.append(PolicyProblem(path, reason))
    return problems


def _unknown_key_reason(parent: tuple[str | int, ...], key: str) -> str:
    if key.startswith("#"):
        return f"unknown key {key!r}: keep notes as // comments (Headscale only ignores '#' keys inside ACL rules)"
    if key in _NOT_IN_HEADSCALE:
        return f"{key!r} is not supported: {_NOT_IN_HEADSCALE[key]}"
    if key == "ipPool":
        return "Headscale refuses ipPool (it needs an IP allocator Headscale does not have)"
    model = _model_at(parent)
    allowed = [field.alias or name for name, field in model.model_fields.items()] if model else []
    synonym = _KEY_SYNONYMS.get(key.lower())
    if synonym in allowed:
        return f"unknown key {key!r}; did you mean {synonym!r}?"
    return f"unknown key {key!r}{_did_you_mean(key, allowed)}"


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that validated the object at ``loc`` (to suggest its keys)."""
    model: type[BaseModel] = Policy
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        field_info = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field_info is None:
            return None
        inner = _without_none(field_info.annotation)
        if get_origin(inner) is list:
            if not parts or not isinstance(parts.pop(0), int):
                return None
            inner = get_args(inner)[0]
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return model


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


# ---------------------------------------------------------------------------------------------------------------
# Checks across the document (Headscale's Policy.validate, per minor)

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
            self.add(parts, f"group {text!r} is not defined in groups{_did_you_mean(text, self.groups)}")
        elif alias.kind is AliasKind.TAG and text not in self.tags:
            self.add(parts, f"tag {text!r} has no tagOwners entry{tag_why}{_did_you_mean(text, self.tags)}")
        elif hosts and alias.kind is AliasKind.HOST and text not in self.hosts:
            user_hint = f"; if it is a user, write '{text}@'" if re.fullmatch(r"[A-Za-z0-9._-]+", text) else ""
            self.add(parts, f"host {text!r} is not defined in hosts{_did_you_mean(text, self.hosts)}{user_hint}")

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
        elif alias.text not in _AUTOGROUPS[self.version]:
            self.add(parts, _autogroup_problem(alias.text, self.version))
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
            cycle = _ownership_cycle(tag, owners)
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
            if not _acl_ports_allowed(proto, self.version) and any(r != ALL_PORTS for r in ports):
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
                self.add([*base, "via", position], f"tag {via!r} has no tagOwners entry{_did_you_mean(via, self.tags)}")
        if "autogroup:self" in grant.dst:
            self.self_sources([*base, "src"], sources, wildcard_ok=False)

    def ssh(self, index: int, rule: SshRule) -> None:
        base: list[str | int] = ["ssh", index]
        if self.version >= "0.29":
            if not rule.action:
                self.add([*base, "action"], "an SSH rule needs an action ('accept' or 'check')")
            if not rule.users:
                self.add([*base, "users"], "an SSH rule needs users")
        sources = []
        for position, src in enumerate(rule.src):
            alias = self.alias(src)
            self.refer([*base, "src", position], alias)
            self.autogroup([*base, "src", position], alias, _SSH_SRC_AUTOGROUPS, "an SSH source")
            sources.append(alias)
        for position, dst in enumerate(rule.dst):
            alias = self.alias(dst)
            parts = [*base, "dst", position]
            if alias.kind is AliasKind.HOST:
                if self.version >= "0.29":
                    self.add(parts, f"host {dst!r} cannot be an SSH destination (Headscale 0.29 refuses hosts here)")
                continue  # 0.28 takes a host here and does not look it up
            self.refer(parts, alias)
            self.autogroup(parts, alias, _SSH_DST_AUTOGROUPS, "an SSH destination")
        self.ssh_identities(base, sources, rule.dst)
        if rule.check_period is not None and self.version >= "0.29":
            if rule.action != "check":
                self.add([*base, "checkPeriod"], "checkPeriod only applies to action 'check'")
            elif rule.check_period != "always":
                nanos = _go_duration_ns(rule.check_period)
                if nanos < 0:
                    self.add([*base, "checkPeriod"], f"checkPeriod {rule.check_period!r} must not be negative")
                elif nanos > _MAX_CHECK_PERIOD_NS:
                    self.add([*base, "checkPeriod"], f"checkPeriod {rule.check_period!r} is above the maximum of 168h")

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
            self.add([*base, "ipPool"], "Headscale refuses ipPool (it needs an IP allocator Headscale does not have)")

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


def _ownership_cycle(start: str, owners: Mapping[str, Sequence[str]]) -> list[str] | None:
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


# ---------------------------------------------------------------------------------------------------------------
# Lints: the project's strictness on a policy Headscale accepts

_USER_RE = re.compile(r"^[^\s@:,]+@(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)?$")
_NAME_RE = {
    "group": re.compile(r"^group:[A-Za-z0-9][A-Za-z0-9._-]*$"),
    "tag": re.compile(r"^tag:[A-Za-z][A-Za-z0-9-]*$"),
    "host": re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
}
_LOGIN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_LOCALPART_RE = re.compile(r"^localpart:\*@[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_ATTR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._/-]*$")
_CAP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*/\S+$")
_UPGRADE = "Headscale 0.29 refuses this: the 0.28→0.29 upgrade would fail to load or write the policy"


def _lints(policy: Policy, version: str) -> Iterator[PolicyLint]:
    def lint(parts: Sequence[str | int], code: str, finding: str, hazard: str) -> PolicyLint:
        return PolicyLint(format_path(parts), code, finding, hazard)

    for kind, names in (("group", policy.groups or {}), ("tag", policy.tag_owners or {}), ("host", policy.hosts or {})):
        section = {"group": "groups", "tag": "tagOwners", "host": "hosts"}[kind]
        for name in names:
            if not _NAME_RE[kind].match(name):
                yield lint(
                    [section, name],
                    "name-format",
                    f"{kind} name {name!r} is outside letters, digits, '.', "
                    "'_', '-'" + (" (after 'tag:' a letter first)" if kind == "tag" else ""),
                    "Tailscale tooling refuses it; 0.29 refuses tag names not starting with a letter",
                )
            if kind == "host" and _canonical_prefix(name) is not None:
                yield lint(
                    [section, name],
                    "name-format",
                    f"host name {name!r} is an address",
                    "a rule naming it reads the address, not this host entry",
                )
    users: list[tuple[list[str | int], str]] = []
    for group, members in (policy.groups or {}).items():
        users += [(["groups", group, i], m) for i, m in enumerate(members)]
    for tag, owners in (policy.tag_owners or {}).items():
        users += [(["tagOwners", tag, i], o) for i, o in enumerate(owners) if "@" in o]
    for index, acl in enumerate(policy.acls or ()):
        users += [(["acls", index, "src", i], s) for i, s in enumerate(acl.src) if "@" in s]
        if acl.action is None:
            yield lint(
                ["acls", index],
                "missing-action",
                "an ACL rule without 'action' is read as accept",
                "readers cannot tell the intent; Tailscale and other tools require 'action'",
            )
        if not acl.src or not acl.dst:
            yield lint(
                ["acls", index],
                "empty-rule",
                "an ACL rule with an empty src or dst allows nothing",
                "a rule that silently matches nothing hides a typo or an emptied list",
            )
        if version == "0.28" and "autogroup:self" in [d.rpartition(":")[0] for d in acl.dst]:
            for i, src in enumerate(acl.src):
                alias = parse_alias(src, version=version)
                if not (
                    alias.kind in (AliasKind.USER, AliasKind.GROUP, AliasKind.WILDCARD) or src == "autogroup:member"
                ):
                    yield lint(["acls", index, "src", i], "upgrade-0.29", f"{src!r} reaches autogroup:self", _UPGRADE)
        if version == "0.28" and acl.proto and _go_atoi(acl.proto) is not None:
            yield lint(
                ["acls", index, "proto"],
                "proto-spelling",
                f"protocol number {acl.proto!r} on 0.28",
                "0.28 allows ports only for the names tcp/udp/sctp, and 0.29 rewrites numbers as names",
            )
    users += [(["tests", i, "src"], t.src) for i, t in enumerate(policy.tests or ()) if "@" in t.src]
    users += [(["sshTests", i, "src"], t.src) for i, t in enumerate(policy.ssh_tests or ()) if "@" in t.src]
    for position, user in users:
        if not _USER_RE.match(user):
            yield lint(
                position,
                "user-format",
                f"user {user!r} is not 'name@' or 'name@domain'",
                "it never matches a Headscale user, so the entry grants nothing",
            )
    owners = policy.tag_owners or {}
    if version >= "0.29":
        reported: set[frozenset[str]] = set()
        for tag in sorted(owners):
            cycle = _ownership_cycle(tag, owners)
            if cycle and frozenset(cycle) not in reported:
                reported.add(frozenset(cycle))
                yield lint(
                    ["tagOwners", tag],
                    "tag-cycle",
                    f"tag ownership cycle {' → '.join([*cycle, cycle[0]])} (0.29 drops the closing edge)",
                    "the owners a reader sees are not the owners Headscale applies, and 0.28 refuses the policy",
                )
    routes = (policy.auto_approvers.routes if policy.auto_approvers else None) or {}
    for route in routes:
        if parse_prefix(route)[0].prefixlen == 0:
            yield lint(
                ["autoApprovers", "routes", route],
                "route-default",
                f"{route} approves every subnet route of its family (not exit routes)",
                "any node of these approvers can announce and get approved "
                "routes over another site's networks; approve exit nodes with autoApprovers.exitNode",
            )
    for index, rule in enumerate(policy.ssh or ()):
        base: list[str | int] = ["ssh", index]
        if version == "0.28":
            if not rule.action:
                yield lint([*base, "action"], "upgrade-0.29", "an SSH rule without action", _UPGRADE)
            if not rule.users:
                yield lint([*base, "users"], "upgrade-0.29", "an SSH rule without users", _UPGRADE)
            for i, dst in enumerate(rule.dst):
                if parse_alias(dst, version=version).kind is AliasKind.HOST:
                    yield lint([*base, "dst", i], "upgrade-0.29", f"host {dst!r} as an SSH destination", _UPGRADE)
            if rule.check_period is not None and rule.action != "check":
                yield lint([*base, "checkPeriod"], "upgrade-0.29", "checkPeriod on a non-check rule", _UPGRADE)
            elif rule.check_period is not None and not _GO_DURATION_RE.fullmatch(rule.check_period):
                yield lint(
                    [*base, "checkPeriod"],
                    "upgrade-0.29",
                    f"checkPeriod {rule.check_period!r} is no Go duration",
                    _UPGRADE,
                )
            elif rule.check_period is not None and abs(_go_duration_ns(rule.check_period)) > _MAX_CHECK_PERIOD_NS:
                yield lint([*base, "checkPeriod"], "upgrade-0.29", "checkPeriod above 168h", _UPGRADE)
        for i, user in enumerate(rule.users):
            where = [*base, "users", i]
            if user in ("root", "autogroup:nonroot") or _LOGIN_RE.match(user):
                continue
            if version == "0.28" and user in ("", "*"):
                yield lint(where, "upgrade-0.29", f"SSH user {user!r}", _UPGRADE)
            elif user.startswith("localpart:") and _LOCALPART_RE.match(user) and version == "0.28":
                yield lint(
                    where,
                    "ssh-user-literal",
                    f"{user!r} is a literal login name on 0.28",
                    "no such login exists: localpart: mapping works from 0.29 on",
                )
            elif not _LOCALPART_RE.match(user):
                yield lint(
                    where,
                    "ssh-user-literal",
                    f"SSH user {user!r} is kept as a literal login name",
                    "it never matches a login on the destination (meant localpart:*@<domain> or autogroup:nonroot?)",
                )
    for index, grant in enumerate(policy.grants or ()):
        base = ["grants", index]
        if not grant.src or not grant.dst:
            yield lint(
                base,
                "empty-rule",
                "a grant with an empty src or dst grants nothing",
                "a rule that silently matches nothing hides a typo or an emptied list",
            )
        for i, entry in enumerate(grant.ip or ()):
            proto, ports = _parse_grant_ip(entry, version=version)
            if proto is not None and proto not in PORT_PROTOCOLS and ports != (ALL_PORTS,):
                yield lint(
                    [*base, "ip", i],
                    "port-on-portless",
                    f"{entry!r}: protocol {proto} has no ports",
                    "the ports are meaningless; the 0.28 ACL conversion refuses it",
                )
        for cap in grant.app or {}:
            if not _CAP_RE.match(cap):
                yield lint(
                    [*base, "app", cap],
                    "cap-format",
                    f"capability {cap!r} is not '<domain>/<path>'",
                    "Tailscale refuses it, and no client acts on it",
                )
    for index, attr in enumerate(policy.node_attrs or ()):
        if not attr.attr:
            yield lint(
                ["nodeAttrs", index],
                "empty-rule",
                "a nodeAttrs entry without attr does nothing",
                "a rule that silently does nothing hides a typo or an emptied list",
            )
        for i, name in enumerate(attr.attr or ()):
            if not _ATTR_RE.match(name):
                yield lint(
                    ["nodeAttrs", index, "attr", i],
                    "name-format",
                    f"node attribute {name!r} is unusual",
                    "clients ignore attributes they do not know",
                )


# ---------------------------------------------------------------------------------------------------------------
# Offline evaluation of tests and sshTests (0.29 semantics)


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


_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_ULA = ipaddress.ip_network("fd7a:115c:a1e0::/48")
#: The tailnet's own address ranges (Headscale supports no others).
TAILNET_RANGES: tuple[_Network, ...] = (_CGNAT, _ULA)


@dataclass(frozen=True, slots=True)
class _Atom:
    """A piece of a test's source or destination: a user's or tag's nodes, an address range, an autogroup."""

    kind: Literal["user", "tag", "ip", "member", "tagged", "self"]
    name: str = ""
    network: _Network | None = None

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


def _overlaps_tailnet(network: _Network) -> bool:
    return any(network.version == r.version and network.overlaps(r) for r in TAILNET_RANGES)  # type: ignore[arg-type]


def _in_wildcard(network: _Network) -> _T:
    """'*' on 0.29: the tailnet ranges (without ChromeOS's), plus approved subnet routes (live)."""
    if _overlaps_tailnet(network) and not (network.version == 4 and network.subnet_of(_CHROMEOS)):  # type: ignore[arg-type]
        return _T.YES
    return _T.MAYBE


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
            return [_Atom("ip", network=_CGNAT), _Atom("ip", network=_ULA)]
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
            if network is None:
                return _T.NO
            if atom.identity:
                return _T.MAYBE if _overlaps_tailnet(network) else _T.NO
            assert atom.network is not None
            return _T.YES if atom.network.version == network.version and atom.network.overlaps(network) else _T.NO  # type: ignore[arg-type]
        if not atom.identity:
            return _T.MAYBE if _overlaps_tailnet(atom.network) else _T.NO  # type: ignore[arg-type]
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
                proto, ports = _parse_grant_ip(entry, version="0.29")
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
                targets = [self.ssh_atoms(d, sources) for d in test.dst]
                if sources is None or any(t is None for t in targets):
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
        if user != "root" and any(_LOCALPART_RE.match(u) for u in users):
            return _T.MAYBE
        return _T.NO


# ---------------------------------------------------------------------------------------------------------------
# Grants → ACLs (for 0.28)

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
    base: list[str | int] = ["grants", index]
    before = len(problems)
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
    by_proto: dict[int | None, list[str]] = {}
    for position, entry in enumerate(grant.get("ip") or ()):
        proto, ports_range = _parse_grant_ip(entry, version="0.29")
        if proto is not None and proto not in PORT_PROTOCOLS and ports_range != (ALL_PORTS,):
            problems.append(
                PolicyProblem(format_path([*base, "ip", position]), f"protocol {proto} has no ports: write '{proto}:*'")
            )
            continue
        ports = "*" if entry == "*" else entry.rpartition(":")[2]
        texts = by_proto.setdefault(proto, [])
        if ports not in texts:
            texts.append(ports)
    if len(problems) > before or not grant.get("src") or not grant.get("dst"):
        return []
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
