"""Typed, validated settings the components take (resources, placement, backup, DERP, OIDC, ...).

Frozen, keyword-only pydantic models, camelCase in Pulumi config. The stack's config (program/config.py) is
composed of these sections; a component takes only the ones it uses, so another program can build them by hand.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from headscale_ha.components.config_types import (
    AbsolutePath,
    Cidr,
    DnsLabel,
    Duration,
    Fqdn,
    HostAddress,
    HttpsUrl,
    Image,
    IPAddress,
    IPv4,
    PostgresImage,
    Quantity,
    quantity_value,
)
from headscale_ha.policy.images import ImageRef

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


def _raise_problems(problems: list[FieldProblem]) -> None:
    if problems:
        raise FieldProblemsError(problems)


# --------------------------------------------------------------------------------------------- shared parts

#: Go's time.Duration is an int64 count of nanoseconds; time.ParseDuration refuses anything longer.
GO_MAX_DURATION_NS = 2**63 - 1
_DURATION_UNIT_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")


def go_duration_ns(duration: str) -> int:
    """Nanoseconds in a (validated) Go duration string, as time.ParseDuration counts them (whole ns per part)."""
    return sum(int(Decimal(number) * _DURATION_UNIT_NS[unit]) for number, unit in _DURATION_PART.findall(duration))


def _go_duration_in_range(duration: str, *, above: str, reason: str) -> str:
    """Refuse a duration Go cannot hold, or one not longer than ``above`` (``reason`` says who refuses it)."""
    nanoseconds = go_duration_ns(duration)
    if nanoseconds > GO_MAX_DURATION_NS:
        raise ValueError("is longer than Go's longest duration (about 2562047h), so it cannot be parsed")
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
        _raise_problems(problems)
        return self


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Callable[[], ComputeResources]:
    return lambda: ComputeResources(
        requests=ResourceAmounts(cpu=cpu, memory=memory),
        limits=ResourceAmounts(cpu=cpu_limit, memory=memory_limit),
    )


# --------------------------------------------------------------------------------------------- tailnet

_STACK_PART = r"[A-Za-z0-9_.-]+"
_STACK_PREFIX = rf"^{_STACK_PART}/{_STACK_PART}$"
#: A stack name as `pulumi stack init` accepts it (no organization, no project).
StackName = Annotated[str, Field(pattern=rf"^{_STACK_PART}$", max_length=100)]
#: `org/project/stack`, as a StackReference names a stack.
QualifiedStackName = Annotated[str, Field(pattern=rf"^{_STACK_PART}/{_STACK_PART}/{_STACK_PART}$")]


class Site(SettingsModel):
    """One cluster of the tailnet, as every stack sees it."""

    name: DnsLabel = Field(description="Cluster name; the stack whose `cluster.name` matches runs this site.")
    gateway_ip: IPv4 = Field(
        description="Fixed tailnet-facing IP of the site's gateway Service (split DNS, kubeconfig)."
    )
    lb_pool: Cidr = Field(description="Cilium LB pool that hands out `gatewayIp`; advertised by the subnet routers.")
    routes: list[Cidr] = Field(default_factory=list, description="Cluster CIDRs the site's subnet routers advertise.")
    dns_zone: Fqdn | None = Field(default=None, description="Split-DNS zone; default `<name>.tn.<internalDomain>`.")
    public_address: IPv4 | None = Field(
        default=None, description="Public IP of the site's ingress; the DNS record target when this site is active."
    )
    stack: StackName | None = Field(
        default=None, description="Name of the site's Pulumi stack (under `tailnet.stackPrefix`); default the name."
    )
    kube_context: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^\S+$",
        description="kubectl context of the site's cluster, for the commands the stack prints; default the name.",
    )

    @property
    def stack_name(self) -> str:
        """The site's stack, without the organization and project (``stack`` or the site name)."""
        return self.stack or self.name

    @property
    def context(self) -> str:
        """The kubectl context of the site's cluster (``kubeContext`` or the site name)."""
        return self.kube_context or self.name

    @model_validator(mode="after")
    def _gateway_in_pool(self) -> Site:
        if ipaddress.ip_address(self.gateway_ip) not in ipaddress.ip_network(self.lb_pool):
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("gatewayIp",),
                        f"is outside lbPool {self.lb_pool}, which hands it out: pick an address inside it",
                        self.gateway_ip,
                    )
                ]
            )
        return self


