"""Pydantic model of the Headscale tailnet policy for Headscale 0.28 and 0.29, and grants→ACL conversion.

Headscale only checks a policy when it is written, which is too late for ``pulumi preview``. This model refuses,
before anything is deployed, what the target Headscale minor refuses, with one problem per offending value and
its JSON path. On top of Headscale's own rules it also refuses, for both minors, what 0.29 added as a
rejection to features that already existed (wildcard SSH users, hosts as SSH destinations, ``checkPeriod`` on
accept rules, ``autogroup:self`` reached from tags): a policy accepted for 0.28 then survives the 0.28→0.29
upgrade. Features that are new in 0.29 (grants, nodeAttrs, tests, sshTests, randomizeClientPort, acceptEnv,
``autogroup:danger-all``, ``localpart:`` SSH users, ``checkPeriod: always``, the protocol names ``ipv6-icmp`` and
``fc``) are refused on 0.28 with an error that names the version.

Strings are kept as written (the model is a validated view, not a resolver); the helpers ``parse_alias``,
``parse_destination``, ``parse_ports`` and ``protocol_number`` give their typed reading.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import json5
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = [
    "SUPPORTED_VERSIONS",
    "Acl",
    "Alias",
    "AliasKind",
    "AutoApprovers",
    "Grant",
    "NodeAttr",
    "Policy",
    "PolicyError",
    "PolicyProblem",
    "PolicyTest",
    "SshPolicyTest",
    "SshRule",
    "format_path",
    "grants_to_acls",
    "headscale_minor",
    "load_hujson",
    "parse_alias",
    "parse_destination",
    "parse_policy",
    "parse_ports",
    "policy_document",
    "protocol_number",
    "validate_policy",
]

#: Headscale minors this model speaks.
SUPPORTED_VERSIONS: tuple[str, ...] = ("0.28", "0.29")

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def headscale_minor(version: str) -> str:
    """``"0.29.2"``, ``"v0.29.2"`` or ``"0.29"`` → ``"0.29"``; anything this model does not speak is refused."""
    match = _VERSION_RE.match(version) if isinstance(version, str) else None
    minor = f"{int(match[1])}.{int(match[2])}" if match else None
    if minor not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported Headscale version {version!r}: the policy model speaks {SUPPORTED_VERSIONS}")
    return minor


# ---------------------------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One bad value: where it is (``acls[2].dst[0]``) and why it is refused."""

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
    """A ``; did you mean 'x'?`` suffix when a candidate is close (case-insensitive first), else nothing.

    Prefixes such as ``tag:`` are compared apart, so ``tag:none`` is not "close" to ``tag:node-x`` by its prefix.
    """
    pool = sorted(set(candidates))
    folded = [c for c in pool if c.lower() == word.lower()]
    if folded:
        return f"; did you mean {folded[0]!r}?"
    prefix = word.split(":", 1)[0] + ":" if ":" in word else ""
    names = {c[len(prefix) :]: c for c in pool if c.startswith(prefix)}
    close = difflib.get_close_matches(word[len(prefix) :], list(names), n=1, cutoff=0.6)
    return f"; did you mean {names[close[0]]!r}?" if close else ""


# ---------------------------------------------------------------------------------------------------------------
# Syntax of the values (version-aware, raise ValueError with the reason)

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_USER_RE = re.compile(r"^[^\s@:,]+@[^\s@:,]*$")
_GROUP_RE = re.compile(r"^group:[A-Za-z0-9][A-Za-z0-9._-]*$")
_TAG_RE = re.compile(r"^tag:[A-Za-z][A-Za-z0-9-]*$")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_IP_LIKE_RE = re.compile(r"^(?:[0-9.]+|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*)(?:/\d+)?$")

_AUTOGROUPS = {
    "0.28": frozenset(
        {"autogroup:internet", "autogroup:member", "autogroup:tagged", "autogroup:self", "autogroup:nonroot"}
    ),
    "0.29": frozenset(
        {
            "autogroup:internet",
            "autogroup:member",
            "autogroup:tagged",
            "autogroup:self",
            "autogroup:nonroot",
            "autogroup:danger-all",
        }
    ),
}
#: Tailscale autogroups Headscale does not implement.
_FOREIGN_AUTOGROUPS = frozenset({"autogroup:admin", "autogroup:owner", "autogroup:it-admin", "autogroup:shared"})

_PROTOCOLS_028: dict[str, int] = {
    "icmp": 1,
    "igmp": 2,
    "ipv4": 4,
    "ip-in-ip": 4,
    "tcp": 6,
    "egp": 8,
    "igp": 9,
    "udp": 17,
    "gre": 47,
    "esp": 50,
    "ah": 51,
    "sctp": 132,
}
_PROTOCOLS = {"0.28": _PROTOCOLS_028, "0.29": {**_PROTOCOLS_028, "ipv6-icmp": 58, "fc": 133}}
#: Protocols with ports; every other protocol only takes the port wildcard ``*``.
PORT_PROTOCOLS = frozenset({6, 17, 132})

