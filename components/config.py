"""StackConfig: the one typed source of every knob of a stack.

Values come from Pulumi config (``Pulumi.yaml`` defaults, replaced key by key by ``Pulumi.<stack>.yaml``).
Everything is validated before a single resource is registered, and every problem is reported at once
as ``headscale-ha:<key>: <what is wrong>, got <value>``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, get_args, get_origin

import pulumi
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from components.config_types import (
    AbsolutePath,
    Cidr,
    DnsLabel,
    Duration,
    Fqdn,
    HttpsUrl,
    Image,
    IPAddress,
    IPv4,
    NodePrivateKey,
    PostgresImage,
    Quantity,
    quantity_value,
)
from policy.images import ImageRef

PROJECT = "headscale-ha"
SUPPORTED_HEADSCALE_MINORS = ("0.28", "0.29")
_GONE = object()


class _Model(BaseModel):
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
    K8GB = "k8gb"
    EXTERNAL_DNS = "externalDns"
    NONE = "none"


class RouteKind(StrEnum):
    GATEWAY = "gateway"
    INGRESS = "ingress"


class RouterMode(StrEnum):
    USERSPACE = "userspace"
    KERNEL = "kernel"


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


class ResourceAmounts(_Model):
    cpu: Quantity = Field(description="CPU, as a Kubernetes quantity (cores).")
    memory: Quantity = Field(description="Memory, as a Kubernetes quantity (bytes).")


class ComputeResources(_Model):
    """Requests and limits of one container; limits must not be below requests."""

    requests: ResourceAmounts = Field(description="Resources the scheduler reserves.")
    limits: ResourceAmounts = Field(description="Hard ceiling; memory above it OOM-kills the container.")

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> ComputeResources:
        for field in ("cpu", "memory"):
            request, limit = getattr(self.requests, field), getattr(self.limits, field)
            if quantity_value(limit) < quantity_value(request):
                raise ValueError(f"limits.{field} ({limit}) is below requests.{field} ({request})")
        return self


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Callable[[], ComputeResources]:
    return lambda: ComputeResources(
        requests=ResourceAmounts(cpu=cpu, memory=memory),
        limits=ResourceAmounts(cpu=cpu_limit, memory=memory_limit),
    )


# --------------------------------------------------------------------------------------------- tailnet


class Site(_Model):
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

    @model_validator(mode="after")
    def _gateway_in_pool(self) -> Site:
        if ipaddress.ip_address(self.gateway_ip) not in ipaddress.ip_network(self.lb_pool):
            raise ValueError(f"gatewayIp {self.gateway_ip} is outside lbPool {self.lb_pool}")
        return self


class TailnetUser(_Model):
    """A Headscale user the active stack manages through the API."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$", description="User name (policies write it `name@`).")
    display_name: str = Field(default="", description="Display name.")
    email: str = Field(default="", pattern=r"^$|^[^@\s]+@[^@\s]+$", description="E-mail address.")
    force_delete: bool = Field(default=False, description="Delete the user with its nodes when removed from config.")


class Prefixes(_Model):
    v4: Cidr = Field(default="100.64.0.0/10", description="Tailnet IPv4 range; must lie inside 100.64.0.0/10.")
    v6: Cidr = Field(default="fd7a:115c:a1e0::/48", description="Tailnet IPv6 range; inside fd7a:115c:a1e0::/48.")
    allocation: str = Field(
        default="sequential", pattern="^(sequential|random)$", description="`sequential` or `random`."
    )

    @model_validator(mode="after")
    def _inside_tailscale_ranges(self) -> Prefixes:
        if ipaddress.ip_network(self.v4).version != 4:
            raise ValueError(f"v4 {self.v4} is not an IPv4 network")
        if ipaddress.ip_network(self.v6).version != 6:
            raise ValueError(f"v6 {self.v6} is not an IPv6 network")
        if not ipaddress.ip_network(self.v4).subnet_of(ipaddress.IPv4Network("100.64.0.0/10")):
            raise ValueError(f"v4 {self.v4} is outside 100.64.0.0/10, which is all Tailscale clients accept")
        if not ipaddress.ip_network(self.v6).subnet_of(ipaddress.IPv6Network("fd7a:115c:a1e0::/48")):
            raise ValueError(f"v6 {self.v6} is outside fd7a:115c:a1e0::/48, which is all Tailscale clients accept")
        return self


