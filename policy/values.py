"""Go's readings of the values a policy holds: integers, addresses, prefixes, aliases, ports, destinations,
protocols and durations, each parsed with the rules of Headscale's ``hscontrol/policy/v2`` for a minor.

The public readers (:func:`parse_alias`, :func:`parse_destination`, :func:`parse_ports`, :func:`parse_prefix`,
:func:`parse_network`, :func:`protocol_numbers`) give the typed reading of one value; the others are the
building blocks the normalisation, the schema's field rules, the semantics, the lints and the test evaluator share,
so each rule is written once. A reader raises ``ValueError`` with the reason; the callers add the path.
:func:`go_duration_ns` is also the components' count of a Go duration (the config's durations, Litestream's
knobs), and :data:`INT64_MAX` their Go int64 limit: this is the lowest layer every caller imports.
It depends on :mod:`.versions` and :mod:`.problems` only.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum

from headscale_ha.policy.problems import did_you_mean
from headscale_ha.policy.versions import headscale_minor

__all__ = [
    "ALL_PORTS",
    "AUTOGROUPS",
    "DEFAULT_PROTOCOLS",
    "GO_DURATION_RE",
    "INT64_MAX",
    "LOCALPART_RE",
    "MAX_CHECK_PERIOD_NS",
    "PORT_PROTOCOLS",
    "TAILNET_RANGES",
    "Alias",
    "AliasKind",
    "IpNetwork",
    "autogroup_problem",
    "canonical_prefix",
    "check_protocol",
    "could_be_user",
    "go_atoi",
    "go_duration_ns",
    "go_trim",
    "normalised_protocol",
    "overlapping_tailnet_range",
    "parse_alias",
    "parse_destination",
    "parse_go_duration_ns",
    "parse_grant_ip",
    "parse_network",
    "parse_ports",
    "parse_prefix",
    "prometheus_duration_ok",
    "protocol_number",
    "protocol_numbers",
    "protocol_takes_ports",
    "split_destination",
    "tag_name_problem",
    "validate_alias",
]

#: An IPv4 or IPv6 network, as :func:`parse_prefix` and :func:`parse_network` return it.
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# ---------------------------------------------------------------------------------------------------------------
# Integers, white space, addresses and prefixes

_ATOI_RE = re.compile(r"[+-]?[0-9]+")
#: Go's int64 (and so ``time.Duration``, a count of nanoseconds): the largest value.
INT64_MAX = 2**63 - 1


def go_atoi(text: str) -> int | None:
    """``strconv.Atoi``: optional sign, ASCII digits, int64 range; None when Go refuses the text."""
    if not _ATOI_RE.fullmatch(text):
        return None
    value = int(text)
    return value if -INT64_MAX - 1 <= value <= INT64_MAX else None


def go_trim(text: str) -> str:
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


def parse_prefix(text: str) -> tuple[IpNetwork, bool]:
    """Headscale's ``Prefix.parseString``: an address (→ /32 or /128) or a CIDR (``netip.ParsePrefix``: bits in
    decimal without leading zeros, host bits allowed). Returns the masked network and whether it was a bare address.
    """
    if "/" not in text:
        address = _go_addr(text)
        return ipaddress.ip_network(f"{address}/{address.max_prefixlen}"), True
    address_text, _, bits_text = text.rpartition("/")
    address = _go_addr(address_text)
    bits = go_atoi(bits_text) if not (len(bits_text) > 1 and not "1" <= bits_text[0] <= "9") else None
    if bits is None or not 0 <= bits <= address.max_prefixlen:
        raise ValueError(f"{text!r} is not a valid CIDR: bad prefix length {bits_text!r}")
    return ipaddress.ip_network(f"{address}/{bits}", strict=False), False


def canonical_prefix(text: str) -> str | None:
    """The canonical spelling Headscale understands (``10.0.0.1/8`` → ``10.0.0.0/8``), or None if not a prefix."""
    try:
        network, bare = parse_prefix(text)
    except ValueError:
        return None
    return str(network.network_address) if bare else str(network)


def parse_network(text: str) -> IpNetwork:
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


#: The tailnet's own address ranges (Headscale supports no others).
TAILNET_RANGES: tuple[IpNetwork, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),
    ipaddress.ip_network("fd7a:115c:a1e0::/48"),
)


def overlapping_tailnet_range(network: IpNetwork) -> IpNetwork | None:
    """The tailnet range that ``network`` overlaps (a network of the other IP version overlaps none), or None."""
    for tailnet in TAILNET_RANGES:
        if network.version == tailnet.version and network.overlaps(tailnet):  # type: ignore[arg-type]
            return tailnet
    return None


# ---------------------------------------------------------------------------------------------------------------
# Aliases


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
    network: IpNetwork | None = None


#: The autogroups each minor knows.
AUTOGROUPS = {
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


_BARE_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")


def could_be_user(text: str) -> bool:
    """Whether a text without ``@`` reads as a user name once ``@`` is added (the hint a refusal gives)."""
    return _BARE_NAME_RE.fullmatch(text) is not None


def tag_name_problem(text: str, version: str) -> str | None:
    """Headscale's ``Tag.Validate``: the ``tag:`` prefix; from 0.29 also an ASCII letter right after it."""
    if not text.startswith("tag:"):
        return f"{text!r} is not a tag: write 'tag:<name>'"
    rest = text[4:]
    if version >= "0.29" and not (rest and rest[0].isascii() and rest[0].isalpha()):
        return f"{text!r}: a tag name starts with a letter after 'tag:' (Headscale 0.29)"
    return None