class TailnetUser(SettingsModel):
    """A Headscale user the active stack manages through the API."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$", description="User name (policies write it `name@`).")
    display_name: str = Field(default="", description="Display name.")
    email: str = Field(default="", pattern=r"^$|^[^@\s]+@[^@\s]+$", description="E-mail address.")
    force_delete: bool = Field(default=False, description="Delete the user with its nodes when removed from config.")


class Prefixes(SettingsModel):
    """The tailnet's address ranges, inside Tailscale's own, and how addresses are handed out."""

    v4: Cidr = Field(default="100.64.0.0/10", description="Tailnet IPv4 range; must lie inside 100.64.0.0/10.")
    v6: Cidr = Field(default="fd7a:115c:a1e0::/48", description="Tailnet IPv6 range; inside fd7a:115c:a1e0::/48.")
    allocation: str = Field(
        default="sequential", pattern="^(sequential|random)$", description="`sequential` or `random`."
    )

    @model_validator(mode="after")
    def _inside_tailscale_ranges(self) -> Prefixes:
        problems = []
        for field, version, allowed in (("v4", 4, "100.64.0.0/10"), ("v6", 6, "fd7a:115c:a1e0::/48")):
            network = ipaddress.ip_network(getattr(self, field))
            if network.version != version:
                problems.append(
                    FieldProblem((field,), f"is not an IPv{version} network: use one inside {allowed}", str(network))
                )
            elif not network.subnet_of(ipaddress.ip_network(allowed)):  # type: ignore[arg-type]
                problems.append(
                    FieldProblem((field,), f"is outside {allowed}, which is all Tailscale clients accept", str(network))
                )
        _raise_problems(problems)
        return self


def base_domain_problem(host: str, base_domain: str, *, host_key: str) -> str | None:
    """Why ``base_domain`` cannot be the MagicDNS domain of a server reached at ``host`` (named ``host_key``)."""
    if host == base_domain or host.endswith(f".{base_domain}"):
        return (
            f"must be neither {host_key} ({host}) nor a parent domain of it: Headscale refuses to start "
            "when server_url's host is base_domain or inside it (MagicDNS would take the server's name over)"
        )
    return None


class Tailnet(SettingsModel):
    """What both clusters share: names, sites, address ranges. Lives in Pulumi.yaml."""

    public_hostname: Fqdn = Field(description="Public name of Headscale (`/`) and Headplane (`/admin`).")
    base_domain: Fqdn = Field(
        description="MagicDNS base domain; must be neither `publicHostname` nor a parent domain of it."
    )
    internal_domain: Fqdn = Field(description="Parent of the per-site split-DNS zones `<site>.tn.<internalDomain>`.")
    sites: list[Site] = Field(min_length=1, description="Every cluster of the tailnet.")
    prefixes: Prefixes = Field(default_factory=Prefixes, description="Tailnet address ranges.")
    active_site: DnsLabel = Field(description="The one site that serves the tailnet; promotion changes it.")
    users: list[TailnetUser] = Field(default_factory=list, description="Users managed by the active stack.")
    nameservers: list[IPAddress] = Field(
        default_factory=lambda: ["1.1.1.1", "1.0.0.1"], min_length=1, description="Global resolvers pushed to clients."
    )
    identity_stack: QualifiedStackName | None = Field(
        default=None,
        description="`org/project/stack` of the identity stack (identity/): every site serves with the Noise and "
        "DERP keys of its `identity` output; required unless a site stack imports both keys.",
    )
    stack_prefix: str = Field(
        default=f"organization/{PROJECT}",
        pattern=_STACK_PREFIX,
        description="`org/project` of the site stacks: a site's stack is `<stackPrefix>/<site.stack or name>`.",
    )

    @field_validator("base_domain")
    @classmethod
    def _server_outside_base_domain(cls, base_domain: str, info: ValidationInfo) -> str:
        host = info.data.get("public_hostname")  # absent when publicHostname itself is invalid
        problem = None if host is None else base_domain_problem(host, base_domain, host_key="publicHostname")
        if problem is not None:
            raise ValueError(problem)
        return base_domain

    @model_validator(mode="after")
    def _sites_consistent(self) -> Tailnet:
        problems: list[FieldProblem] = []
        names = [site.name for site in self.sites]
        if self.active_site not in names:
            problems.append(
                FieldProblem(("activeSite",), f"is not one of the sites ({', '.join(names)})", self.active_site)
            )
        # Of two sites that share a value, the one that sets it is reported (the later when both do), naming the other.
        for i, site in enumerate(self.sites):
            for j, other in enumerate(self.sites[:i]):
                if site.name == other.name:
                    problems.append(
                        FieldProblem(
                            ("sites", i, "name"), f"is also the name of sites[{j}]: site names are unique", site.name
                        )
                    )
                    continue  # its default stack and zone repeat the name: fixing the name fixes them
                if site.gateway_ip == other.gateway_ip:
                    problems.append(
                        FieldProblem(
                            ("sites", i, "gatewayIp"),
                            f"is also the gatewayIp of sites[{j}] ({other.name}): each site needs its own",
                            site.gateway_ip,
                        )
                    )
                if site.stack_name == other.stack_name:
                    problems.append(self._shared(i, j, "stack", "stack", site.stack_name, "the site name"))
                if self.zone_of(site) == self.zone_of(other):
                    problems.append(
                        self._shared(i, j, "dnsZone", "DNS zone", self.zone_of(site), "<name>.tn.<internalDomain>")
                    )
        tailnet_ranges = [("prefixes.v4", self.prefixes.v4), ("prefixes.v6", self.prefixes.v6)]
        networks = [
            (i, location, ipaddress.ip_network(network))
            for i, site in enumerate(self.sites)
            for location, network in [
                *((("routes", k), r) for k, r in enumerate(site.routes)),
                (("lbPool",), site.lb_pool),
            ]
        ]
        for i, location, network in networks:
            for field, prefix in tailnet_ranges:
                own = ipaddress.ip_network(prefix)
                if network.version == own.version and network.overlaps(own):
                    problems.append(
                        FieldProblem(
                            ("sites", i, *location),
                            f"overlaps the tailnet's own addresses ({field} {prefix}): a gateway there would be a "
                            "per-node tailnet IP, not a stable one",
                            str(network),
                        )
                    )
        for n, (i, location, network) in enumerate(networks):
            for j, other_location, other in networks[:n]:
                if i != j and network.version == other.version and network.overlaps(other):
                    problems.append(
                        FieldProblem(
                            ("sites", i, *location),
                            f"overlaps {location_text(('sites', j, *other_location))} ({other}) of site "
                            f"{self.sites[j].name}: the routes and lbPools of two sites must not overlap",
                            str(network),
                        )
                    )
        _raise_problems(problems)
        return self

    def _shared(self, i: int, j: int, field: str, what: str, value: str, default: str) -> FieldProblem:
        """sites[i] and sites[j] share a value of ``field``: reported at the site that sets it (i when both do)."""
        attr = {"stack": "stack", "dnsZone": "dns_zone"}[field]
        at, other = (i, j) if getattr(self.sites[i], attr) is not None else (j, i)
        defaulted = "" if getattr(self.sites[other], attr) is not None else f", by default {default}"
        return FieldProblem(
            ("sites", at, field),
            f"is also the {what} of sites[{other}] ({self.sites[other].name}{defaulted}): each site needs its own",
            value,
        )

    def zone_of(self, site: Site) -> str:
        return site.dns_zone or f"{site.name}.tn.{self.internal_domain}"

    def stack_of(self, site: Site) -> str:
        """The fully qualified stack name of ``site`` (what a StackReference names)."""
        return f"{self.stack_prefix}/{site.stack_name}"

    def site(self, name: str) -> Site:
        return next(site for site in self.sites if site.name == name)


# --------------------------------------------------------------------------------------------- cluster


class ApiServer(SettingsModel):
    """The cluster's Kubernetes API server, as the gateway's proxies reach it."""

    host: HostAddress = Field(
        description="Address of the cluster's API server (VIP or DNS name) the gateway proxies to."
    )
    port: int = Field(default=6443, ge=1, le=65535, description="API server port.")


class Cluster(SettingsModel):
    """The Kubernetes cluster this stack deploys to."""

    name: DnsLabel | None = Field(default=None, description="Site name in `tailnet.sites`; default: the stack name.")
    nodes: int = Field(
        ge=1, le=1000, description="Schedulable worker nodes; caps every replica count that needs anti-affinity."
    )
    storage_class: str | None = Field(
        default=None, description="StorageClass for volumes; default: the cluster's default class."
    )
    workloads_on_control_plane: bool = Field(
        default=False,
        description="Allow control-plane nodes (a single-node cluster has no other); default: workers only.",
    )
    exclude_nodes: list[str] = Field(
        default_factory=list, description="Node names the control plane must never run on (e.g. a GPU worker)."
    )
    toleration_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long pods stay bound to a NotReady/unreachable node before eviction.",
    )
    api_server: ApiServer | None = Field(
        default=None, description="API server the tailnet kubeconfig reaches through the gateway."
    )


# --------------------------------------------------------------------------------------------- applications


class Oidc(SettingsModel):
    """OIDC login for Headscale (and Headplane through the same client), restricted to the accounts listed."""

    issuer: ParsableHttpsUrl = Field(description="OIDC issuer URL.")
    client_id: str = Field(min_length=1, description="OIDC client id; the secret is the `oidcClientSecret` key.")
    scope: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"], description="Requested scopes.")
    allowed_domains: list[str] = Field(default_factory=list, description="Only e-mail domains listed may log in.")
    allowed_groups: list[str] = Field(default_factory=list, description="Only members of these groups may log in.")
    allowed_users: list[str] = Field(default_factory=list, description="Only these e-mail addresses may log in.")
    only_start_if_available: bool = Field(
        default=False, description="Refuse to start while the issuer is unreachable (off: start without OIDC login)."
    )
    pkce: bool = Field(default=True, description="Use PKCE (S256).")
    allow_any_account: bool = Field(
        default=False,
        description="Let every account of the identity provider log in and register nodes: OIDC without "
        "`allowedDomains`, `allowedUsers` or `allowedGroups` is refused unless this is true.",
    )
    headplane_api_key_login: bool = Field(
        default=False,
        description="Keep Headplane's API-key login next to OIDC (off: Headplane accepts OIDC logins only).",
    )

    @model_validator(mode="after")
    def _someone_is_allowed(self) -> Oidc:
        """Without an allow-list every account of the identity provider could register nodes in the tailnet."""
        if not (self.allowed_domains or self.allowed_users or self.allowed_groups) and not self.allow_any_account:
            raise ValueError(
                "allowedDomains, allowedUsers and allowedGroups are all empty, so any account of the identity "
                "provider could log in and register nodes; list who may log in, or set allowAnyAccount: true "
                "on purpose"
            )
        return self


class Derp(SettingsModel):
    """The DERP relays clients use when a direct connection fails."""

    embedded: bool = Field(default=False, description="Run Headscale's embedded DERP relay (needs UDP 3478 reachable).")
    region_id: int = Field(default=999, ge=900, le=999, description="Region id of the embedded DERP.")
    region_code: DnsLabel = Field(default="headscale", description="Region code of the embedded DERP.")
    urls: list[ParsableHttpsUrl] = Field(
        default_factory=lambda: ["https://controlplane.tailscale.com/derpmap/default"],
        description="DERP maps to load; empty with `embedded` for a private relay only.",
    )

    @model_validator(mode="after")
    def _some_relay(self) -> Derp:
        if not self.urls and not self.embedded:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("urls",),
                        "is empty and embedded is off: clients would have no DERP relay; list a DERP map or set "
                        "embedded: true",
                        self.urls,
                    )
                ]
            )
        return self


class Headscale(SettingsModel):
    """The Headscale server: release, image, resources, storage, DERP, OIDC and overrides."""

    version: str = Field(description="Headscale release, 0.28.x or 0.29.x; selects config keys and API dialect.")
    image: Image = Field(description="Headscale image; its tag must be the `version`.")
    log_level: str = Field(default="info", pattern="^(trace|debug|info|warn|error)$", description="Log level.")
    resources: ComputeResources = Field(
        default_factory=_resources("50m", "128Mi", "1", "512Mi"), description="Container resources."
    )
    storage_size: Quantity = Field(default="1Gi", description="Size of the SQLite volume (sqlite stage).")
    ephemeral_inactivity_timeout: Duration = Field(
        default="30m", description="Ephemeral nodes offline this long are removed; more than 65s."
    )
    derp: Derp = Field(default_factory=Derp, description="DERP relays.")
    oidc: Oidc | None = Field(default=None, description="OIDC login; off when absent.")
    replicas: int = Field(
        default=1, ge=0, description="1 to serve, 0 to stop; Headscale is a strict singleton, never more than 1."
    )
    allow_empty_start: str | None = Field(
        default=None,
        description="Override after a real loss: a UTC date (YYYY-MM-DD) on which a site that has served (its "
        "ConfigMaps `headscale-served` / `headplane-served` exist) may start Headscale and Headplane empty when both "
        "the data volume and the NFS backup directory are gone. The restore refuses that case (exit 24) and prints "
        "today's date to set here; on any other day the value has no effect, so one left set is inert. Remove it "
        "once the pod has started.",
    )

    allow_downgrade_from: str | None = Field(
        default=None,
        pattern=r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$",
        description="The one downgrade `pulumi up` lets through: from this deployed release to `version`, after "
        "restoring the pre-upgrade snapshot (docs/upgrades.md). Remove it afterwards.",
    )

    @field_validator("allow_empty_start", mode="before")
    @classmethod
    def _utc_date(cls, value: object) -> object:
        return _override_date(value)

    @field_validator("replicas")
    @classmethod
    def _singleton(cls, replicas: int) -> int:
        if replicas > 1:
            raise ValueError(
                "would run two Headscale writers: upstream supports one instance only "
                "(SQLite has one writer; node cache, IP allocation and routes live in process memory)"
            )
        return replicas

    @field_validator("ephemeral_inactivity_timeout")
    @classmethod
    def _above_keepalive(cls, timeout: str) -> str:
        return _go_duration_in_range(
            timeout,
            above="65s",
            reason="Headscale refuses to start with an ephemeral inactivity timeout of 65s or less "
            "(the 60s keepalive plus a margin)",
        )

    @model_validator(mode="after")
    def _version_matches_image(self) -> Headscale:
        minor = ".".join(self.version.split(".")[:2])
        if minor not in SUPPORTED_HEADSCALE_MINORS or len(self.version.split(".")) != 3:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("version",), "is not supported; use a 0.28.x or 0.29.x release such as 0.29.2", self.version
                    )
                ]
            )
        tag = ImageRef.parse(self.image).tag
        if tag.removeprefix("v").split("-")[0] != self.version:
            raise FieldProblemsError(
                [
                    FieldProblem(
                        ("image",),
                        f"has the tag {tag}, which does not match version {self.version}: the image must be that "
                        "release",
                        self.image,
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _downgrade_goes_down(self) -> Headscale:
        if self.allow_downgrade_from is not None:

            def key(text: str) -> tuple[int, ...]:
                return tuple(int(part) for part in text.split("."))

            if key(self.allow_downgrade_from) <= key(self.version):
                raise FieldProblemsError(
                    [
                        FieldProblem(
                            ("allowDowngradeFrom",),
                            f"must be newer than version {self.version}: it names the deployed release a downgrade "
                            "leaves",
                            self.allow_downgrade_from,
                        )
                    ]
                )
        return self

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


class Headplane(SettingsModel):
    enabled: bool = Field(default=True, description="Deploy the Headplane web UI at `/admin`.")
    image: Image = Field(default="ghcr.io/tale/headplane:0.6.3", description="Headplane image.")
    resources: ComputeResources = Field(
        default_factory=_resources("50m", "128Mi", "500m", "384Mi"), description="Container resources."
    )
    storage_size: Quantity = Field(default="256Mi", description="Size of Headplane's own data volume.")

    @field_validator("image")
    @classmethod
    def _known_release(cls, image: str) -> str:
        tag = ImageRef.parse(image).tag.removeprefix("v")
        if not tag.startswith("0.6."):
            raise ValueError("only Headplane 0.6.x config keys are known (checked against 0.6.3); pin :0.6.3")
        return image


class Nfs(SettingsModel):
    """Where the Litestream replicas live. Pods reach it only through a claim: `restricted` admits no `nfs:` volume."""

    server: HostAddress | None = Field(
        default=None,
        description="NFS server (name or IP) of the static PersistentVolume; required unless `storageClass` is set.",
    )
    path: AbsolutePath | None = Field(
        default=None,
        description="Exported directory of the static PersistentVolume; each application replicates to its own "
        "subdirectory (`headscale`, `headplane`), which must exist and be writable by UID 65532.",
    )
    storage_class: str | None = Field(
        default=None,
        min_length=1,
        description="StorageClass that provisions the backup claim (e.g. csi-driver-nfs) instead of a static "
        "nfs PersistentVolume; a standby restores only if the class maps both sites to the same directory.",
    )
    size: Quantity = Field(default="10Gi", description="Capacity of the backup volume and claim.")

    @model_validator(mode="after")
    def _one_source(self) -> Nfs:
        if self.storage_class is None and (self.server is None or self.path is None):
            raise ValueError("server and path are required for the static nfs PersistentVolume (or set storageClass)")
        if self.storage_class is not None and (self.server is not None or self.path is not None):
            raise ValueError("storageClass provisions the volume: leave server and path to the StorageClass")
        return self


class Litestream(SettingsModel):
    """The Litestream sidecar that replicates each SQLite database, and its restore."""

    image: Image = Field(default="docker.io/litestream/litestream:0.5.17", description="Litestream image.")
    sync_interval: Duration = Field(default="1s", description="How often WAL changes are shipped to the replica.")
    retention: Duration = Field(default="168h", description="How long snapshots and WAL segments are kept.")
    resources: ComputeResources = Field(
        default_factory=_resources("10m", "32Mi", "200m", "128Mi"), description="Sidecar resources."
    )
    restore_resources: ComputeResources = Field(
        default_factory=_resources("100m", "64Mi", "2", "256Mi"),
        description="Resources of the restore (init container, and the rehearsal Job). Restoring costs about 1 "
        "CPU-second per 100 MB and uses more than one core: under the sidecar's 200m limit it takes 5.6 times "
        "longer (`make bench`). An init container's request does not add to the pod's steady-state request.",
    )

    @field_validator("sync_interval", "retention")
    @classmethod
    def _positive(cls, duration: str) -> str:
        return _go_duration_in_range(
            duration, above="0s", reason="Litestream refuses to start with a zero sync interval or retention"
        )


class VolSync(SettingsModel):
    """A second, independent backup: restic snapshots of the SQLite volumes."""

    repository: str = Field(min_length=1, description="Secret (in the namespace) holding the restic repository config.")
    schedule: str = Field(default="0 */6 * * *", description="Snapshot cron (five fields).")
    keep_daily: int = Field(default=7, ge=1, le=365, description="Daily snapshots kept.")
    keep_weekly: int = Field(default=4, ge=0, le=104, description="Weekly snapshots kept.")
    volume_snapshot_class: str | None = Field(default=None, description="VolumeSnapshotClass; default: the cluster's.")


class LocalStorage(StrEnum):
    """Where a SQLite database lives while its application runs (the NFS replica is the durable copy)."""

    DISPOSABLE = "disposable"
    """A volume that lives and dies with the pod; every start restores from the backup."""
    PERSISTENT = "persistent"
    """A retained PersistentVolumeClaim that keeps the database across restarts; each start checks it first."""


class LocalVolume(SettingsModel):
    """The application's own copy of its database: Headscale's in the sqlite stage, Headplane's always."""

    storage: LocalStorage = Field(
        default=LocalStorage.DISPOSABLE,
        description="`disposable`: an emptyDir (or a generic ephemeral volume of `ephemeralStorageClass`) per pod; a "
        "replacement pod starts on any eligible node and restores from the backup with no volume to detach; a node "
        "loss loses at most the unreplicated tail (about `syncInterval` + 1s), a graceful stop nothing. "
        "`persistent`: a retained PVC of `cluster.storageClass`; a node loss loses nothing, but an RWO volume stays "
        "attached to the dead node for about 6 minutes before the pod can start elsewhere. See `recovery`.",
    )
    ephemeral_storage_class: str | None = Field(
        default=None,
        min_length=1,
        description="`disposable` only: StorageClass (node-local, e.g. local-path) of a generic ephemeral volume per "
        "pod, deleted with the pod; default: an emptyDir on the node's disk, capped at the storage size.",
    )

    @model_validator(mode="after")
    def _ephemeral_class_is_disposable(self) -> LocalVolume:
        if self.ephemeral_storage_class is not None and self.storage is LocalStorage.PERSISTENT:
            raise ValueError(
                "ephemeralStorageClass applies to disposable storage only; "
                "a persistent volume uses cluster.storageClass"
            )
        return self


