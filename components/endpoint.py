"""PublicEndpoint: one hostname, `/` to Headscale and `/admin` to Headplane, TLS from cert-manager.

Gateway API (an own Gateway with HTTPRoutes) or a classic Ingress, chosen by `endpoint.route`. The Noise
upgrade (`/ts2021`) and the long-poll map requests are plain HTTP on `/`: no path of Headscale is filtered,
and the request timeout on that rule is disabled so streams are not cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.pod import labels
from components.settings import FailoverMode, Role, RouteKind
from program.config import StackConfig

NAME = "headscale-public"
TLS_SECRET = f"{NAME}-tls"


@dataclass(frozen=True, kw_only=True)
class Backend:
    service: str
    port: int


@dataclass(frozen=True, kw_only=True)
class PublicEndpointArgs:
    config: StackConfig
    namespace: str
    headscale: Backend
    headplane: Backend | None


def _paths(args: PublicEndpointArgs) -> list[tuple[str, Backend]]:
    """Longest prefix first."""
    return ([("/admin", args.headplane)] if args.headplane else []) + [("/", args.headscale)]


class PublicEndpoint(pulumi.ComponentResource):
    """The public routes and their certificate."""

    certificate: k8s.apiextensions.CustomResource
    routes: list[pulumi.CustomResource]
    dns: k8s.apiextensions.CustomResource | None

    def __init__(self, name: str, args: PublicEndpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:endpoint:PublicEndpoint", name, None, opts)
        config = args.config
        host = config.tailnet.public_hostname
        child = pulumi.ResourceOptions(parent=self)
        meta = {"namespace": args.namespace, "labels": labels("headscale", "endpoint")}
        self.certificate = k8s.apiextensions.CustomResource(
            f"{name}-certificate",
            api_version="cert-manager.io/v1",
            kind="Certificate",
            metadata={**meta, "name": NAME},
            spec={
                "secretName": TLS_SECRET,
                "dnsNames": [host],
                "issuerRef": {
                    "group": "cert-manager.io",
                    "kind": config.endpoint.tls_issuer_kind,
                    "name": config.endpoint.tls_issuer,
                },
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            },
            opts=child,
        )
        if config.endpoint.route is RouteKind.GATEWAY:
            self.routes = self._gateway(name, args, meta, child)
            served_by = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "name": NAME}
        else:
            self.routes = [self._ingress(name, args, meta, child)]
            served_by = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": NAME}
        self.dns = self._failover(name, config, meta, served_by, child)
        self.register_outputs({"hostname": host})

    @staticmethod
    def _failover(
        name: str, config: StackConfig, meta: dict[str, Any], served_by: dict[str, str], opts: pulumi.ResourceOptions
    ) -> k8s.apiextensions.CustomResource | None:
        """Health-checked DNS that follows the active site; a standby never publishes a record of its own."""
        endpoint, host = config.endpoint, config.tailnet.public_hostname
        if endpoint.failover is FailoverMode.K8GB:
            # Every cluster runs its Gslb; k8gb answers with the primary while it is healthy, else the other.
            return k8s.apiextensions.CustomResource(
                f"{name}-gslb",
                api_version="k8gb.io/v1beta1",
                kind="Gslb",
                metadata={**meta, "name": NAME},
                spec={
                    "resourceRef": served_by,
                    "strategy": {
                        "type": "failover",
                        "primaryGeoTag": config.tailnet.active_site,
                        "dnsTtlSeconds": endpoint.ttl,
                    },
                },
                opts=opts,
            )
        if endpoint.failover is FailoverMode.EXTERNAL_DNS and config.role is Role.ACTIVE:
            address = config.site.public_address
            assert address is not None  # enforced by the config's cross-key rules
            return k8s.apiextensions.CustomResource(
                f"{name}-dns",
                api_version="externaldns.k8s.io/v1alpha1",
                kind="DNSEndpoint",
                metadata={**meta, "name": NAME},
                spec={
                    "endpoints": [{"dnsName": host, "recordType": "A", "recordTTL": endpoint.ttl, "targets": [address]}]
                },
                opts=opts,
            )
        return None

    @staticmethod
    def _gateway(
        name: str, args: PublicEndpointArgs, meta: dict[str, Any], opts: pulumi.ResourceOptions
    ) -> list[pulumi.CustomResource]:
        host = args.config.tailnet.public_hostname
        gateway = k8s.apiextensions.CustomResource(
            f"{name}-gateway",
            api_version="gateway.networking.k8s.io/v1",
            kind="Gateway",
            metadata={**meta, "name": NAME},
            spec={
                "gatewayClassName": args.config.endpoint.gateway_class,
                "listeners": [
                    {
                        "name": "https",
                        "protocol": "HTTPS",
                        "port": 443,
                        "hostname": host,
                        "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": TLS_SECRET}]},
                        "allowedRoutes": {"namespaces": {"from": "Same"}},
                    },
                    {
                        "name": "http",
                        "protocol": "HTTP",
                        "port": 80,
                        "hostname": host,
                        "allowedRoutes": {"namespaces": {"from": "Same"}},
                    },
                ],
            },
            opts=opts,
        )
        rules = [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                "backendRefs": [{"name": backend.service, "port": backend.port}],
                # Map long-polls and the /ts2021 Noise stream stay open for hours; "0s" disables the timeout.
                **({"timeouts": {"request": "0s"}} if prefix == "/" else {}),
            }
            for prefix, backend in _paths(args)
        ]
        route_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[gateway]))
        route = k8s.apiextensions.CustomResource(
            f"{name}-route",
            api_version="gateway.networking.k8s.io/v1",
            kind="HTTPRoute",
            metadata={**meta, "name": NAME},
            spec={
                "parentRefs": [{"name": NAME, "sectionName": "https"}],
                "hostnames": [host],
                "rules": rules,
            },
            opts=route_opts,
        )
        redirect = k8s.apiextensions.CustomResource(
            f"{name}-redirect",
            api_version="gateway.networking.k8s.io/v1",
            kind="HTTPRoute",
            metadata={**meta, "name": f"{NAME}-redirect"},
            spec={
                "parentRefs": [{"name": NAME, "sectionName": "http"}],
                "hostnames": [host],
                "rules": [
                    {
                        "filters": [
                            {"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}
                        ]
                    }
                ],
            },
            opts=route_opts,
        )
        return [gateway, route, redirect]

    @staticmethod
    def _ingress(
        name: str, args: PublicEndpointArgs, meta: dict[str, Any], opts: pulumi.ResourceOptions
    ) -> k8s.networking.v1.Ingress:
        host = args.config.tailnet.public_hostname
        annotations = {}
        if args.config.endpoint.ingress_class == "nginx":
            # ingress-nginx cuts idle upstream reads after 60 s by default; map streams need far longer.
            annotations = {
                "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
                "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
            }
        paths = [
            {
                "path": prefix,
                "pathType": "Prefix",
                "backend": {"service": {"name": backend.service, "port": {"number": backend.port}}},
            }
            for prefix, backend in _paths(args)
        ]
        return k8s.networking.v1.Ingress(
            f"{name}-ingress",
            metadata={**meta, "name": NAME, "annotations": annotations},
            spec={
                "ingressClassName": args.config.endpoint.ingress_class,
                "tls": [{"hosts": [host], "secretName": TLS_SECRET}],
                "rules": [{"host": host, "http": {"paths": paths}}],
            },
            opts=opts,
        )