def validate_alias(alias: Alias, version: str) -> None:
    """Headscale's ``Alias.Validate`` (run on ACL and test destinations): known autogroups, 0.29 tag names."""
    if alias.kind is AliasKind.AUTOGROUP and alias.text not in AUTOGROUPS[version]:
        raise ValueError(autogroup_problem(alias.text, version))
    if alias.kind is AliasKind.TAG and (problem := tag_name_problem(alias.text, version)):
        raise ValueError(problem)


def autogroup_problem(text: str, version: str) -> str:
    known = AUTOGROUPS[version]
    if text in AUTOGROUPS["0.29"]:
        return f"{text!r} needs Headscale 0.29 (target is {version})"
    if text in _FOREIGN_AUTOGROUPS:
        return f"{text!r} is a Tailscale autogroup that Headscale does not support"
    return f"unknown autogroup {text!r}{did_you_mean(text, known)}"


# ---------------------------------------------------------------------------------------------------------------
# Ports and destinations

#: The port wildcard ``*`` as a range.
ALL_PORTS = (0, 65535)


def _go_port(text: str) -> int:
    value = go_atoi(text)
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


def split_destination(text: str, version: str) -> tuple[str, str]:
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
    alias_text, ports_text = split_destination(text, minor)
    ports = parse_ports(ports_text)
    alias = parse_alias(alias_text, version=minor)
    validate_alias(alias, minor)
    return alias, ports


# ---------------------------------------------------------------------------------------------------------------
# Protocols

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


def check_protocol(text: str, version: str) -> None:
    """Headscale's ``Protocol.validate`` on an already lower-cased text: '', a name, or 0-255 without leading 0."""
    if text == "" or text in _PROTOCOLS[version]:
        return
    if text == "*":
        raise ValueError("'*' is not a protocol: leave the protocol out for the default set")
    if text == "0" or (len(text) > 1 and text[0] == "0"):
        raise ValueError(f"protocol number {text!r}: leading zeros are not permitted (and 0 is not a protocol)")
    number = go_atoi(text)
    if number is None:
        if text in _PROTOCOLS["0.29"]:
            numbers = _PROTOCOLS["0.29"][text]
            raise ValueError(
                f"{text!r} is a protocol name from Headscale 0.29 on (target is {version}); write {str(numbers[0])!r}"
            )
        raise ValueError(
            f"unknown protocol {text!r}{did_you_mean(text, _PROTOCOLS[version])} (or give the IANA number 1-255)"
        )
    if not 0 <= number <= 255:
        raise ValueError(f"protocol number {text!r} is out of range (0-255)")