class Rehearsal(SettingsModel):
    """A CronJob per application that restores the latest replica into scratch and checks it, read-only."""

    enabled: bool = Field(default=True, description="Run the restore rehearsal CronJobs.")
    schedule: str = Field(
        default="17 4 * * *",
        pattern=r"^\S+( \S+){4}$",
        description="Cron schedule (five fields, the cluster's time zone).",
    )
    max_age: Duration = Field(
        default="168h",
        description="The rehearsal fails when the replica's newest transaction is older: replication stopped, or the "
        "database was idle that long (a quiet tailnet writes rarely; raise it rather than ignore failures).",
    )

    @field_validator("max_age")
    @classmethod
    def _positive_age(cls, duration: str) -> str:
        return _go_duration_in_range(duration, above="0s", reason="a zero age fails every rehearsal")


def _override_date(value: object) -> object:
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


class BackupAuth(SettingsModel):
    """Authenticated backups: the restore (and the rehearsal) refuse a replica this tailnet's key did not sign."""

    max_age: Duration = Field(
        default="24h",
        description="The restore refuses a replica whose manifest was signed longer ago (exit 44): the signer "
        "re-signs at least every minute while the application runs, so an older one is a rollback (an NFS snapshot, "
        "a copied old directory) or a writer stopped that long. A day by default, so that a promotion the day the "
        "active is lost, or a cluster's restart after a night down, needs no override; lower it to catch younger "
        "rollbacks, at the price of `allowStale` after every longer stop.",
    )
    allow_unsigned: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica without a manifest or "
        "signed with another key (exits 40/41): the first rollout after upgrading to signed backups on disposable "
        "storage, a rotation of the backup key (`keyEpoch`) or of the identity. Inert on any other day; remove it "
        "afterwards.",
    )
    allow_stale: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a manifest older than `maxAge` "
        "(exit 44), after checking the application was really stopped that long. Inert on any other day.",
    )
    key_epoch: int = Field(
        default=1,
        ge=1,
        description="The backup key is derived from the tailnet's Noise key and this number: the same on every site "
        "(set it in Pulumi.yaml, for all stacks); raise it to rotate the key (with `allowUnsigned` for that day).",
    )
    record_position: bool = Field(
        default=True,
        description="Headscale's running pod records the position its signer last signed in the served witness "
        "(outside the export) through a `position-recorder` sidecar with its own ServiceAccount (get/patch on that one "
        "ConfigMap), and the restore refuses a replica signed below it (exit 44): a rollback younger than `maxAge` "
        "is caught too. Needs the API server reachable from the application's pods (`networkPolicy."
        "apiServerCidrs` under default-deny egress). `false`: rollbacks are caught by `maxAge` alone.",
    )
    recorder_image: Image = Field(
        default="docker.io/curlimages/curl:8.16.0",
        description="Image of the position recorder (a shell and curl: components/scripts/position-recorder.sh).",
    )
    allow_rollback: str | None = Field(
        default=None,
        description="Override: a UTC date (YYYY-MM-DD) on which the restore accepts a replica signed below the "
        "recorded position (exit 44), after a deliberate return to an older copy of the backup. Inert on any other "
        "day; remove it afterwards.",
    )

    @field_validator("allow_unsigned", "allow_stale", "allow_rollback", mode="before")
    @classmethod
    def _utc_date(cls, value: object) -> object:
        return _override_date(value)

    @field_validator("max_age")
    @classmethod
    def _positive_age(cls, duration: str) -> str:
        return _go_duration_in_range(duration, above="0s", reason="a zero age refuses every restore")