#: The tailnet's own address ranges (Headscale supports no others).
TAILNET_RANGES: tuple[_Network, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),
    ipaddress.ip_network("fd7a:115c:a1e0::/48"),
)


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
    """A parsed alias: its kind and the text as written."""

    kind: AliasKind
    text: str


def parse_network(text: str) -> _Network:
    """A canonical IP (→ /32 or /128) or CIDR; host bits or a non-canonical spelling are refused with the fix."""
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


def parse_alias(text: str, *, version: str) -> Alias:
    """Classify an alias the way Headscale does: IP/CIDR first, then ``@`` users, prefixes, else a host name."""
    if text == "*":
        return Alias(AliasKind.WILDCARD, text)
    if not text or text != text.strip():
        raise ValueError(f"{text!r} is empty or padded with whitespace")
    if _IP_LIKE_RE.match(text):
        parse_network(text)
        return Alias(AliasKind.PREFIX, text)
    if "@" in text:
        if not _USER_RE.match(text):
            raise ValueError(f"{text!r} is not a valid user: write 'name@' or 'name@domain'")
        return Alias(AliasKind.USER, text)
    if text.startswith("group:"):
        if not _GROUP_RE.match(text):
            raise ValueError(f"{text!r} is not a valid group name (group:<letters, digits, '.', '_', '-'>)")
        return Alias(AliasKind.GROUP, text)
    if text.startswith("tag:"):
        if not _TAG_RE.match(text):
            raise ValueError(f"{text!r} is not a valid tag: after 'tag:' a letter, then letters, digits or '-'")
        return Alias(AliasKind.TAG, text)
    if text.startswith("autogroup:"):
        known = _AUTOGROUPS[version]
        if text in known:
            return Alias(AliasKind.AUTOGROUP, text)
        if text in _AUTOGROUPS["0.29"]:
            raise ValueError(f"{text!r} needs Headscale 0.29 (target is {version})")
        if text in _FOREIGN_AUTOGROUPS:
            raise ValueError(f"{text!r} is a Tailscale autogroup that Headscale does not support")
        raise ValueError(f"unknown autogroup {text!r}{_did_you_mean(text, known)}")
    if ":" in text or not _HOST_RE.match(text):
        raise ValueError(
            f"{text!r} is not an alias (user@, group:…, tag:…, autogroup:…, a host name from hosts, an IP or a CIDR)"
        )
    return Alias(AliasKind.HOST, text)


_PORT_ITEM_RE = re.compile(r"^([1-9][0-9]{0,4})(?:-([1-9][0-9]{0,4}))?$")

#: The port wildcard ``*`` as a range.
ALL_PORTS = (0, 65535)


def parse_ports(text: str) -> tuple[tuple[int, int], ...]:
    """``*`` (→ 0-65535), ``N``, ``N-M`` or a comma list of those, with 0 < N <= M <= 65535."""
    if text == "*":
        return (ALL_PORTS,)
    ranges: list[tuple[int, int]] = []
    for item in text.split(","):
        where = "" if item == text else f" in {text!r}"
        match = _PORT_ITEM_RE.match(item)
        if not match:
            raise ValueError(f"invalid port {item!r}{where}: use '*', N, N-M or a comma list of those (1-65535)")
        first, last = int(match[1]), int(match[2] or match[1])
        if last > 65535:
            raise ValueError(f"port {last}{where} is above 65535")
        if first > last:
            raise ValueError(f"port range {item!r}{where} is inverted")
        ranges.append((first, last))
    return tuple(ranges)


def protocol_number(text: str, *, version: str) -> int:
    """IANA number of a protocol as Headscale reads it: a known name, or a number 1-255 without leading zeros."""
    names = _PROTOCOLS[version]
    if text in names:
        return names[text]
    if re.fullmatch(r"[1-9][0-9]{0,2}", text) and int(text) <= 255:
        return int(text)
    if text == "*":
        raise ValueError("'*' is not a protocol: leave the protocol out for the default set")
    if text.lower() in names:
        raise ValueError(f"write the protocol {text!r} in lower case: {text.lower()!r}")
    if text in _PROTOCOLS["0.29"]:
        number = _PROTOCOLS["0.29"][text]
        raise ValueError(
            f"{text!r} is a protocol name from Headscale 0.29 on (target is {version}); write {str(number)!r}"
        )
    if re.fullmatch(r"[0-9]+", text):
        raise ValueError(f"protocol number {text!r} must be 1-255 without leading zeros")
    raise ValueError(f"unknown protocol {text!r}{_did_you_mean(text, names)} (or give the IANA number 1-255)")