def normalised_protocol(text: str, version: str) -> str:
    """What ``Protocol.UnmarshalJSON`` keeps: lower case; on 0.29 a known number becomes its name."""
    lowered = text.lower()
    if version >= "0.29":
        number = go_atoi(lowered)
        if number is not None and number in _NUMBER_TO_NAME:
            return _NUMBER_TO_NAME[number]
    return lowered


def protocol_numbers(text: str, *, version: str) -> frozenset[int] | None:
    """The IANA numbers a protocol text allows on ``version`` (None: the default set, for '' or no protocol)."""
    minor = headscale_minor(version)
    text = normalised_protocol(text, minor)
    check_protocol(text, minor)
    if text == "":
        return None
    if text in _PROTOCOLS[minor]:
        return frozenset(_PROTOCOLS[minor][text])
    number = go_atoi(text)
    assert number is not None
    return frozenset({number})


def protocol_number(text: str, *, version: str) -> int:
    """The main IANA number of a protocol (``icmp`` → 1 on both minors); '' is refused here."""
    numbers = protocol_numbers(text, version=version)
    if numbers is None:
        raise ValueError("an empty protocol is the default set, not one number")
    return min(numbers)


def protocol_takes_ports(proto: str) -> bool:
    """Headscale allows specific ports only for the literal texts '', tcp, udp, sctp (0.28 compares the text); a
    test names one port, so these are also the only protocols a test takes."""
    return proto in ("", "tcp", "udp", "sctp")


def parse_grant_ip(text: str, *, version: str) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """A grant ``ip`` entry as Headscale's ``ProtocolPort``: ``*``, ``<ports>`` or ``<proto>:<ports>`` (the
    protocol is not lower-cased here). Returns (protocol number, None for every protocol; port ranges)."""
    if text == "*":
        return None, (ALL_PORTS,)
    if ":" not in text:
        return None, parse_ports(text)
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"{text!r} has more than one ':'; write '<proto>:<ports>'")
    check_protocol(parts[0], version)
    ports = parse_ports(parts[1])
    if parts[0] == "":
        return None, ports
    numbers = protocol_numbers(parts[0], version=version)
    assert numbers is not None
    return min(numbers), ports


# ---------------------------------------------------------------------------------------------------------------
# Durations (Go's: a 0.29 checkPeriod and the components' durations; Prometheus's: a 0.28 checkPeriod), SSH logins

_GO_UNITS = "ns|us|\u00b5s|\u03bcs|ms|s|m|h"
#: Go ``time.ParseDuration``'s grammar: an optional sign, then ``0`` or ``<number><unit>`` parts (a number has
#: digits before or after its point). Digits as Python's ``\d`` reads them: see :func:`go_duration_ns`.
_GO_DURATION = rf"[+-]?(?:0|(?:(?:\d+(?:\.\d*)?|\.\d+)(?:{_GO_UNITS}))+)"
#: The same grammar with Go's ASCII digits only: a text Headscale reads as a duration (0.29 checkPeriod).
GO_DURATION_RE = re.compile(rf"^{_GO_DURATION}$", re.ASCII)
_GO_DURATION_TEXT = re.compile(_GO_DURATION)
_GO_DURATION_PART = re.compile(rf"(\d*)(?:\.(\d*))?({_GO_UNITS})")
_GO_UNIT_NS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_GO_UNIT_NS["h"] = 3600 * 10**9
#: Go counts a duration's parts in a uint64 and refuses a sum above 2^63 (a negative duration may reach -2^63).
_GO_DURATION_BOUND = 1 << 63
#: Prometheus ``model.ParseDuration`` (0.28 checkPeriod): units y w d h m s ms, biggest first, each once.
_PROM_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_PROM_DURATION_RE = re.compile("^" + "".join(rf"(?:([0-9]+){unit})?" for unit in _PROM_UNITS) + "$")
_PROM_UNIT_MS = (365 * 86400000, 7 * 86400000, 86400000, 3600000, 60000, 1000, 1)
#: The longest checkPeriod 0.29 takes (168h).
MAX_CHECK_PERIOD_NS = 168 * 3600 * 10**9