class Backup(SettingsModel):
    """Where and how each SQLite database is backed up, restored and checked."""

    nfs: Nfs | None = Field(
        default=None, description="NFS target of the Litestream replicas; required in the sqlite and migrating stages."
    )
    litestream: Litestream = Field(default_factory=Litestream, description="Litestream settings.")
    local: LocalVolume = Field(default_factory=LocalVolume, description="Where each SQLite database lives locally.")
    rehearsal: Rehearsal = Field(default_factory=Rehearsal, description="Scheduled restore rehearsals.")
    auth: BackupAuth = Field(default_factory=BackupAuth, description="Authenticated backups (docs/security.md).")
    volsync: VolSync | None = Field(default=None, description="Optional VolSync ReplicationSource per SQLite volume.")

    @model_validator(mode="after")
    def _volsync_needs_a_claim(self) -> Backup:
        if self.volsync is not None and self.local.storage is LocalStorage.DISPOSABLE:
            raise ValueError(
                "volsync snapshots a PersistentVolumeClaim: set local.storage to persistent, or remove volsync "
                "(disposable storage keeps no claim; Litestream's replica is the copy)"
            )
        return self


class Recovery(SettingsModel):
    """What the recovery model (output `recovery`) cannot read from the rendered objects: state your own figures."""

    image_pull_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds to pull the images on a node that has none (stated: measure it on your cluster).",
    )
    start_seconds: int = Field(
        default=5, ge=0, le=3600, description="Seconds from the application's start to its first healthy answer."
    )
    headscale_database_size: Quantity = Field(
        default="64Mi", description="Expected size of Headscale's SQLite database (restore time scales with it)."
    )
    headplane_database_size: Quantity = Field(
        default="16Mi", description="Expected size of Headplane's SQLite database."
    )
    node_monitor_grace_seconds: int = Field(
        default=40,
        ge=0,
        le=3600,
        description="The cluster's kube-controller-manager `--node-monitor-grace-period` (40s by default): how long "
        "a silent node stays Ready before it is marked unreachable.",
    )
    promotion_seconds: int = Field(
        default=600,
        ge=0,
        le=86400,
        description="Seconds your operators need to notice a lost site, confirm it is lost and start `make promote` "
        "(the human part of a promotion: the command's own run time is measured, bench/measured/promotion.json).",
    )