def parse_destination(text: str, *, version: str) -> tuple[Alias, tuple[tuple[int, int], ...]]:
    """``<alias>:<ports>`` (split at the last colon, as Headscale does): the alias and its port ranges."""

    def needs_ports() -> ValueError | None:
        try:
            parse_alias(text, version=version)
        except ValueError:
            return None
        return ValueError(f"destination {text!r} has no ports: write '{text}:*' or '{text}:<port>'")

    cut = text.rfind(":")
    if cut <= 0 or cut == len(text) - 1:
        raise needs_ports() or ValueError(f"{text!r} is not '<alias>:<ports>'")
    alias_text, ports_text = text[:cut], text[cut + 1 :]
    if alias_text.startswith("["):
        raise ValueError(f"write IPv6 destinations without brackets, e.g. 'fd7a:115c:a1e0::1:443' (got {text!r})")
    try:
        ports = parse_ports(ports_text)
        alias = parse_alias(alias_text, version=version)
    except ValueError as exc:
        raise needs_ports() or exc from None
    return alias, ports


def _parse_grant_ip(text: str, *, version: str) -> tuple[int | None, tuple[tuple[int, int], ...]]:
    """A grant ``ip`` entry ``*``, ``<ports>`` or ``<proto>:<ports>`` → (protocol, None for the default set; ports)."""
    if text == "*":
        return None, (ALL_PORTS,)
    if ":" not in text:
        return None, parse_ports(text)
    proto_text, _, ports_text = text.partition(":")
    if ":" in ports_text:
        raise ValueError(f"{text!r} has more than one ':'; write '<proto>:<ports>'")
    proto = protocol_number(proto_text, version=version)
    ports = parse_ports(ports_text)
    if proto not in PORT_PROTOCOLS and ports != (ALL_PORTS,):
        raise ValueError(f"protocol {proto_text!r} has no ports: write '{proto_text}:*'")
    return proto, ports


# ---------------------------------------------------------------------------------------------------------------
# Where each alias may appear


@dataclass(frozen=True, slots=True)
class _Slot:
    """A position in the policy that takes aliases: its name, the kinds and the autogroups it accepts."""

    where: str
    kinds: frozenset[AliasKind]
    autogroups: frozenset[str] = frozenset()

    def check(self, text: str, version: str) -> Alias:
        alias = parse_alias(text, version=version)
        if alias.kind is AliasKind.WILDCARD and self.where == "an SSH destination":
            raise ValueError(
                "'*' is not an SSH destination (since 0.28): use autogroup:member, autogroup:tagged or tags"
            )
        if alias.kind is AliasKind.HOST and self.where == "an SSH destination":
            raise ValueError(f"host {text!r} cannot be an SSH destination (Headscale 0.29 refuses hosts here)")
        if alias.kind is AliasKind.GROUP and self.where == "a group":
            raise ValueError(f"groups cannot contain groups ({text!r}); list its users instead")
        if alias.kind not in self.kinds:
            allowed = ", ".join(kind.value for kind in AliasKind if kind in self.kinds)
            hint = f"; users must contain '@': write '{text}@'" if alias.kind is AliasKind.HOST else ""
            raise ValueError(f"{text!r} ({alias.kind.value}) cannot be used in {self.where} (allowed: {allowed}){hint}")
        if alias.kind is AliasKind.AUTOGROUP and text not in self.autogroups:
            allowed = ", ".join(sorted(self.autogroups)) or "none"
            raise ValueError(f"{text!r} cannot be used in {self.where} (autogroups allowed there: {allowed})")
        return alias


_K = AliasKind
_IP_KINDS = frozenset({_K.USER, _K.GROUP, _K.TAG, _K.HOST, _K.PREFIX, _K.WILDCARD, _K.AUTOGROUP})
_PRINCIPALS = frozenset({_K.USER, _K.GROUP, _K.TAG})
_SRC_AUTOGROUPS = frozenset({"autogroup:member", "autogroup:tagged", "autogroup:danger-all"})
_DST_AUTOGROUPS = frozenset({"autogroup:internet", "autogroup:member", "autogroup:tagged", "autogroup:self"})