class Tailnet(_Model):
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

    @field_validator("base_domain")
    @classmethod
    def _server_outside_base_domain(cls, base_domain: str, info: ValidationInfo) -> str:
        host = info.data.get("public_hostname")  # absent when publicHostname itself is invalid
        if host is not None and (host == base_domain or host.endswith(f".{base_domain}")):
            raise ValueError(
                f"must be neither publicHostname ({host}) nor a parent domain of it: Headscale refuses to start "
                "when server_url's host is base_domain or inside it (MagicDNS would take the server's name over)"
            )
        return base_domain

    @model_validator(mode="after")
    def _sites_consistent(self) -> Tailnet:
        problems = []
        if self.active_site not in {site.name for site in self.sites}:
            problems.append(f"activeSite {self.active_site} is not one of the sites")
        for attr, what in (("name", "name"), ("gateway_ip", "gatewayIp")):
            seen = [getattr(site, attr) for site in self.sites]
            problems += [f"two sites share the {what} {v}" for v in sorted({v for v in seen if seen.count(v) > 1})]
        zones = [self.zone_of(site) for site in self.sites]
        problems += [f"two sites share the DNS zone {z}" for z in sorted({z for z in zones if zones.count(z) > 1})]
        tailnet_ranges = [ipaddress.ip_network(self.prefixes.v4), ipaddress.ip_network(self.prefixes.v6)]
        for site in self.sites:
            for network in [*site.routes, site.lb_pool]:
                net = ipaddress.ip_network(network)
                if any(net.version == r.version and net.overlaps(r) for r in tailnet_ranges):
                    problems.append(
                        f"site {site.name}: {network} overlaps the tailnet's own addresses; a gateway there would "
                        "be a per-node tailnet IP, not a stable one"
                    )
        networks = [(site.name, ipaddress.ip_network(n)) for site in self.sites for n in [*site.routes, site.lb_pool]]
        for i, (name_a, net_a) in enumerate(networks):
            for name_b, net_b in networks[i + 1 :]:
                if name_a != name_b and net_a.version == net_b.version and net_a.overlaps(net_b):
                    problems.append(f"sites {name_a} and {name_b} overlap ({net_a} and {net_b}); routes must be unique")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def zone_of(self, site: Site) -> str:
        return site.dns_zone or f"{site.name}.tn.{self.internal_domain}"

    def site(self, name: str) -> Site:
        return next(site for site in self.sites if site.name == name)


# --------------------------------------------------------------------------------------------- cluster


class ApiServer(_Model):
    host: str = Field(
        min_length=1, description="Address of the cluster's API server (VIP or name) the gateway proxies to."
    )
    port: int = Field(default=6443, ge=1, le=65535, description="API server port.")


class Cluster(_Model):
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


class Oidc(_Model):
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


class Derp(_Model):
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
            raise ValueError("urls is empty and embedded is off: clients would have no DERP relay")
        return self


class Headscale(_Model):
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
            raise ValueError(f"version {self.version} is not supported; use a 0.28.x or 0.29.x release such as 0.29.2")
        tag = ImageRef.parse(self.image).tag
        if tag.removeprefix("v").split("-")[0] != self.version:
            raise ValueError(f"image tag {tag} does not match version {self.version}")
        return self

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


class Headplane(_Model):
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