class ObjectStore(SettingsModel):
    destination_path: str = Field(
        pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/\S*)?$",
        description="Barman destination, `s3://bucket/path`.",
    )
    endpoint_url: HttpsUrl | None = Field(
        default=None, description="S3 endpoint for non-AWS stores (e.g. Ceph RGW, MinIO)."
    )
    retention: str = Field(default="30d", pattern=r"^[1-9][0-9]*[dwm]$", description="Backup retention, e.g. 30d, 4w.")


class ReplicaSource(StrEnum):
    ARCHIVE = "archive"
    STREAMING = "streaming"


class Postgres(SettingsModel):
    instances: int = Field(default=1, ge=1, le=9, description="CNPG instances (one primary + replicas), one per node.")
    replica_source: ReplicaSource = Field(
        default=ReplicaSource.ARCHIVE,
        description="How a standby's replica cluster follows the active one: `archive` (the shared WAL archive) or "
        "`streaming` (replication connection to `streamingHost`, plus the archive as fallback).",
    )
    streaming_host: HostAddress | None = Field(
        default=None,
        description="Address of the active cluster's PostgreSQL as the standby reaches it (e.g. through the tailnet "
        "gateway); required for `streaming`. The active cluster's TLS Secrets `headscale-db-replication` and "
        "`headscale-db-ca` must be copied to the standby's namespace as `active-db-replication` and `active-db-ca`.",
    )
    resources: ComputeResources = Field(
        default_factory=_resources("100m", "256Mi", "1", "1Gi"), description="Resources of each instance."
    )
    image: PostgresImage = Field(
        default="ghcr.io/cloudnative-pg/postgresql:15.18", description="PostgreSQL operand image."
    )
    storage_size: Quantity = Field(default="5Gi", description="Volume size per instance.")
    backup_schedule: str = Field(default="0 0 3 * * *", description="ScheduledBackup cron (six fields, seconds first).")
    object_store: ObjectStore | None = Field(
        default=None, description="WAL archive and base backups; required in the postgres stage."
    )