_ACL_SRC = _Slot("a source", _IP_KINDS, _SRC_AUTOGROUPS)
_ACL_DST = _Slot("a destination", _IP_KINDS, _DST_AUTOGROUPS)
_VIA = _Slot("via", frozenset({_K.TAG}))
_SSH_SRC = _Slot(
    "an SSH source", frozenset({*_PRINCIPALS, _K.AUTOGROUP}), frozenset({"autogroup:member", "autogroup:tagged"})
)
_SSH_DST = _Slot(
    "an SSH destination",
    frozenset({_K.USER, _K.TAG, _K.AUTOGROUP}),
    frozenset({"autogroup:member", "autogroup:tagged", "autogroup:self"}),
)
_OWNER = _Slot("tagOwners", _PRINCIPALS)
_APPROVER = _Slot("autoApprovers", _PRINCIPALS)
_MEMBER = _Slot("a group", frozenset({_K.USER}))
_TARGET = _Slot("a nodeAttrs target", _IP_KINDS, frozenset({"autogroup:member", "autogroup:tagged"}))
_TEST_SRC = _Slot("a test source", frozenset({*_PRINCIPALS, _K.HOST, _K.PREFIX}))
_TEST_DST = _Slot("a test destination", frozenset({*_PRINCIPALS, _K.HOST, _K.PREFIX}))
_SSH_TEST_DST = _Slot(
    "an sshTests destination",
    frozenset({_K.TAG, _K.HOST, _K.PREFIX, _K.AUTOGROUP}),
    frozenset({"autogroup:member", "autogroup:tagged", "autogroup:self"}),
)


def _check_acl_dst(text: str, version: str) -> None:
    alias, _ = parse_destination(text, version=version)
    _ACL_DST.check(alias.text, version)


def _check_test_dst(text: str, version: str) -> None:
    alias, ports = parse_destination(text, version=version)
    _TEST_DST.check(alias.text, version)
    if len(ports) != 1 or ports[0][0] != ports[0][1]:
        raise ValueError(f"a test destination names one port ({text!r})")
    if alias.kind is AliasKind.PREFIX and "/" in alias.text:
        raise ValueError(f"a test destination names one host, not a CIDR ({text!r})")


def _check_ssh_test_dst(text: str, version: str) -> None:
    alias = _SSH_TEST_DST.check(text, version)
    if alias.kind is AliasKind.PREFIX and parse_network(text).num_addresses != 1:
        raise ValueError(f"an sshTests destination names one host, not a CIDR ({text!r})")


def _check_group_name(text: str, version: str) -> None:
    if parse_alias(text, version=version).kind is not AliasKind.GROUP:
        raise ValueError(f"group names start with 'group:' ({text!r})")


def _check_tag_name(text: str, version: str) -> None:
    if parse_alias(text, version=version).kind is not AliasKind.TAG:
        raise ValueError(f"tagOwners keys are tags ('tag:<name>'), not {text!r}")


def _check_host_name(text: str, version: str) -> None:
    try:
        kind = parse_alias(text, version=version).kind.value
    except ValueError:
        kind = "not an alias"
    if kind != AliasKind.HOST.value:
        raise ValueError(f"{text!r} cannot be a host name ({kind}); use letters, digits, '.', '_', '-'")


def _check_network(text: str, version: str) -> None:
    parse_network(text)


def _check_route(text: str, version: str) -> None:
    if "/" not in text:
        raise ValueError(f"routes are CIDRs: write '{text}/{parse_network(text).prefixlen}'")
    parse_network(text)


def _check_acl_proto(text: str, version: str) -> None:
    protocol_number(text, version=version)


def _check_test_proto(text: str, version: str) -> None:
    if protocol_number(text, version=version) not in PORT_PROTOCOLS:
        raise ValueError(f"tests only take tcp, udp or sctp (got {text!r})")


def _check_grant_ip(text: str, version: str) -> None:
    _parse_grant_ip(text, version=version)


_LOGIN_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_LOCALPART_RE = re.compile(r"^localpart:\*@[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def _check_ssh_user(text: str, version: str) -> None:
    if text in ("root", "autogroup:nonroot"):
        return
    if text.startswith("autogroup:"):
        raise ValueError(f"{text!r} is not an SSH user; the only autogroup here is autogroup:nonroot")
    if text.startswith("localpart:"):
        if version == "0.28":
            raise ValueError(f"{text!r}: localpart: SSH users need Headscale 0.29 (target is 0.28)")
        if not _LOCALPART_RE.match(text):
            raise ValueError(f"{text!r}: write 'localpart:*@<domain>'")
        return
    if text in ("", "*"):
        raise ValueError(f"{text!r} is not an SSH user: list the login names (or autogroup:nonroot)")
    if "@" in text:
        raise ValueError(f"{text!r}: SSH users are login names on the destination (root, ubuntu, autogroup:nonroot)")
    if not _LOGIN_RE.match(text):
        raise ValueError(f"{text!r} is not a login name")


_DURATION_RE = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_MAX_CHECK_PERIOD_SECONDS = 168 * 3600


def _check_check_period(text: str, version: str) -> None:
    if text == "always":
        if version == "0.28":
            raise ValueError("checkPeriod 'always' needs Headscale 0.29 (target is 0.28)")
        return
    match = _DURATION_RE.match(text)
    if not text or not match:
        raise ValueError(f"checkPeriod {text!r} is not a duration like '12h', '30m' or '1h30m'")
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    if hours * 3600 + minutes * 60 + seconds > _MAX_CHECK_PERIOD_SECONDS:
        raise ValueError(f"checkPeriod {text!r} is above the maximum of 168h")


_ENV_RE = re.compile(r"^[A-Za-z0-9_*?]+$")
_ATTR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._/-]*$")
_CAP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*/\S+$")
#: tailscale.com capabilities a policy may grant (Headscale refuses the rest of that domain).
_TAILSCALE_CAPS = frozenset(
    f"tailscale.com/cap/{name}" for name in ("drive", "relay", "webui", "kubernetes", "tsidp", "secrets")
)


