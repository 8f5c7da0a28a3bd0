"""Constrained value types for the stack config.

Each validator raises ``ValueError`` with a sentence that says what is expected; the config loader
prefixes it with the key and the bad value, so messages here never repeat either.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from headscale_ha.guardrails.images import EXACT_POSTGRES_TAG, EXACT_VERSION_TAG, image_problem

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^(\d+(\.\d+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")
_NODE_KEY = re.compile(r"^privkey:[0-9a-f]{64}$")

_QUANTITY_FACTORS = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
}


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise ValueError("must be a DNS label: lowercase letters, digits and '-', 1 to 63 characters")
    return value


def _fqdn(value: str) -> str:
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if len(name) > 253 or len(labels) < 2 or not all(_DNS_LABEL.match(label) for label in labels):
        raise ValueError("must be a lowercase fully qualified domain name such as 'hs.example.com'")
    return name


def _ipv4(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError("must be an IPv4 address such as 10.0.0.10") from None


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("must be an IPv4 or IPv6 address") from None


def _host(value: str) -> str:
    """A DNS name (one label or more) or an IP address: what may reach a command line or a connection string as
    is (socat's ``TCP:<host>:<port>``, libpq's ``host=``), where a comma, a space or a colon would add options."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253 or not all(_DNS_LABEL.match(label) for label in name.split(".")):
        raise ValueError(
            "must be a DNS name (lowercase letters, digits, '-' and '.') or an IPv4 or IPv6 address, nothing else: "
            "it is passed on as is"
        )
    return name


_API_URL = re.compile(r"^(?P<scheme>https?)://(?P<host>\[[^\]]+\]|[^\s/:\[\]]+)(?::\d{1,5})?(/\S*)?$")
_LOOPBACK_NAMES = ("localhost",)


def _api_url(value: str) -> str:
    """An http(s) URL of the Headscale API; plain http only to a loopback host (a `kubectl port-forward`), as the
    admin API key travels in every request's Authorization header."""
    parts = _API_URL.match(value)
    if parts is None:
        raise ValueError("must be an https:// URL (or http:// to a loopback address) such as https://hs.example.com")
    if parts["scheme"] == "http" and not _is_loopback(parts["host"].strip("[]")):
        raise ValueError(
            "must be https://: plain http:// would send the Headscale API key in clear; it is accepted only to a "
            "loopback address (127.0.0.1, [::1], localhost), as through `kubectl port-forward`"
        )
    return value


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cidr(value: str) -> str:
    """A network ``<address>/<prefix length>`` (as ipaddress reads it); the message says which part is wrong."""
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError:
        pass
    address, _, length = value.partition("/")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(
            f"must be a network <address>/<prefix length> such as 10.244.0.0/16: {address!r} is not an IPv4 or IPv6 "
            "address"
        ) from None
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        span = f"IPv{ip.version} (0 to {ip.max_prefixlen})"
        if length.isascii() and length.isdigit():
            raise ValueError(f"has prefix length {int(length)}, out of range for {span}") from None
        raise ValueError(
            f"has prefix length {length!r}, not a number from 0 to {ip.max_prefixlen} (IPv{ip.version})"
        ) from None
    raise ValueError(f"has host bits set: with this prefix length the network is {network}")


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError("must be a Kubernetes quantity such as 250m, 1, 512Mi or 2Gi")
    return value


def _duration(value: str) -> str:
    """Go's duration grammar without a sign, µs or a number with nothing before or after its point (Headscale and
    Litestream read the text as Go does; its value is :func:`headscale_ha.policy.values.go_duration_ns`'s)."""
    if not value or (value != "0" and "".join(m.group(0) for m in _DURATION_PART.finditer(value)) != value):
        raise ValueError("must be a Go duration such as 90s, 30m or 1h30m")
    return value


def _duration_text(value: object) -> object:
    """A number where a duration belongs (YAML reads `30` as one) has no unit to guess: say what to write."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        shown = f"{value:g}"
        raise ValueError(f"is a number without a unit: write a duration such as {shown}s, {shown}m or {shown}h")
    return value


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or "/../" in f"{value}/":
        raise ValueError("must be an absolute path without '..'")
    return value


def _https_url(value: str) -> str:
    if not re.match(r"^https://[^\s/]+(/\S*)?$", value):
        raise ValueError("must be an https:// URL")
    return value


def _node_private_key(value: str) -> str:
    if not _NODE_KEY.match(value.strip()):
        # The value is a secret: the message says what is expected and never echoes it.
        raise ValueError("must be 'privkey:' followed by 64 lowercase hex characters")
    return value.strip()


def quantity_value(quantity: str) -> float:
    """The number a Kubernetes quantity stands for (cores or bytes), for comparisons."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise ValueError(f"not a quantity: {quantity!r}")
    return float(match.group(1)) * _QUANTITY_FACTORS[match.group(3)]


def _image(value: str, *, exact_tag: re.Pattern[str] = EXACT_VERSION_TAG, example: str = "1.2.3") -> str:
    problem = image_problem(value, exact_tag=exact_tag, example=example)
    if problem is not None:
        raise ValueError(problem)
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
Fqdn = Annotated[str, AfterValidator(_fqdn)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
IPAddress = Annotated[str, AfterValidator(_ip)]
HostAddress = Annotated[str, AfterValidator(_host)]
ApiUrl = Annotated[str, AfterValidator(_api_url)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Quantity = Annotated[str, AfterValidator(_quantity)]
Duration = Annotated[str, BeforeValidator(_duration_text), AfterValidator(_duration)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
HttpsUrl = Annotated[str, AfterValidator(_https_url)]
Image = Annotated[str, AfterValidator(_image)]
PostgresImage = Annotated[str, AfterValidator(lambda v: _image(v, exact_tag=EXACT_POSTGRES_TAG, example="15.18"))]
NodePrivateKey = Annotated[str, AfterValidator(_node_private_key)]