class Migration(SettingsModel):
    """The SQLite → PostgreSQL Job of the migrating stage."""

    image: Image | None = Field(
        default=None,
        description="Image with python, psql, pgloader and this repository's `migration` package "
        "(built from images/migrate/Dockerfile); required in the migrating stage.",
    )
    force: bool = Field(
        default=False,
        description="Wipe a target that already holds data, or that an earlier run left unverified, before loading.",
    )
    deadline_seconds: int = Field(default=3600, ge=60, le=86400, description="The Job fails after this long.")


class Database(SettingsModel):
    stage: DatabaseStage = Field(
        default=DatabaseStage.SQLITE, description="`sqlite`, `migrating` or `postgres` (see the design)."
    )
    postgres: Postgres = Field(default_factory=Postgres, description="The CloudNativePG cluster.")
    migration: Migration = Field(default_factory=Migration, description="The migration Job.")


#: Bounds of a router enrolment key's lifetime: long enough for a pod to be scheduled, pull its image and enrol;
#: short enough that the spare unused key each `pulumi up` leaves per replica is dead within a day.
ROUTER_KEY_LIFETIME_BOUNDS = ("10m", "24h")
_KEY_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def key_duration_seconds(text: str) -> int:
    """Seconds in a (pattern-checked) key duration such as `1h30m`, counted as the provider counts them."""
    return sum(int(n) * _KEY_DURATION_UNITS[u] for n, u in re.findall(r"(\d+)([dhms])", text))


class Routers(SettingsModel):
    replicas: int = Field(default=1, ge=1, le=10, description="Subnet-router pods; at most `cluster.nodes`.")
    auth_key_lifetime: str = Field(
        default="1h",
        pattern=r"^(\d+[dhms])+$",
        description="Lifetime of each replica's minted single-use pre-auth key, 10m to 24h: an unused key can "
        "enrol a route-approved router until it expires.",
    )
    auth_key_rotate_before: str = Field(
        default="30m",
        pattern=r"^(\d+[dhms])+$",
        description="`pulumi up` replaces a router key that expires within this window (also used or expired "
        "ones), so a fresh key has at least this long left; shorter than `authKeyLifetime`.",
    )
    mode: RouterMode = Field(
        default=RouterMode.USERSPACE, description="`userspace` (no capabilities) or `kernel` (NET_ADMIN)."
    )
    image: Image = Field(default="ghcr.io/tailscale/tailscale:v1.82.5", description="Tailscale image.")

    @model_validator(mode="after")
    def _short_lived_keys(self) -> Routers:
        lifetime = key_duration_seconds(self.auth_key_lifetime)
        window = key_duration_seconds(self.auth_key_rotate_before)
        low, high = ROUTER_KEY_LIFETIME_BOUNDS
        if not key_duration_seconds(low) <= lifetime <= key_duration_seconds(high):
            raise ValueError(
                f"authKeyLifetime must be {low} to {high} (a single-use key only has to outlive one rollout; a "
                f"longer one leaves a route-approving key live for longer), got {self.auth_key_lifetime}"
            )
        if window >= lifetime:
            raise ValueError(
                f"authKeyRotateBefore ({self.auth_key_rotate_before}) must be shorter than authKeyLifetime "
                f"({self.auth_key_lifetime}), or every pulumi up would replace every key"
            )
        return self


