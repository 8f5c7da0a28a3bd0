"""PublicEndpoint: one hostname, `/` to Headscale and `/admin` to Headplane, TLS from cert-manager.

Gateway API (an own Gateway with HTTPRoutes) or a classic Ingress, chosen by `endpoint.route`. The Noise
upgrade (`/ts2021`) and the long-poll map requests are plain HTTP on `/`: no path of Headscale is filtered,
and the request timeout on that rule is disabled so streams are not cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.networking.v1 import HTTPIngressPathArgsDict

from headscale_ha.components.pod import Meta, labels
from headscale_ha.components.settings import EndpointSettings, FailoverMode, RouteKind

#: The name of every object of the public endpoint (Gateway, HTTPRoute or Ingress, Certificate, DNS record).
PUBLIC_NAME = "headscale-public"
TLS_SECRET = f"{PUBLIC_NAME}-tls"


@dataclass(frozen=True, kw_only=True)
class Backend:
    """A Service in the endpoint's namespace that serves a path."""

    service: str  # the Service's name
    port: int  # its HTTP port


@dataclass(frozen=True, kw_only=True)
class PublicEndpointArgs:
    """What the public endpoint needs: the hostname, its backends and how it is routed, certified and failed over."""

    namespace: str  # where the Certificate, the routes (or Ingress) and the DNS record live, beside the backends
    hostname: str  # the one public name; `/` and `/admin` are served under it
    headscale: Backend  # served on `/` (no path filtered, no request timeout)
    headplane: Backend | None  # served on `/admin`; None: no admin path
    endpoint: EndpointSettings  # route kind and classes, TLS issuer, failover mode and DNS TTL
    primary_site: str  # k8gb failover: the geo tag of the site that serves while it is healthy
    dns_record_target: str | None  # external-dns failover: the address this stack publishes for `hostname`;
    # None publishes no record (a standby never does)


def _paths(args: PublicEndpointArgs) -> list[tuple[str, Backend]]:
    """Longest prefix first."""
    return ([("/admin", args.headplane)] if args.headplane else []) + [("/", args.headscale)]