def _check_env(text: str, version: str) -> None:
    if not _ENV_RE.match(text):
        raise ValueError(f"acceptEnv entry {text!r} is not a variable name pattern")


def _check_attr(text: str, version: str) -> None:
    if text == "funnel":
        raise ValueError("the 'funnel' node attribute is refused by Headscale (Funnel is not implemented)")
    if not _ATTR_RE.match(text):
        raise ValueError(f"{text!r} is not a node attribute")


def _check_cap(text: str, version: str) -> None:
    if "://" in text or not _CAP_RE.match(text):
        raise ValueError(f"capability {text!r} must have the form '<domain>/<path>'")
    if text.startswith("tailscale.com/") and text not in _TAILSCALE_CAPS:
        raise ValueError(f"capability {text!r} is in the tailscale.com domain and not grantable by a policy")


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


def _slot(slot: _Slot) -> AfterValidator:
    return _rule(slot.check)


AclSrc = Annotated[str, _slot(_ACL_SRC)]
AclDst = Annotated[str, _rule(_check_acl_dst)]
GrantDst = Annotated[str, _slot(_ACL_DST)]
ViaTag = Annotated[str, _slot(_VIA)]
SshSrc = Annotated[str, _slot(_SSH_SRC)]
SshDst = Annotated[str, _slot(_SSH_DST)]
SshUser = Annotated[str, _rule(_check_ssh_user)]
Owner = Annotated[str, _slot(_OWNER)]
Approver = Annotated[str, _slot(_APPROVER)]
GroupMember = Annotated[str, _slot(_MEMBER)]
GroupName = Annotated[str, _rule(_check_group_name)]
TagName = Annotated[str, _rule(_check_tag_name)]
HostName = Annotated[str, _rule(_check_host_name)]
Network = Annotated[str, _rule(_check_network)]
Route = Annotated[str, _rule(_check_route)]
Proto = Annotated[str, _rule(_check_acl_proto)]
TestProto = Annotated[str, _rule(_check_test_proto)]
GrantIp = Annotated[str, _rule(_check_grant_ip)]
CheckPeriod = Annotated[str, _rule(_check_check_period)]
EnvName = Annotated[str, _rule(_check_env)]
NodeAttrName = Annotated[str, _rule(_check_attr)]
Target = Annotated[str, _slot(_TARGET)]
TestSrc = Annotated[str, _slot(_TEST_SRC)]
TestDst = Annotated[str, _rule(_check_test_dst)]
SshTestDst = Annotated[str, _rule(_check_ssh_test_dst)]
CapName = Annotated[str, _rule(_check_cap)]


# ---------------------------------------------------------------------------------------------------------------
# The model