class Proxy(SettingsModel):
    """A TCP port on the gateway IP and where it forwards to."""

    name: DnsLabel = Field(description="Port name on the gateway Service.")
    port: int = Field(ge=1, le=65535, description="Port on the gateway IP.")
    target_host: HostAddress = Field(description="Where the proxy forwards to (a DNS name or an IP address).")
    target_port: int = Field(ge=1, le=65535, description="Target port.")


class GatewayServices(SettingsModel):
    replicas: int = Field(default=1, ge=1, le=10, description="CoreDNS/socat pods; at most `cluster.nodes`.")
    dns_hosts: dict[str, IPAddress] = Field(
        default_factory=dict,
        description="Extra names in the site's zone (`name` → IP); `api` and `gateway` are added for the gateway IP.",
    )
    coredns_image: Image = Field(default="registry.k8s.io/coredns/coredns:v1.12.0", description="CoreDNS image.")
    socat_image: Image = Field(default="docker.io/alpine/socat:1.8.0.1", description="socat image.")
    proxies: list[Proxy] | None = Field(
        default=None,
        description="TCP proxies behind the gateway IP; default: kube-api :6443 and talos :50000 to "
        "`cluster.apiServer`, clustermesh :2379 to the ClusterMesh API server.",
    )
    load_balancer_source_ranges: list[Cidr] = Field(
        default_factory=list,
        description="Source ranges the gateway's LoadBalancer admits (`loadBalancerSourceRanges`); empty: any. The "
        "gateway's clients are the router pods, so a list must hold the pod CIDR (kube-proxy applies it to in-cluster "
        "clients too) and, for kernel routers without SNAT, the tailnet prefix.",
    )


class Gateway(SettingsModel):
    namespace: DnsLabel = Field(default="tailnet-gateway", description="Namespace of the routers and gateway services.")
    pool_label: str = Field(
        default="tailnet", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Value of `io.cilium/lb-pool`."
    )
    routers: Routers = Field(default_factory=Routers, description="Subnet routers.")
    services: GatewayServices = Field(default_factory=GatewayServices, description="CoreDNS and TCP proxies.")


class Endpoint(SettingsModel):
    """How the public hostname is routed, certified and failed over."""

    failover: FailoverMode = Field(default=FailoverMode.NONE, description="`k8gb`, `externalDns` or `none`.")
    ttl: int = Field(default=60, ge=5, le=3600, description="DNS TTL of the public record, seconds.")
    route: RouteKind = Field(
        default=RouteKind.GATEWAY, description="`gateway` (own Gateway + HTTPRoutes) or `ingress`."
    )
    gateway_class: str = Field(default="cilium", min_length=1, description="GatewayClass of the public Gateway.")
    ingress_class: str = Field(default="nginx", min_length=1, description="IngressClass when `route` is `ingress`.")
    tls_issuer: str = Field(default="letsencrypt", min_length=1, description="cert-manager issuer of the certificate.")
    tls_issuer_kind: str = Field(
        default="ClusterIssuer", pattern="^(ClusterIssuer|Issuer)$", description="`ClusterIssuer` or `Issuer`."
    )


class PolicyMode(StrEnum):
    """Who puts the Git policy into Headscale: the file (from the first start), the provider, or nobody."""

    FILE = "file"  # Headscale reads the rendered policy file: enforced from its first start, Git the only owner
    APPLY = "apply"  # database mode, the provider writes the policy over the API (needs bootstrapApiKey)
    DATABASE_UNMANAGED = "databaseUnmanaged"  # database mode, nobody writes: allow-all until someone does


class TailnetPolicySettings(SettingsModel):
    """Where the tailnet ACL policy comes from and who owns the live one."""

    mode: PolicyMode = Field(
        default=PolicyMode.FILE,
        description="`file`: Headscale reads the rendered policy from a mounted file, enforced from its first start "
        "(a change restarts Headscale); `apply`: database mode, the provider writes it over the API; "
        "`databaseUnmanaged`: database mode, nobody writes it, so the tailnet allows everything until someone "
        "does (the plan warns).",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _no_dry_run(cls, mode: object) -> object:
        """`dryRun` used to leave Headscale allow-all without saying so; it is gone, not silently remapped."""
        if mode == "dryRun":
            raise ValueError(
                "'dryRun' was removed: it left the tailnet allow-all; use 'file' (the default: the Git policy is "
                "enforced from Headscale's first start), 'apply' (the provider writes it), or 'databaseUnmanaged' "
                "(allow-all until someone writes a policy, on purpose)"
            )
        return mode

    file: str = Field(
        default="policy/base.hujson", min_length=1, description="Base policy (HuJSON), relative to the project."
    )
    router_tag_owner: str = Field(
        default="group:admins",
        pattern=r"^(group:[a-z0-9][a-z0-9._-]*|[^@\s]+@[^\s]*)$",
        description="Owner of the generated `tag:subnet-router-<site>` tags (a group or a user of the base policy).",
    )


class Monitoring(SettingsModel):
    """Scrape targets, alerts and the state exporter, as prometheus-operator objects."""

    enabled: bool = Field(
        default=True,
        description="Render ServiceMonitors, PodMonitors, a PrometheusRule and the state exporter (needs the "
        "prometheus-operator CRDs and, for most alerts, kube-state-metrics).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels on every monitoring object, for your Prometheus's selectors (e.g. `release: "
        "kube-prometheus-stack`).",
    )
    runbook_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s#\"'{}]+$",
        description="The URL of docs/operations.md on your Git host (no fragment); each alert links "
        "`<runbookUrl>#runbook-<alert>`. Required with `enabled`.",
    )
    exporter_image: Image = Field(
        default="docker.io/library/busybox:1.37.0",
        description="Image of the state exporter's web server (busybox httpd).",
    )
    exporter_interval_seconds: int = Field(
        default=30, ge=5, le=3600, description="How often the state exporter lists the replicas."
    )
    # The defaults follow kube-prometheus-stack's Grafana: its dashboard sidecar watches ConfigMaps labelled
    # `grafana_dashboard: "1"` in every namespace (`searchNamespace: ALL`). The plain Grafana chart's sidecar
    # watches the same label (any value) but only in Grafana's own namespace; rendering into a namespace the
    # program does not create is opt-in, because `pulumi up` fails when that namespace does not exist.
    dashboard: bool = Field(
        default=True,
        description="Render the Grafana dashboard ConfigMap `headscale-ha-dashboard` (control plane, replication, "
        "keys) for Grafana's dashboard sidecar; only with `enabled`.",
    )
    dashboard_labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="Labels the Grafana sidecar selects dashboards by (the Grafana chart's "
        '`sidecar.dashboards.label`/`labelValue`; kube-prometheus-stack: `grafana_dashboard: "1"`).',
    )
    dashboard_namespace: DnsLabel | None = Field(
        default=None,
        description="Namespace of the dashboard ConfigMap; default: the control plane's. Set it to Grafana's "
        "namespace when its sidecar searches only there (the Grafana chart's default); it must exist.",
    )