class Nfs(_Model):
    """Where the Litestream replicas live. Pods reach it only through a claim: `restricted` admits no `nfs:` volume."""

    server: str | None = Field(
        default=None,
        min_length=1,
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


class Litestream(_Model):
    image: Image = Field(default="docker.io/litestream/litestream:0.5.17", description="Litestream image.")
    sync_interval: Duration = Field(default="1s", description="How often WAL changes are shipped to the replica.")
    retention: Duration = Field(default="168h", description="How long snapshots and WAL segments are kept.")
    resources: ComputeResources = Field(
        default_factory=_resources("10m", "32Mi", "200m", "128Mi"), description="Sidecar resources."
    )

    @field_validator("sync_interval", "retention")
    @classmethod
    def _positive(cls, duration: str) -> str:
        return _go_duration_in_range(
            duration, above="0s", reason="Litestream refuses to start with a zero sync interval or retention"
        )


class VolSync(_Model):
    """A second, independent backup: restic snapshots of the SQLite volumes."""

    repository: str = Field(min_length=1, description="Secret (in the namespace) holding the restic repository config.")
    schedule: str = Field(default="0 */6 * * *", description="Snapshot cron (five fields).")
    keep_daily: int = Field(default=7, ge=1, le=365, description="Daily snapshots kept.")
    keep_weekly: int = Field(default=4, ge=0, le=104, description="Weekly snapshots kept.")
    volume_snapshot_class: str | None = Field(default=None, description="VolumeSnapshotClass; default: the cluster's.")


class Backup(_Model):
    nfs: Nfs | None = Field(
        default=None, description="NFS target of the Litestream replicas; required in the sqlite and migrating stages."
    )
    litestream: Litestream = Field(default_factory=Litestream, description="Litestream settings.")
    volsync: VolSync | None = Field(default=None, description="Optional VolSync ReplicationSource per SQLite volume.")


class ObjectStore(_Model):
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


class Postgres(_Model):
    instances: int = Field(default=1, ge=1, le=9, description="CNPG instances (one primary + replicas), one per node.")
    replica_source: ReplicaSource = Field(
        default=ReplicaSource.ARCHIVE,
        description="How a standby's replica cluster follows the active one: `archive` (the shared WAL archive) or "
        "`streaming` (replication connection to `streamingHost`, plus the archive as fallback).",
    )
    streaming_host: str | None = Field(
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


class Migration(_Model):
    """The SQLite → PostgreSQL Job of the migrating stage."""

    image: Image | None = Field(
        default=None,
        description="Image with python, psql, pgloader and this repository's `migration` package "
        "(built from images/migrate/Dockerfile); required in the migrating stage.",
    )
    force: bool = Field(default=False, description="Wipe a target that already holds data before loading.")
    deadline_seconds: int = Field(default=3600, ge=60, le=86400, description="The Job fails after this long.")


class Database(_Model):
    stage: DatabaseStage = Field(
        default=DatabaseStage.SQLITE, description="`sqlite`, `migrating` or `postgres` (see the design)."
    )
    postgres: Postgres = Field(default_factory=Postgres, description="The CloudNativePG cluster.")
    migration: Migration = Field(default_factory=Migration, description="The migration Job.")


class Routers(_Model):
    replicas: int = Field(default=1, ge=1, le=10, description="Subnet-router pods; at most `cluster.nodes`.")
    auth_key_lifetime: str = Field(
        default="2160h", pattern=r"^(\d+[dhms])+$", description="Lifetime of the routers' minted pre-auth key."
    )
    auth_key_rotate_before: str = Field(
        default="336h", pattern=r"^(\d+[dhms])+$", description="Mint a new router key this long before expiry."
    )
    mode: RouterMode = Field(
        default=RouterMode.USERSPACE, description="`userspace` (no capabilities) or `kernel` (NET_ADMIN)."
    )
    image: Image = Field(default="ghcr.io/tailscale/tailscale:v1.82.5", description="Tailscale image.")


class Proxy(_Model):
    name: DnsLabel = Field(description="Port name on the gateway Service.")
    port: int = Field(ge=1, le=65535, description="Port on the gateway IP.")
    target_host: str = Field(min_length=1, description="Where the proxy forwards to.")
    target_port: int = Field(ge=1, le=65535, description="Target port.")


class GatewayServices(_Model):
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


class Gateway(_Model):
    namespace: DnsLabel = Field(default="tailnet-gateway", description="Namespace of the routers and gateway services.")
    pool_label: str = Field(
        default="tailnet", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Value of `io.cilium/lb-pool`."
    )
    routers: Routers = Field(default_factory=Routers, description="Subnet routers.")
    services: GatewayServices = Field(default_factory=GatewayServices, description="CoreDNS and TCP proxies.")


class Endpoint(_Model):
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
    DRY_RUN = "dryRun"
    APPLY = "apply"


class TailnetPolicySettings(_Model):
    """Where the tailnet ACL policy comes from and who owns the live one."""

    mode: PolicyMode = Field(
        default=PolicyMode.DRY_RUN,
        description="`dryRun` renders and publishes for review; `apply` owns the live policy.",
    )
    file: str = Field(
        default="policy/base.hujson", min_length=1, description="Base policy (HuJSON), relative to the project."
    )
    router_tag_owner: str = Field(
        default="group:admins",
        pattern=r"^(group:[a-z0-9][a-z0-9._-]*|[^@\s]+@[^\s]*)$",
        description="Owner of the generated `tag:subnet-router-<site>` tags (a group or a user of the base policy).",
    )


class NetworkPolicy(_Model):
    """Who may reach the pods; Headplane always reaches Headscale."""

    enabled: bool = Field(default=True, description="Render NetworkPolicies for Headscale and Headplane.")
    ingress_namespaces: list[DnsLabel] = Field(
        default_factory=list,
        description="Namespaces of the ingress data plane allowed to the HTTP ports; with `ingressCidrs` empty too, "
        "the HTTP ports (the public endpoint) stay open to any source.",
    )
    ingress_cidrs: list[Cidr] = Field(
        default_factory=list, description="Source ranges of proxies without a namespace (e.g. Cilium's envoy)."
    )
    monitoring_namespace: DnsLabel = Field(default="monitoring", description="The only namespace allowed to metrics.")


# --------------------------------------------------------------------------------------------- the stack

#: Keys whose values are secrets: they must be set with `pulumi config set --secret`.
SECRET_KEYS = (
    "kubeconfig",
    "noisePrivateKey",
    "derpPrivateKey",
    "oidcClientSecret",
    "routerAuthKey",
    "headplaneApiKey",
    "bootstrapApiKey",
    "objectStoreAccessKeyId",
    "objectStoreSecretAccessKey",
)


class StackConfig(_Model):
    """Every knob of one stack (one cluster)."""

    role: Role = Field(description="`active` serves the tailnet; `standby` keeps the identity, scaled to 0.")
    namespace: DnsLabel = Field(default="headscale", description="Namespace of the control plane.")
    cluster: Cluster = Field(description="The cluster of this stack.")
    tailnet: Tailnet = Field(description="The tailnet shared by every stack (Pulumi.yaml).")
    headscale: Headscale = Field(description="The Headscale server.")
    headplane: Headplane = Field(default_factory=Headplane, description="The Headplane web UI.")
    backup: Backup = Field(default_factory=Backup, description="Litestream backups.")
    database: Database = Field(default_factory=Database, description="Database stage and PostgreSQL cluster.")
    gateway: Gateway = Field(default_factory=Gateway, description="Subnet routers and gateway services.")
    endpoint: Endpoint = Field(default_factory=Endpoint, description="Public endpoint and DNS failover.")
    network_policy: NetworkPolicy = Field(default_factory=NetworkPolicy, description="NetworkPolicies.")
    policy: TailnetPolicySettings = Field(default_factory=TailnetPolicySettings, description="The tailnet ACL policy.")
    kubeconfig: SecretStr | None = Field(
        default=None, description="Secret. Admin kubeconfig; default: the ambient kubeconfig."
    )
    noise_private_key: NodePrivateKey | None = Field(
        default=None, description="Secret. Import an existing Noise key (`privkey:` + 64 hex); default: generated."
    )
    derp_private_key: NodePrivateKey | None = Field(
        default=None, description="Secret. Import an existing embedded-DERP key; default: generated."
    )
    oidc_client_secret: SecretStr | None = Field(
        default=None, description="Secret. OIDC client secret; required with `headscale.oidc`."
    )
    router_auth_key: SecretStr | None = Field(
        default=None, description="Secret. Pre-auth key for the subnet routers; default: minted by the provider."
    )
    bootstrap_api_key: SecretStr | None = Field(
        default=None,
        description="Secret. Headscale API key the provider uses; with it the stack manages users, keys and policy.",
    )
    identity_from: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
        description="`org/project/stack` of the active stack: a standby takes the Noise/DERP keys from its "
        "`identity` output (or import both keys as secret config instead).",
    )
    headscale_api_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Headscale API as reached from where `pulumi up` runs (http(s) URL); default the public URL.",
    )
    object_store_access_key_id: SecretStr | None = Field(
        default=None, description="Secret. S3 access key id of `database.postgres.objectStore`."
    )
    object_store_secret_access_key: SecretStr | None = Field(
        default=None, description="Secret. S3 secret access key of `database.postgres.objectStore`."
    )
    headplane_api_key: SecretStr | None = Field(
        default=None, description="Secret. Headscale API key Headplane uses for OIDC logins; required with OIDC."
    )

    @property
    def site(self) -> Site:
        assert self.cluster.name is not None  # filled in by parse_stack_config
        return self.tailnet.site(self.cluster.name)

    @property
    def dns_zone(self) -> str:
        return self.tailnet.zone_of(self.site)