class PublicEndpoint(pulumi.ComponentResource):
    """The public routes and their certificate.

    Outputs (also attributes): `hostname`; `url` (`https://<hostname>`); `tlsSecret` (`tls_secret`), the Secret
    cert-manager writes the certificate to; `routeKind` (`route_kind`), `gateway` or `ingress`, and `route`
    (`route_name`), the name of the HTTPRoute/Gateway or Ingress serving the hostname.
    """

    certificate: k8s.apiextensions.CustomResource
    routes: list[pulumi.CustomResource]
    dns: k8s.apiextensions.CustomResource | None
    hostname: str
    url: str
    tls_secret: str
    route_kind: str
    route_name: str

    def __init__(self, name: str, args: PublicEndpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:endpoint:PublicEndpoint", name, None, opts)
        host = args.hostname
        child = pulumi.ResourceOptions(parent=self)
        meta: Meta = {"namespace": args.namespace, "labels": labels("headscale", "endpoint")}
        self.certificate = k8s.apiextensions.CustomResource(
            f"{name}-certificate",
            api_version="cert-manager.io/v1",
            kind="Certificate",
            metadata={**meta, "name": PUBLIC_NAME},
            spec={
                "secretName": TLS_SECRET,
                "dnsNames": [host],
                "issuerRef": {
                    "group": "cert-manager.io",
                    "kind": args.endpoint.tls_issuer_kind,
                    "name": args.endpoint.tls_issuer,
                },
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            },
            opts=child,
        )
        if args.endpoint.route is RouteKind.GATEWAY:
            self.routes = self._gateway(name, args, meta, child)
            served_by = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "name": PUBLIC_NAME}
        else:
            self.routes = [self._ingress(name, args, meta, child)]
            served_by = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": PUBLIC_NAME}
        self.dns = self._failover(name, args, meta, served_by, child)
        self.hostname = host
        self.url = f"https://{host}"
        self.tls_secret = TLS_SECRET
        self.route_kind = args.endpoint.route.value
        self.route_name = PUBLIC_NAME
        self.register_outputs(
            {
                "hostname": host,
                "url": self.url,
                "tlsSecret": TLS_SECRET,
                "routeKind": self.route_kind,
                "route": PUBLIC_NAME,
            }
        )

    @staticmethod
    def _failover(
        name: str,
        args: PublicEndpointArgs,
        meta: Meta,
        served_by: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> k8s.apiextensions.CustomResource | None:
        """Health-checked DNS that follows the active site; a standby never publishes a record of its own."""
        endpoint, host = args.endpoint, args.hostname
        if endpoint.failover is FailoverMode.K8GB:
            # Every cluster runs its Gslb; k8gb answers with the primary while it is healthy, else the other.
            return k8s.apiextensions.CustomResource(
                f"{name}-gslb",
                api_version="k8gb.io/v1beta1",
                kind="Gslb",
                metadata={**meta, "name": PUBLIC_NAME},
                spec={
                    "resourceRef": served_by,
                    "strategy": {
                        "type": "failover",
                        "primaryGeoTag": args.primary_site,
                        "dnsTtlSeconds": endpoint.ttl,
                    },
                },
                opts=opts,
            )
        address = args.dns_record_target
        if endpoint.failover is FailoverMode.EXTERNAL_DNS and address is not None:
            return k8s.apiextensions.CustomResource(
                f"{name}-dns",
                api_version="externaldns.k8s.io/v1alpha1",
                kind="DNSEndpoint",
                metadata={**meta, "name": PUBLIC_NAME},
                spec={
                    "endpoints": [{"dnsName": host, "recordType": "A", "recordTTL": endpoint.ttl, "targets": [address]}]
                },
                opts=opts,
            )
        return None

    @staticmethod
    def _gateway(
        name: str, args: PublicEndpointArgs, meta: Meta, opts: pulumi.ResourceOptions
    ) -> list[pulumi.CustomResource]:
        host = args.hostname
        gateway = k8s.apiextensions.CustomResource(
            f"{name}-gateway",
            api_version="gateway.networking.k8s.io/v1",
            kind="Gateway",
            metadata={**meta, "name": PUBLIC_NAME},
            spec={
                "gatewayClassName": args.endpoint.gateway_class,
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
            metadata={**meta, "name": PUBLIC_NAME},
            spec={
                "parentRefs": [{"name": PUBLIC_NAME, "sectionName": "https"}],
                "hostnames": [host],
                "rules": rules,
            },
            opts=route_opts,
        )
        redirect = k8s.apiextensions.CustomResource(
            f"{name}-redirect",
            api_version="gateway.networking.k8s.io/v1",
            kind="HTTPRoute",
            metadata={**meta, "name": f"{PUBLIC_NAME}-redirect"},
            spec={
                "parentRefs": [{"name": PUBLIC_NAME, "sectionName": "http"}],
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
        name: str, args: PublicEndpointArgs, meta: Meta, opts: pulumi.ResourceOptions
    ) -> k8s.networking.v1.Ingress:
        host = args.hostname
        annotations = {}
        if args.endpoint.ingress_class == "nginx":
            # ingress-nginx cuts idle upstream reads after 60 s by default; map streams need far longer.
            annotations = {
                "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
                "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
            }
        paths: list[HTTPIngressPathArgsDict] = [
            {
                "path": prefix,
                "path_type": "Prefix",
                "backend": {"service": {"name": backend.service, "port": {"number": backend.port}}},
            }
            for prefix, backend in _paths(args)
        ]
        return k8s.networking.v1.Ingress(
            f"{name}-ingress",
            metadata={**meta, "name": PUBLIC_NAME, "annotations": annotations},
            spec={
                "ingress_class_name": args.endpoint.ingress_class,
                "tls": [{"hosts": [host], "secret_name": TLS_SECRET}],
                "rules": [{"host": host, "http": {"paths": paths}}],
            },
            opts=opts,
        )
