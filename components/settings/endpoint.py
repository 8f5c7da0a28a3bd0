"""The public endpoint: how the hostname is routed into the cluster, certified and failed over between sites."""

from __future__ import annotations

from pydantic import Field

from headscale_ha.components.settings.base import FailoverMode, RouteKind, SettingsModel


class EndpointSettings(SettingsModel):
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