def go_duration_ns(text: str) -> int:
    """Nanoseconds of a Go duration, counted and refused as Go's ``time.ParseDuration`` counts and refuses them.

    Each part's whole number counts exactly; its fraction counts through float64 and is truncated to whole
    nanoseconds (digits past uint64's precision dropped), as Go does. Go refuses a part or a running sum above 2^63
    ns, and a positive total above 2^63-1: ``ValueError("duration '<text>' overflows")`` (its uint64 sum of two
    parts of exactly 2^63 wraps to 0, and so does this). A text outside the grammar raises ``ValueError`` too.

    The one reader of a duration's value for every caller; each caller checks the syntax it accepts first (the
    policy's checkPeriod: :data:`GO_DURATION_RE`, Go's own; the config's durations: no sign or µs; Litestream's
    knobs: Go's). Digits are read as Python's ``\\d`` reads them, because two of those syntaxes admit any Unicode
    decimal digit; Go reads ASCII digits only, as :data:`GO_DURATION_RE` does.
    """
    if not _GO_DURATION_TEXT.fullmatch(text):
        raise _not_a_go_duration(text)
    total = 0
    for whole, fraction, unit in _GO_DURATION_PART.findall(text.lstrip("+-")):
        part = _go_duration_part_ns(whole, fraction, _GO_UNIT_NS[unit])
        # Go's sum is a uint64: 2^63 + 2^63 wraps to 0 (and Go then reads on), anything else above 2^63 overflows.
        total = (total + part) % 2**64 if part <= _GO_DURATION_BOUND else part
        if total > _GO_DURATION_BOUND:
            raise ValueError(f"duration {text!r} overflows")
    if text.startswith("-"):
        return -total
    if total > INT64_MAX:
        raise ValueError(f"duration {text!r} overflows")
    return total


def _not_a_go_duration(text: str) -> ValueError:
    return ValueError(f"{text!r} is not a Go duration like '12h', '30m' or '1h30m'")


def _go_duration_part_ns(whole: str, fraction: str, unit: int) -> int:
    """One ``<number><unit>`` part as Go counts it: the whole number times the unit, exactly, plus the fraction as
    float64 arithmetic truncates it. Any value above 2^63 is an overflow to Go (the caller refuses it), so the
    whole number stops being read once it is past that."""
    value = 0
    for digit in whole:
        value = value * 10 + int(digit)
        if value > _GO_DURATION_BOUND:
            break
    value *= unit
    numerator, scale = 0, 1.0
    for digit in fraction:  # Go's leadingFraction: the digits from the first that would overflow a uint64 are dropped
        if numerator > INT64_MAX // 10 or numerator * 10 + int(digit) > _GO_DURATION_BOUND:
            break
        numerator, scale = numerator * 10 + int(digit), scale * 10
    if numerator > 0:
        value += int(float(numerator) * (float(unit) / scale))
    return value


def parse_go_duration_ns(text: str) -> int:
    """Nanoseconds of a duration Headscale reads (0.29 checkPeriod): Go's grammar (:data:`GO_DURATION_RE`) and
    :func:`go_duration_ns`'s count; ``ValueError`` with the reason when Go refuses the text."""
    if not GO_DURATION_RE.fullmatch(text):
        raise _not_a_go_duration(text)
    return go_duration_ns(text)


def prometheus_duration_ok(text: str) -> bool:
    """Whether 0.28 reads the text as a checkPeriod: Prometheus ``model.ParseDuration``, within int64 ns."""
    if text == "0":
        return True
    match = _PROM_DURATION_RE.fullmatch(text)
    if not text or match is None:
        return False
    total_ms = sum(int(value or 0) * unit for value, unit in zip(match.groups(), _PROM_UNIT_MS, strict=True))
    return total_ms * 10**6 <= INT64_MAX


#: ``localpart:*@<domain>``: an SSH user that 0.29 maps to the local part of each user's e-mail in that domain.
LOCALPART_RE = re.compile(r"^localpart:\*@[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
