"""Headscale's values on the wire, and the error it answers with.

protojson's Timestamp form, ``netip.Prefix`` parsing and ordering (routes), the gRPC layer's tag rule, and
:class:`GrpcError`: a failed RPC as grpc-gateway serves it. Pure functions: the store, the gateway and the handlers
all use them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.models.swagger.swagger_contract import GRPC_HTTP_STATUS

_TIMESTAMP_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")


class GrpcError(Exception):
    """A failed RPC as grpc-gateway serves it: gRPC code + message, HTTP status derived from the code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return GRPC_HTTP_STATUS.get(self.code, 500)

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": []}


def unknown_error(message: str) -> GrpcError:
    """A plain Go error returned from a handler: gRPC Unknown, served as HTTP 500 (most Headscale failures)."""
    return GrpcError(2, message)


def invalid_argument(message: str) -> GrpcError:
    return GrpcError(3, message)


def format_timestamp(moment: datetime) -> str:
    """protojson's Timestamp form: UTC with ``Z`` and 0, 3 or 6 fractional digits."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.year < 1000:
        text = f"{moment.year:04d}" + text[text.index("-") :]
    if moment.microsecond:
        fraction = f"{moment.microsecond:06d}"
        text += "." + (fraction[:3] if fraction.endswith("000") else fraction)
    return text + "Z"


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 as protojson accepts it (``Z`` or an offset, up to nanoseconds); ValueError otherwise."""
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid google.protobuf.Timestamp value {json.dumps(text)}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    micro = int((match[7] or "0").ljust(6, "0")[:6])
    offset = timedelta(0)
    if match[8] != "Z":
        sign = 1 if match[8][0] == "+" else -1
        offset = sign * timedelta(hours=int(match[8][1:3]), minutes=int(match[8][4:6]))
    try:
        local = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        return local - offset
    except (ValueError, OverflowError):
        raise ValueError(f"google.protobuf.Timestamp value out of range: {json.dumps(text)}") from None


def optional_timestamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


@dataclass(frozen=True, order=True)
class _Prefix:
    """A route in ``netip.Prefix.Compare`` order: family, masked address, prefix length, then the address itself."""

    family: int
    masked: int
    bits: int
    address: int
    text: str = field(compare=False)


def parse_prefix(text: str) -> _Prefix:
    """Parse like ``netip.ParsePrefix`` (the address is kept unmasked); ValueError with Go's wording.

    Go splits at the last ``/``, refuses zones, then the bits: a sign or a leading zero (or anything ``Atoi`` cannot
    read) is "bad bits after slash", a number beyond the family's width "prefix length out of range".
    """
    where = f"netip.ParsePrefix({json.dumps(text)})"
    address_text, slash, bits_text = text.rpartition("/")
    if not slash:
        raise ValueError(f"{where}: no '/'")
    try:
        address = ipaddress.ip_address(address_text)
    except ValueError:
        raise ValueError(f"{where}: ParseAddr({json.dumps(address_text)}): unable to parse IP") from None
    if "%" in address_text:
        raise ValueError(f"{where}: IPv6 zones cannot be present in a prefix")
    width = 32 if address.version == 4 else 128
    bits = _prefix_bits(bits_text)
    if bits is None:
        raise ValueError(f"{where}: bad bits after slash: {json.dumps(bits_text)}")
    if bits > width:
        raise ValueError(f"{where}: prefix length out of range")
    masked = int(address) >> (width - bits) << (width - bits) if bits else 0
    return _Prefix(address.version, masked, bits, int(address), f"{address}/{bits}")


def _prefix_bits(text: str) -> int | None:
    """The bits as ``netip.ParsePrefix`` reads them (None when it calls them bad): one digit, or a number whose
    first digit is 1-9 that fits ``strconv.Atoi`` (int64)."""
    if not text or not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        return None
    value = int(text)
    return value if value < 2**63 else None


def announced_routes(routes: Iterable[str]) -> list[str]:
    """Routes as a node announces them (``Hostinfo.RoutableIPs``): each parsed, in the order given, not sorted."""
    return [parse_prefix(route).text for route in routes]


def sorted_routes(routes: Iterable[str]) -> list[str]:
    return [prefix.text for prefix in sorted({parse_prefix(route) for route in routes})]


_EXIT_ROUTES = frozenset({"0.0.0.0/0", "::/0"})


def served_routes(available: Iterable[str], approved: Iterable[str]) -> list[str]:
    """A node's ``subnetRoutes`` as the API lists them: its primary routes (the approved subnet routes it announces,
    in ``netipx.ComparePrefix`` order: family, length, address) then its approved exit routes in announced order.

    Every node is taken as the primary of its routes (the fake elects nothing among routers announcing the same one).
    """
    granted = set(approved)
    announced = [route for route in available if route in granted]
    subnets = sorted(
        {parse_prefix(route) for route in announced if route not in _EXIT_ROUTES},
        key=lambda prefix: (prefix.family, prefix.bits, prefix.address),
    )
    return [prefix.text for prefix in subnets] + [route for route in announced if route in _EXIT_ROUTES]


def validate_tag(tag: str) -> str | None:
    """The gRPC layer's tag check (``validateTag``); the message of the first rule broken, or None."""
    if not tag.startswith("tag:"):
        return "tag must start with the string 'tag:'"
    if tag.lower() != tag:
        return "tag should be lowercase"
    if len(tag.split()) > 1:
        return "tags must not contain spaces"
    return None
