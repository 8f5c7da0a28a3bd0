"""What every settings model shares: the frozen camelCase base, the enums of the stack's modes, problems that
name their field, and the value parts several sections use (Go durations, URLs Go and Node.js parse, compute resources).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from headscale_ha.components.config_types import HttpsUrl, Quantity, quantity_value
from headscale_ha.policy.values import go_duration_ns

PROJECT = "headscale-ha"
SUPPORTED_HEADSCALE_MINORS = ("0.28", "0.29")


class SettingsModel(BaseModel):
    """Frozen, keyword-only, camelCase in config, unknown keys rejected."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
    )


class Role(StrEnum):
    ACTIVE = "active"
    STANDBY = "standby"


class DatabaseStage(StrEnum):
    SQLITE = "sqlite"
    MIGRATING = "migrating"
    POSTGRES = "postgres"


class FailoverMode(StrEnum):
    """How the public hostname moves between sites when the active one is lost."""

    K8GB = "k8gb"
    """k8gb answers for the hostname and fails over to the healthy site by its geo tag."""
    EXTERNAL_DNS = "externalDns"
    """external-dns publishes the active site's address; promotion publishes the new one."""
    NONE = "none"
    """No DNS record is managed: the hostname is the operator's to point."""


class RouteKind(StrEnum):
    """How the public hostname is routed into the cluster."""

    GATEWAY = "gateway"
    """A Gateway of its own (Gateway API) with HTTPRoutes."""
    INGRESS = "ingress"
    """An Ingress of the `ingressClass`."""


class RouterMode(StrEnum):
    """How a subnet router forwards packets."""

    USERSPACE = "userspace"
    """tailscaled's userspace networking: no tun device, runs under the `restricted` Pod Security level."""
    KERNEL = "kernel"
    """A tun device, with root and NET_ADMIN (a namespace at the `privileged` level): the kernel forwards."""


# --------------------------------------------------------------------------------------------- rules across fields

#: Where a problem is, relative to the model that finds it: config names (camelCase) and list indices.
Location = tuple[str | int, ...]


def location_text(location: Location) -> str:
    """``("sites", 1, "lbPool")`` as ``sites[1].lbPool``."""
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class FieldProblem:
    """One problem a rule across fields finds, at the field it is about: ``message`` says what is wrong and what
    is expected (naming the other fields and their values), without repeating the field or its value."""

    location: Location
    message: str
    value: object


class FieldProblemsError(ValueError):
    """Raised by a model validator whose rule spans fields: each problem names its own field and value, so a
    config loader reports it at that key path with that value (never the whole object, truncated)."""

    def __init__(self, problems: Iterable[FieldProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{location_text(p.location)}: {p.message}, got {p.value!r}" for p in self.problems))


def raise_problems(problems: list[FieldProblem]) -> None:
    if problems:
        raise FieldProblemsError(problems)


# --------------------------------------------------------------------------------------------- shared parts


def go_duration_in_range(duration: str, *, above: str, reason: str) -> str:
    """Refuse a duration Go cannot hold, or one not longer than ``above`` (``reason`` says who refuses it)."""
    try:
        nanoseconds = go_duration_ns(duration)
    except ValueError:  # a Duration (config_types) is in Go's grammar: only its size can be refused
        raise ValueError("is longer than Go's longest duration (about 2562047h), so it cannot be parsed") from None
    if nanoseconds <= go_duration_ns(above):
        raise ValueError(f"must be more than {above}: {reason}")
    return duration


_URL_PARTS = re.compile(
    r"^https://(?P<host>\[[^\]]*\]|[A-Za-z0-9._-]+)(?::(?P<port>\d{1,5}))?(?P<rest>[/?#].*)?$", re.DOTALL
)


def _parsable_url(url: str) -> str:
    """An https URL that Go's net/url and the WHATWG URL parser (Node.js) both accept.

    Headscale parses DERP map URLs and the OIDC issuer with Go's url.Parse, Headplane its issuer as a WHATWG URL;
    both refuse control characters, ports that are not numbers and malformed %-escapes, WHATWG also ports above
    65535 and hosts with characters such as '{', '|' or '^'.
    """
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise ValueError("must not contain control characters")
    parts = _URL_PARTS.match(url)
    host_ok = parts is not None and (not parts["host"].startswith("[") or _is_ipv6(parts["host"][1:-1]))
    if parts is None or not host_ok or (parts["port"] is not None and int(parts["port"]) > 65535):
        raise ValueError(
            "must be https://<host>[:<port>][/<path>] with a DNS name, IPv4 or [IPv6] host and a port up to 65535"
        )
    if re.search(r"%(?![0-9A-Fa-f]{2})", url):
        raise ValueError("has a '%' that does not start a %XX escape")
    return url


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


#: An https URL the Go and Node.js URL parsers accept (see ``_parsable_url``).
ParsableHttpsUrl = Annotated[HttpsUrl, AfterValidator(_parsable_url)]


class ResourceAmounts(SettingsModel):
    """An amount of CPU and memory."""

    cpu: Quantity = Field(description="CPU, as a Kubernetes quantity (cores).")
    memory: Quantity = Field(description="Memory, as a Kubernetes quantity (bytes).")


class ComputeResources(SettingsModel):
    """Requests and limits of one container; limits must not be below requests."""

    requests: ResourceAmounts = Field(description="Resources the scheduler reserves.")
    limits: ResourceAmounts = Field(description="Hard ceiling; memory above it OOM-kills the container.")

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> ComputeResources:
        problems = []
        for field in ("cpu", "memory"):
            request, limit = getattr(self.requests, field), getattr(self.limits, field)
            if quantity_value(limit) < quantity_value(request):
                problems.append(
                    FieldProblem(
                        ("limits", field),
                        f"is below requests.{field} ({request}): raise it to {request} or more",
                        limit,
                    )
                )
        raise_problems(problems)
        return self


def default_resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Callable[[], ComputeResources]:
    return lambda: ComputeResources(
        requests=ResourceAmounts(cpu=cpu, memory=memory),
        limits=ResourceAmounts(cpu=cpu_limit, memory=memory_limit),
    )


def override_date(value: object) -> object:
    """A dated override (YYYY-MM-DD, the UTC date the restore's refusal prints) as text."""
    # YAML reads an unquoted 2025-06-01 as a date; Pulumi hands the same text over as a string.
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str):
        try:
            ok = re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) and datetime.date.fromisoformat(value)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{value!r} is not a date YYYY-MM-DD (the UTC date the restore's refusal prints)")
    return value
