"""A cluster's gateway: the HA subnet routers and their enrolment keys, the CoreDNS/socat services and their proxies."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from headscale_ha.components.config_types import Cidr, DnsLabel, HostAddress, Image, IPAddress
from headscale_ha.components.settings.base import RouterMode, SettingsModel

#: Bounds of a router enrolment key's lifetime: long enough for a pod to be scheduled, pull its image and enrol;
#: short enough that the spare unused key each `pulumi up` leaves per replica is dead within a day.
ROUTER_KEY_LIFETIME_BOUNDS = ("10m", "24h")
_KEY_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def key_duration_seconds(text: str) -> int:
    """Seconds in a (pattern-checked) key duration such as `1h30m`, counted as the provider counts them."""
    return sum(int(n) * _KEY_DURATION_UNITS[u] for n, u in re.findall(r"(\d+)([dhms])", text))


class RoutersSettings(SettingsModel):
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
    def _short_lived_keys(self) -> RoutersSettings:
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


class GatewayServicesSettings(SettingsModel):
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


class GatewaySettings(SettingsModel):
    namespace: DnsLabel = Field(default="tailnet-gateway", description="Namespace of the routers and gateway services.")
    pool_label: str = Field(
        default="tailnet", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Value of `io.cilium/lb-pool`."
    )
    routers: RoutersSettings = Field(default_factory=RoutersSettings, description="Subnet routers.")
    services: GatewayServicesSettings = Field(
        default_factory=GatewayServicesSettings, description="CoreDNS and TCP proxies."
    )
