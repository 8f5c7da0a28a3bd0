"""The tailnet every stack shares (Pulumi.yaml): its sites, address ranges, users, domains and identity stack."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator

from headscale_ha.components.config_types import Cidr, DnsLabel, Fqdn, IPAddress, IPv4
from headscale_ha.components.settings.base import (
    PROJECT,
    FieldProblem,
    FieldProblemsError,
    Location,
    SettingsModel,
    location_text,
    raise_problems,
)
from headscale_ha.components.settings.failover import FailoverSettings

#: A network of a site (one of its routes, or its lbPool).
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
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
        description="kubectl context of the site's cluster: the provider's context when `kubeconfig` is unset, and "
        "the commands the stack prints; default the name.",
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
        raise_problems(problems)
        return self


def base_domain_problem(host: str, base_domain: str, *, host_key: str) -> str | None:
    """Why ``base_domain`` cannot be the MagicDNS domain of a server reached at ``host`` (named ``host_key``)."""
    if host == base_domain or host.endswith(f".{base_domain}"):
        return (
            f"must be neither {host_key} ({host}) nor a parent domain of it: Headscale refuses to start "
            "when server_url's host is base_domain or inside it (MagicDNS would take the server's name over)"
        )
    return None


class TailnetSettings(SettingsModel):
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
    failover: FailoverSettings = Field(
        default_factory=FailoverSettings,
        description="Automatic failover behind a witness Lease: its timing, shared by every site (off by default).",
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
    def _sites_consistent(self) -> TailnetSettings:
        problems: list[FieldProblem] = []
        names = [site.name for site in self.sites]
        if self.active_site not in names:
            problems.append(
                FieldProblem(("activeSite",), f"is not one of the sites ({', '.join(names)})", self.active_site)
            )
        problems += self._shared_values()
        problems += self._unique_users()
        networks = self._site_networks()
        problems += self._inside_the_tailnet(networks)
        problems += self._overlapping(networks)
        raise_problems(problems)
        return self

    def _shared_values(self) -> list[FieldProblem]:
        """Of two sites that share a value, the one that sets it is reported (the later when both do), naming the
        other."""
        problems: list[FieldProblem] = []
        for i, site in enumerate(self.sites):
            for j, other in enumerate(self.sites[:i]):
                if site.name == other.name:
                    what = f"is also the name of sites[{j}]: site names are unique"
                    problems.append(FieldProblem(("sites", i, "name"), what, site.name))
                    continue  # its default stack and zone repeat the name: fixing the name fixes them
                if site.gateway_ip == other.gateway_ip:
                    what = f"is also the gatewayIp of sites[{j}] ({other.name}): each site needs its own"
                    problems.append(FieldProblem(("sites", i, "gatewayIp"), what, site.gateway_ip))
                if site.stack_name == other.stack_name:
                    problems.append(self._shared(i, j, "stack", "stack", site.stack_name, "the site name"))
                if self.zone_of(site) == self.zone_of(other):
                    zone = self.zone_of(site)
                    problems.append(self._shared(i, j, "dnsZone", "DNS zone", zone, "<name>.tn.<internalDomain>"))
        return problems

    def _unique_users(self) -> list[FieldProblem]:
        """A user name is one Headscale user and one Pulumi resource (its URN): the engine refuses a program that
        registers a URN twice, so a repeated name is refused here, at the later entry, naming the earlier."""
        first: dict[str, int] = {}
        problems: list[FieldProblem] = []
        for i, user in enumerate(self.users):
            if user.name in first:
                what = f"is also the name of users[{first[user.name]}]: user names are unique"
                problems.append(FieldProblem(("users", i, "name"), what, user.name))
            first.setdefault(user.name, i)
        return problems

    def _site_networks(self) -> list[tuple[int, Location, IpNetwork]]:
        """(site index, location in the site, network) of every site's routes and lbPool."""
        return [
            (i, location, ipaddress.ip_network(network))
            for i, site in enumerate(self.sites)
            for location, network in [
                *((("routes", k), r) for k, r in enumerate(site.routes)),
                (("lbPool",), site.lb_pool),
            ]
        ]

    def _inside_the_tailnet(self, networks: list[tuple[int, Location, IpNetwork]]) -> list[FieldProblem]:
        """A site network overlapping the tailnet's own prefixes: its gateway would be a per-node tailnet IP."""
        problems = []
        for i, location, network in networks:
            for field, prefix in (("prefixes.v4", self.prefixes.v4), ("prefixes.v6", self.prefixes.v6)):
                own = ipaddress.ip_network(prefix)
                if network.version == own.version and network.overlaps(own):
                    what = (
                        f"overlaps the tailnet's own addresses ({field} {prefix}): a gateway there would be a "
                        "per-node tailnet IP, not a stable one"
                    )
                    problems.append(FieldProblem(("sites", i, *location), what, str(network)))
        return problems

    def _overlapping(self, networks: list[tuple[int, Location, IpNetwork]]) -> list[FieldProblem]:
        """The routes and lbPools of two sites overlapping (reported at the later one)."""
        problems = []
        for n, (i, location, network) in enumerate(networks):
            for j, other_location, other in networks[:n]:
                if i != j and network.version == other.version and network.overlaps(other):
                    what = (
                        f"overlaps {location_text(('sites', j, *other_location))} ({other}) of site "
                        f"{self.sites[j].name}: the routes and lbPools of two sites must not overlap"
                    )
                    problems.append(FieldProblem(("sites", i, *location), what, str(network)))
        return problems

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