class _Strict(BaseModel):
    """No coercion, no unknown keys, immutable: the document is taken exactly as written or refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)


class Acl(_Strict):
    """An ACL rule: ``src`` may reach ``dst`` (``alias:ports``) over ``proto`` (default set when absent)."""

    action: Literal["accept"]
    proto: Proto | None = None
    src: list[AclSrc] = Field(min_length=1)
    dst: list[AclDst] = Field(min_length=1)


class Grant(_Strict):
    """A grant (0.29): IP-level access (``ip``), application capabilities (``app``) and route steering (``via``)."""

    src: list[AclSrc] = Field(min_length=1)
    dst: list[GrantDst] = Field(min_length=1)
    ip: list[GrantIp] | None = Field(default=None, min_length=1)
    app: dict[CapName, list[Any]] | None = None
    via: list[ViaTag] | None = Field(default=None, min_length=1)


class SshRule(_Strict):
    """A Tailscale SSH rule; ``check`` re-authenticates on 0.29 and behaves like ``accept`` on 0.28."""

    action: Literal["accept", "check"]
    src: list[SshSrc] = Field(min_length=1)
    dst: list[SshDst] = Field(min_length=1)
    users: list[SshUser] = Field(min_length=1)
    check_period: CheckPeriod | None = Field(default=None, alias="checkPeriod")
    accept_env: list[EnvName] | None = Field(default=None, alias="acceptEnv", min_length=1)


class AutoApprovers(_Strict):
    """Who may get advertised routes (per CIDR) or exit-node status approved without an operator."""

    routes: dict[Route, list[Approver]] | None = None
    exit_node: list[Approver] | None = Field(default=None, alias="exitNode")


class NodeAttr(_Strict):
    """Node capabilities handed to every node matching ``target`` (0.29)."""

    target: list[Target] = Field(min_length=1)
    attr: list[NodeAttrName] = Field(min_length=1)


class PolicyTest(_Strict):
    """A reachability assertion Headscale evaluates when the policy is written (0.29)."""

    src: TestSrc
    proto: TestProto | None = None
    accept: list[TestDst] | None = None
    deny: list[TestDst] | None = None


class SshPolicyTest(_Strict):
    """An SSH reachability assertion per login user (0.29)."""

    src: TestSrc
    dst: list[SshTestDst] = Field(min_length=1)
    accept: list[SshUser] | None = None
    deny: list[SshUser] | None = None
    check: list[SshUser] | None = None


class Policy(_Strict):
    """A Headscale policy document; build it with :func:`validate_policy` (the version is part of the rules)."""

    groups: dict[GroupName, list[GroupMember]] | None = None
    hosts: dict[HostName, Network] | None = None
    tag_owners: dict[TagName, list[Owner]] | None = Field(default=None, alias="tagOwners")
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


def load_hujson(text: str) -> Any:
    """Parse HuJSON (JSON with comments and trailing commas) with json5; duplicate keys are refused like Headscale."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json5.loads(text, allow_duplicate_keys=False, parse_constant=no_constants)
    except ValueError as exc:
        raise PolicyError([PolicyProblem("(root)", f"not valid HuJSON: {exc}")]) from None


def parse_policy(text: str, *, version: str) -> Policy:
    """Parse a HuJSON policy and validate it for a Headscale minor (``"0.28"``, ``"0.29"``, or a full version)."""
    return validate_policy(load_hujson(text), version=version)