class NetworkPolicy(SettingsModel):
    """Who may reach the pods; Headplane always reaches Headscale."""

    enabled: bool = Field(
        default=True,
        description="Default-deny ingress in every namespace the program owns, plus the explicit allows; `false` "
        "leaves those namespaces open to every pod.",
    )
    ingress_namespaces: list[DnsLabel] = Field(
        default_factory=list,
        description="Namespaces of the ingress data plane allowed to the HTTP ports; with `ingressCidrs` empty too, "
        "the HTTP ports (the public endpoint) stay open to any source.",
    )
    ingress_cidrs: list[Cidr] = Field(
        default_factory=list, description="Source ranges of proxies without a namespace (e.g. Cilium's envoy)."
    )
    monitoring_namespace: DnsLabel = Field(default="monitoring", description="The only namespace allowed to metrics.")
    cnpg_operator_namespace: DnsLabel = Field(
        default="cnpg-system",
        description="Namespace of the CloudNativePG operator, admitted to PostgreSQL (5432) and the instance "
        "manager (8000).",
    )
    egress: bool = Field(
        default=True,
        description="Default-deny egress in every namespace the program owns too, plus each workload's explicit "
        "allows (docs/security.md); `false` leaves egress open, for a CNI that does not enforce egress.",
    )
    dns_namespace: DnsLabel = Field(
        default="kube-system", description="Namespace of the cluster DNS pods (UDP and TCP 53) name resolvers query."
    )
    dns_pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"k8s-app": "kube-dns"},
        description="Labels of the cluster DNS pods (CoreDNS carries `k8s-app: kube-dns` on kubeadm, Talos, k3s).",
    )
    dns_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="DNS servers that are no pod of `dnsNamespace`, allowed on port 53: NodeLocal DNSCache's "
        "`169.254.20.10/32` (and the kube-dns ClusterIP it binds on each node), or a resolver outside the cluster.",
    )
    api_server_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="The API server's endpoint addresses (`kubectl get endpointslices -n default -l "
        "kubernetes.io/service-name=kubernetes`), not the `kubernetes` ClusterIP: policies see the address after "
        "the Service's DNAT. The subnet routers (their state Secrets), Headscale's position recorder and "
        "CloudNativePG need it: required with `egress`. Cilium matches a node's address by ipBlock only with "
        "`policyCIDRMatchMode: nodes`.",
    )
    api_server_port: int = Field(
        default=6443, ge=1, le=65535, description="Port of those endpoints (6443: kubeadm, Talos; 443: most managed)."
    )
    egress_internet_cidrs: list[Cidr] = Field(
        default_factory=lambda: ["0.0.0.0/0", "::/0"],
        description="The internet, for destinations known only by name (DERP maps and relays, the OIDC issuer, the "
        "object store, the routers' control server and peers); narrow it to your egress ranges. The private, "
        "CGNAT, link-local (cloud metadata) and unique-local ranges and every site's routes and lbPool are always "
        "excepted from it (a listed range inside one of them is taken as meant).",
    )
    egress_hosts: dict[Fqdn, list[Cidr]] = Field(
        default_factory=dict,
        description="Named destinations that are not on the internet (an IdP, an S3 endpoint or a proxy target on "
        "your LAN): host name → its CIDRs, used for that name instead of `egressInternetCidrs`.",
    )
    volsync_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Addresses of the VolSync restic repository, any TCP port; empty: `egressInternetCidrs` on 443.",
    )
    routers_reach_routes: bool = Field(
        default=False,
        description="Let the subnet routers forward tailnet traffic to every address of the site's `routes` (any "
        "pod or Service the tailnet policy admits a client to); off: to the gateway's DNS and proxies only.",
    )

    @model_validator(mode="after")
    def _never_the_metadata_service(self) -> NetworkPolicy:
        """The cloud metadata service hands out node credentials: no listed range may be just that address (a wider
        range is fine, it is excepted)."""
        metadata = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
        lists = {("dnsCidrs",): self.dns_cidrs, ("apiServerCidrs",): self.api_server_cidrs}
        lists |= {("egressInternetCidrs",): self.egress_internet_cidrs, ("volsyncCidrs",): self.volsync_cidrs}
        lists |= {("egressHosts", host): cidrs for host, cidrs in self.egress_hosts.items()}
        problems = [
            FieldProblem((*key, i), "is the cloud metadata service, never an egress destination", cidr)
            for key, cidrs in lists.items()
            for i, cidr in enumerate(cidrs)
            if ipaddress.ip_network(cidr).num_addresses == 1 and ipaddress.ip_network(cidr)[0] in metadata
        ]
        _raise_problems(problems)
        return self