# --------------------------------------------------------------------------------------------- errors


class ConfigError(pulumi.RunError):
    """Invalid stack config; the message lists every problem, one per line."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = sorted(set(problems))
        super().__init__(
            f"invalid stack config ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):\n  "
            + "\n  ".join(self.problems)
        )


def _shown(value: object) -> str:
    if value is _GONE:
        return "nothing"
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _problem(key: str, what: str, value: object) -> str:
    secret = key.split(".")[0].split("[")[0] in SECRET_KEYS
    return f"{PROJECT}:{key}: {what}, got {'[secret]' if secret and value is not _GONE else _shown(value)}"


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``path`` (for 'did you mean' hints)."""
    model: Any = StackConfig
    for part in path:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        model = model_in(field.annotation)
        if model is None:
            return None
    return model


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X | None``, ``list[X]``, ``Annotated[X, ...]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def _format_loc(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(error: Mapping[str, Any], loc: tuple[str | int, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = sorted(f.alias or n for n, f in model.model_fields.items()) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(known)}"
        return f"unknown key{hint}"
    if kind == "missing":
        return "is required"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return message[0].lower() + message[1:] if message else kind


def _validation_problems(key: str, exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        problems.append(
            _problem(
                _format_loc((key, *loc)),
                _describe(error, (key, *loc)),
                error.get("input", _GONE) if error["type"] != "missing" else _GONE,
            )
        )
    return problems


# --------------------------------------------------------------------------------------------- loading


def _needs_json(annotation: Any) -> bool:
    if get_origin(annotation) is list or model_in(annotation) is not None:
        return True
    return any(_needs_json(arg) for arg in get_args(annotation))


def _cross_checks(sections: Mapping[str, Any]) -> list[str]:
    """Rules that span keys; each runs when the keys it reads validated on their own."""
    problems: list[str] = []

    def have(*keys: str) -> bool:
        return all(sections.get(k) is not None for k in keys)

    if have("cluster", "tailnet"):
        names = [site.name for site in sections["tailnet"].sites]
        if sections["cluster"].name not in names:
            problems.append(
                _problem(
                    "cluster.name", f"is not a site in tailnet.sites ({', '.join(names)})", sections["cluster"].name
                )
            )
    if have("cluster", "gateway"):
        nodes = sections["cluster"].nodes
        for part in ("routers", "services"):
            replicas = getattr(sections["gateway"], part).replicas
            if replicas > nodes:
                problems.append(
                    _problem(
                        f"gateway.{part}.replicas",
                        f"exceeds cluster.nodes ({nodes}); replicas are spread one per node",
                        replicas,
                    )
                )
    if (
        have("cluster", "gateway")
        and sections["gateway"].services.proxies is None
        and sections["cluster"].api_server is None
    ):
        problems.append(
            _problem(
                "cluster.apiServer",
                "is required for the default gateway proxies (kube-api, talos); "
                "set it or list gateway.services.proxies",
                _GONE,
            )
        )
    if have("cluster", "database"):
        instances = sections["database"].postgres.instances
        if instances > sections["cluster"].nodes:
            problems.append(
                _problem(
                    "database.postgres.instances",
                    f"exceeds cluster.nodes ({sections['cluster'].nodes}); instances are spread one per node",
                    instances,
                )
            )
    if have("role", "cluster", "tailnet"):
        active_site = sections["tailnet"].active_site
        is_active_site = sections["cluster"].name == active_site
        if (sections["role"] is Role.ACTIVE) != is_active_site:
            problems.append(
                _problem(
                    "role",
                    f"disagrees with tailnet.activeSite ({active_site}): exactly one site is active; to promote, "
                    "change activeSite and the role of both stacks together",
                    sections["role"].value,
                )
            )
    if have("role") and sections["role"] is Role.STANDBY:
        imported = sections.get("noisePrivateKey") is not None and sections.get("derpPrivateKey") is not None
        if sections.get("identityFrom") is None and not imported:
            problems.append(
                _problem(
                    "identityFrom",
                    "is required on a standby (or import noisePrivateKey and derpPrivateKey): a standby with its own "
                    "keys would be a different server to every client",
                    _GONE,
                )
            )
    if have("endpoint", "tailnet") and sections["endpoint"].failover is FailoverMode.EXTERNAL_DNS:
        missing = sorted(site.name for site in sections["tailnet"].sites if site.public_address is None)
        if missing:
            problems.append(
                _problem(
                    "tailnet.sites",
                    f"need a publicAddress for externalDns failover (missing: {', '.join(missing)})",
                    _GONE,
                )
            )
    standby = have("role") and sections["role"] is Role.STANDBY
    if have("database"):
        postgres_settings = sections["database"].postgres
        if postgres_settings.replica_source is ReplicaSource.STREAMING and postgres_settings.streaming_host is None:
            problems.append(
                _problem("database.postgres.streamingHost", "is required when replicaSource is streaming", _GONE)
            )
    if standby and have("database") and sections["database"].stage is DatabaseStage.MIGRATING:
        problems.append(
            _problem(
                "database.stage",
                "a standby never migrates; migrate the active stack, then move the standby to postgres",
                "migrating",
            )
        )
    if have("database", "backup"):
        stage = sections["database"].stage
        if stage in (DatabaseStage.SQLITE, DatabaseStage.MIGRATING) and sections["backup"].nfs is None:
            problems.append(
                _problem(
                    "backup.nfs",
                    f"is required in the {stage} stage: Litestream is the only backup of the SQLite database",
                    _GONE,
                )
            )
        needs_store = stage in (DatabaseStage.MIGRATING, DatabaseStage.POSTGRES)
        if needs_store and not (sections.get("objectStoreAccessKeyId") and sections.get("objectStoreSecretAccessKey")):
            problems.append(
                _problem(
                    "objectStoreAccessKeyId",
                    f"and objectStoreSecretAccessKey are required in the {stage} stage (WAL archive credentials)",
                    _GONE,
                )
            )
        if stage is DatabaseStage.MIGRATING and sections["database"].migration.image is None:
            problems.append(
                _problem(
                    "database.migration.image",
                    "is required in the migrating stage: build images/migrate/Dockerfile, push it, pin it here",
                    _GONE,
                )
            )
        if needs_store and sections["database"].postgres.object_store is None:
            problems.append(
                _problem(
                    "database.postgres.objectStore",
                    f"is required in the {stage} stage: WAL archiving is the backup of the PostgreSQL cluster",
                    _GONE,
                )
            )
    if have("headscale") and sections["headscale"].oidc is not None and sections.get("oidcClientSecret") is None:
        problems.append(
            _problem(
                "oidcClientSecret",
                "is required when headscale.oidc is set (pulumi config set --secret oidcClientSecret ...)",
                _GONE,
            )
        )
    if (
        have("headscale", "headplane")
        and sections["headscale"].oidc is not None
        and sections["headplane"].enabled
        and sections.get("headplaneApiKey") is None
        and sections.get("bootstrapApiKey") is None
    ):
        problems.append(
            _problem(
                "headplaneApiKey",
                "is required when headscale.oidc is set and Headplane is enabled (Headplane's OIDC login "
                "acts with a Headscale API key), unless bootstrapApiKey lets the stack mint one",
                _GONE,
            )
        )
    noise, derp = sections.get("noisePrivateKey"), sections.get("derpPrivateKey")
    if noise is not None and noise == derp:
        problems.append(
            _problem("derpPrivateKey", "must differ from noisePrivateKey (Headscale refuses equal keys)", derp)
        )
    return problems


def _without_bad_leaves(key: str, value: Any, exc: ValidationError) -> Any | None:
    """The section validated again with every rejected mapping entry left out (so defaults apply), or None.

    Only used to run cross-key rules alongside the section's own errors; its problems are already reported.
    """
    trimmed = copy.deepcopy(value)
    try:
        for error in exc.errors():
            *path, leaf = error["loc"] or (None,)
            holder = trimmed
            for part in path:
                holder = holder[part]
            if not isinstance(leaf, str) or not isinstance(holder, dict):
                return None
            holder.pop(leaf, None)
        return _adapter(key).validate_python(trimmed, by_alias=True)
    except (ValidationError, KeyError, IndexError, TypeError):
        return None


@functools.cache
def _adapter(key: str) -> TypeAdapter[Any]:
    """Validator of one top-level key, with the constraints declared on its field."""
    field = next(f for n, f in StackConfig.model_fields.items() if key in (n, f.alias))
    return TypeAdapter(Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation)


def parse_stack_config(raw: Mapping[str, str], *, stack: str, secret_keys: Iterable[str] = ()) -> StackConfig:
    """Validate raw config values (as Pulumi hands them over: strings, JSON for objects) into a StackConfig.

    ``raw`` maps keys of this project's namespace, without the ``headscale-ha:`` prefix, to their values.
    Raises ConfigError with every problem found.
    """
    fields = {field.alias or name: field for name, field in StackConfig.model_fields.items()}
    secret_keys = set(secret_keys)
    problems: list[str] = []
    sections: dict[str, Any] = {}
    fallback: dict[str, Any] = {}
    for key in sorted(raw):
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(_problem(key, f"unknown key{hint}", raw[key] if key not in SECRET_KEYS else _GONE))
    for key, field in fields.items():
        value: Any = raw.get(key, _GONE)
        if value is not _GONE and key in SECRET_KEYS and key not in secret_keys:
            problems.append(
                _problem(
                    key,
                    f"must be a secret (pulumi config set --secret {key} ...), a plain value would be stored in clear",
                    value,
                )
            )
            continue
        if value is not _GONE and _needs_json(field.annotation) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                problems.append(_problem(key, "must be an object or a list", value))
                continue
        if value is _GONE:
            if field.is_required():
                problems.append(_problem(key, "is required", _GONE))
                continue
            sections[key] = field.get_default(call_default_factory=True)
            continue
        if key == "cluster" and isinstance(value, dict) and value.get("name") is None:
            value = {**value, "name": stack}
        try:
            sections[key] = _adapter(key).validate_python(value, by_alias=True)
        except ValidationError as exc:
            problems += _validation_problems(key, exc)
            # Without its bad leaves the section may still be good enough for the cross-key rules.
            fallback[key] = _without_bad_leaves(key, value, exc)
    problems += _cross_checks({**{k: v for k, v in fallback.items() if v is not None}, **sections})
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({key: sections[key] for key in fields if key in sections})


def load_stack_config() -> StackConfig:
    """Read this project's keys from Pulumi config (stack file over Pulumi.yaml) and validate them."""
    project = pulumi.get_project()
    prefix = f"{project}:"
    available = {**pulumi.runtime.get_config_env(), **pulumi.runtime.config.CONFIG.get()}
    raw = {key[len(prefix) :]: str(pulumi.runtime.get_config(key)) for key in available if key.startswith(prefix)}
    secret = {key for key in raw if pulumi.runtime.is_config_secret(prefix + key)}
    secret |= {
        key[len(prefix) :] for key in pulumi.runtime.config.get_config_secret_keys_env() if key.startswith(prefix)
    }
    return parse_stack_config(raw, stack=pulumi.get_stack(), secret_keys=secret)