#: New in 0.29 at the top level, with a pointer for 0.28 users.
_NEW_IN_029 = {
    "grants": "; render_policy() and grants_to_acls() turn IP grants into ACLs for 0.28",
    "nodeAttrs": "",
    "tests": "",
    "sshTests": "",
    "randomizeClientPort": "; on 0.28 it is the server setting randomize_client_port",
}
#: Tailscale keys Headscale does not implement at all.
_NOT_IN_HEADSCALE = {
    "postures": "device postures are not supported by Headscale",
    "srcPosture": "device postures are not supported by Headscale",
    "defaultSrcPosture": "device postures are not supported by Headscale",
    "ipsets": "IP sets are not supported by Headscale",
    "ipPool": "Headscale refuses ipPool (it needs an IP allocator Headscale does not have)",
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


def validate_policy(data: Any, *, version: str) -> Policy:
    """Validate a policy document (already parsed) for a Headscale minor; every problem is reported at once."""
    minor = headscale_minor(version)
    if not isinstance(data, dict):
        raise PolicyError([PolicyProblem("(root)", "the policy must be a JSON object")])
    data, problems = _gate_new_features(data, minor)
    try:
        policy = Policy.model_validate(data, context={"version": minor})
    except ValidationError as exc:
        raise PolicyError(problems + _problems_from(exc)) from None
    problems += _Semantics(policy, minor).run()
    if problems:
        raise PolicyError(problems)
    return policy


def _gate_new_features(data: dict[str, Any], minor: str) -> tuple[dict[str, Any], list[PolicyProblem]]:
    """On 0.28, report (and set aside) the keys 0.29 introduced, so the rest is still checked in the same pass."""
    if minor != "0.28":
        return data, []
    problems: list[PolicyProblem] = []
    kept = dict(data)
    for key, pointer in _NEW_IN_029.items():
        if key in kept:
            del kept[key]
            problems.append(
                PolicyProblem(format_path([key]), f"{key!r} needs Headscale 0.29 (target is 0.28){pointer}")
            )
    if isinstance(kept.get("ssh"), list):
        rules: list[Any] = []
        for index, rule in enumerate(kept["ssh"]):
            if isinstance(rule, dict) and "acceptEnv" in rule:
                rule = {k: v for k, v in rule.items() if k != "acceptEnv"}
                path = format_path(["ssh", index, "acceptEnv"])
                problems.append(PolicyProblem(path, "'acceptEnv' needs Headscale 0.29 (target is 0.28)"))
            rules.append(rule)
        kept["ssh"] = rules
    return kept, problems


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
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        inner = _without_none(field.annotation)
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


class _Semantics:
    """Checks across the document: references, autogroup placement, SSH identity rules, ports per protocol."""

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

    def refer(self, parts: Sequence[str | int], text: str, *, tag_why: str = "") -> Alias:
        """Report a group, tag or host the policy uses without defining it."""
        alias = self.alias(text)
        if alias.kind is AliasKind.GROUP and text not in self.groups:
            self.add(parts, f"group {text!r} is not defined in groups{_did_you_mean(text, self.groups)}")
        elif alias.kind is AliasKind.TAG and text not in self.tags:
            self.add(parts, f"tag {text!r} has no tagOwners entry{tag_why}{_did_you_mean(text, self.tags)}")
        elif alias.kind is AliasKind.HOST and text not in self.hosts:
            user_hint = f"; if it is a user, write '{text}@'" if re.fullmatch(r"[A-Za-z0-9._-]+", text) else ""
            self.add(parts, f"host {text!r} is not defined in hosts{_did_you_mean(text, self.hosts)}{user_hint}")
        return alias

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
            for position, target in enumerate(attr.target):
                self.refer(["nodeAttrs", index, "target", position], target)
        for index, test in enumerate(self.policy.tests or ()):
            self.test(index, test)
        for index, ssh_test in enumerate(self.policy.ssh_tests or ()):
            self.ssh_test(index, ssh_test)
        return self.problems

    def tag_owners(self) -> None:
        owners = self.policy.tag_owners or {}
        for tag, tag_owners in owners.items():
            for position, owner in enumerate(tag_owners):
                self.refer(["tagOwners", tag, position], owner)
        reported: set[frozenset[str]] = set()
        for tag in sorted(owners):
            cycle = _ownership_cycle(tag, owners)
            if cycle and frozenset(cycle) not in reported:
                reported.add(frozenset(cycle))
                self.add(["tagOwners", tag], f"tag ownership cycle: {' → '.join([*cycle, cycle[0]])}")

    def acl(self, index: int, acl: Acl) -> None:
        base: list[str | int] = ["acls", index]
        for position, src in enumerate(acl.src):
            self.refer([*base, "src", position], src)
        self_dst = False
        for position, dst in enumerate(acl.dst):
            alias, ports = parse_destination(dst, version=self.version)
            self.refer([*base, "dst", position], alias.text)
            self_dst |= alias.text == "autogroup:self"
            portless = acl.proto is not None and protocol_number(acl.proto, version=self.version) not in PORT_PROTOCOLS
            if portless and ports != (ALL_PORTS,):
                self.add([*base, "dst", position], f"protocol {acl.proto!r} has no ports: write '{alias.text}:*'")
        if self_dst:
            self.self_sources([*base, "src"], acl.src, wildcard_ok=True)

    def self_sources(self, parts: list[str | int], sources: Sequence[str], *, wildcard_ok: bool) -> None:
        """autogroup:self means 'the same user's devices': only user-like sources make sense (0.29 enforces it)."""
        for position, src in enumerate(sources):
            kind = self.alias(src).kind
            if kind in (AliasKind.USER, AliasKind.GROUP) or src == "autogroup:member":
                continue
            if kind is AliasKind.WILDCARD and wildcard_ok:
                continue
            self.add(
                [*parts, position],
                f"{src!r} cannot reach autogroup:self: only users, groups or autogroup:member"
                + ("" if wildcard_ok else " (in grants '*' is refused too)"),
            )

    def grant(self, index: int, grant: Grant) -> None:
        base: list[str | int] = ["grants", index]
        if not grant.ip and not grant.app:
            self.add(base, "a grant needs 'ip' or 'app'")
        for position, src in enumerate(grant.src):
            self.refer([*base, "src", position], src)
        for position, dst in enumerate(grant.dst):
            alias = self.refer([*base, "dst", position], dst)
            if alias.kind is AliasKind.PREFIX and parse_network(dst).prefixlen == 0:
                self.add([*base, "dst", position], f"{dst!r} as a grant destination: use autogroup:internet")
            if grant.app and dst == "autogroup:internet":
                self.add([*base, "dst", position], "app grants cannot target autogroup:internet")
        for position, via in enumerate(grant.via or ()):
            self.refer([*base, "via", position], via)
        if "autogroup:self" in grant.dst:
            self.self_sources([*base, "src"], grant.src, wildcard_ok=False)

    def ssh(self, index: int, rule: SshRule) -> None:
        base: list[str | int] = ["ssh", index]
        sources = [self.refer([*base, "src", position], src) for position, src in enumerate(rule.src)]
        tagged = [s.text for s in sources if s.kind is AliasKind.TAG or s.text == "autogroup:tagged"]
        users = {s.text for s in sources if s.kind is AliasKind.USER}
        user_sets = any(s.kind is AliasKind.GROUP or s.text == "autogroup:member" for s in sources)
        for position, dst in enumerate(rule.dst):
            alias = self.refer([*base, "dst", position], dst)
            parts = [*base, "dst", position]
            if alias.kind is AliasKind.USER:
                if tagged:
                    self.add(parts, f"tagged sources ({', '.join(tagged)}) cannot SSH to user-owned devices ({dst!r})")
                elif user_sets or users != {dst}:
                    self.add(parts, f"user destination {dst!r} needs {dst!r} as the only source; use autogroup:self")
            elif dst in ("autogroup:self", "autogroup:member") and tagged:
                self.add(parts, f"tagged sources ({', '.join(tagged)}) cannot SSH to {dst} (user-owned devices)")
        if rule.check_period is not None and rule.action != "check":
            self.add([*base, "checkPeriod"], "checkPeriod only applies to action 'check'")

    def auto_approvers(self) -> None:
        approvers = self.policy.auto_approvers
        if approvers is None:
            return
        why = ", so no node can carry it and the approval never applies"
        for route, route_approvers in (approvers.routes or {}).items():
            if parse_network(route).prefixlen == 0:
                self.add(["autoApprovers", "routes", route], "approve exit nodes with autoApprovers.exitNode")
            for position, approver in enumerate(route_approvers):
                self.refer(["autoApprovers", "routes", route, position], approver, tag_why=why)
        for position, approver in enumerate(approvers.exit_node or ()):
            self.refer(["autoApprovers", "exitNode", position], approver, tag_why=why)

    def test(self, index: int, test: PolicyTest) -> None:
        base: list[str | int] = ["tests", index]
        self.refer([*base, "src"], test.src)
        if not test.accept and not test.deny:
            self.add(base, "a test needs 'accept' or 'deny'")
        for field, destinations in (("accept", test.accept), ("deny", test.deny)):
            for position, dst in enumerate(destinations or ()):
                alias, _ = parse_destination(dst, version=self.version)
                self.refer([*base, field, position], alias.text)
                host = self.hosts.get(alias.text)
                if alias.kind is AliasKind.HOST and host and parse_network(host).num_addresses != 1:
                    self.add([*base, field, position], f"host {alias.text!r} is a range; a test names one host")

    def ssh_test(self, index: int, test: SshPolicyTest) -> None:
        base: list[str | int] = ["sshTests", index]
        self.refer([*base, "src"], test.src)
        if not (test.accept or test.deny or test.check):
            self.add(base, "an sshTests entry needs 'accept', 'deny' or 'check'")
        for position, dst in enumerate(test.dst):
            alias = self.refer([*base, "dst", position], dst)
            host = self.hosts.get(dst)
            if alias.kind is AliasKind.HOST and host and parse_network(host).num_addresses != 1:
                self.add([*base, "dst", position], f"host {dst!r} is a range; an sshTests destination is one host")


def _ownership_cycle(start: str, owners: dict[str, list[str]]) -> list[str] | None:
    """The tags of a cycle through ``start`` in the tag→owning-tag graph, or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        tag, trail = stack.pop()
        for owner in owners.get(tag, ()):
            if owner == start:
                return trail
            if owner.startswith("tag:") and owner not in seen:
                seen.add(owner)
                stack.append((owner, [*trail, owner]))
    return None


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
    ``proto: "1"``. ``autogroup:danger-all`` (all IPs) becomes ``*``, which means all IPs on 0.28.
    Refused, with the grant's path: ``app`` capabilities, ``via`` route steering, and ``*`` in src/dst (tailnet
    ranges on 0.29, all IPs on 0.28 — not the same flows). A present ``grants`` key always yields an ``acls`` key,
    so ``"grants": []`` (deny all) does not turn into ``{}`` (allow all).
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
    for field in ("src", "dst"):
        for position, text in enumerate(grant[field]):
            if text == "*":
                problems.append(
                    PolicyProblem(
                        format_path([*base, field, position]),
                        "'*' is the tailnet ranges on 0.29 but every IP on 0.28, so it cannot be converted; name the "
                        + ("sources" if field == "src" else "destinations")
                        + " (autogroup:member, autogroup:tagged, groups, tags, CIDRs)",
                    )
                )
    if len(problems) > before or not grant.get("ip"):
        return []
    sources = ["*" if src == "autogroup:danger-all" else src for src in grant["src"]]
    by_proto: dict[int | None, list[str]] = {}
    for entry in grant["ip"]:
        proto, _ = _parse_grant_ip(entry, version="0.29")
        ports = "*" if entry == "*" else entry.rpartition(":")[2]
        texts = by_proto.setdefault(proto, [])
        if ports not in texts:
            texts.append(ports)
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
