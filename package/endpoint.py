"""PublicEndpoint as the component package exposes it: the public hostname's routes and certificate, from plain
inputs.

A facade over components/endpoint.py's PublicEndpoint: it validates every input first (the stack config's value
types and endpoint settings, and what the Python args leave to their caller), then builds that component as its
only child, under the same name.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from typing import Any, NotRequired, TypedDict

import pulumi
from pulumi.errors import InputPropertyError
from pydantic import Field

from headscale_ha.components import endpoint
from headscale_ha.components.config_types import DnsLabel, Fqdn, IPv4
from headscale_ha.components.settings import EndpointSettings, FailoverMode, SettingsModel
from headscale_ha.package import types
from headscale_ha.package.facade import child_options, expose
from headscale_ha.package.inputs import required, schema_path, settings_of


class Backend(TypedDict):
    """A Service in the endpoint's namespace that serves a path."""

    service: str
    """The Service's name."""
    port: int
    """Its HTTP port."""


class PublicEndpointArgs(TypedDict):
    """The one public hostname, the Services behind it, and how it is routed, certified and failed over."""

    namespace: str
    """Namespace of the Certificate, the routes (or Ingress) and the DNS record, beside the backends."""
    hostname: str
    """The one public name (e.g. `vpn.example.org`); `/` and `/admin` are served under it."""
    headscale: Backend
    """Headscale's Service, served on `/` (no path filtered, no request timeout: map streams stay open for hours)."""
    headplane: NotRequired[Backend]
    """Headplane's Service, served on `/admin`. Absent: no admin path."""
    endpoint: types.Endpoint
    """Route kind and classes, TLS issuer, failover mode and DNS TTL."""
    primary_site: str
    """k8gb failover: the geo tag of the site that serves while it is healthy (required non-empty for `k8gb`)."""
    dns_record_target: NotRequired[str]
    (
        "externalDns failover: the IPv4 address this stack publishes for `hostname` (the active site's public "
        "address). Absent: no record is published, as a standby never does."
    )


class _Backend(SettingsModel):
    """A Backend as a route's backendRef needs it: the Service's name and a port it has."""

    service: DnsLabel
    port: int = Field(ge=1, le=65535)


class _EndpointInputs(SettingsModel):
    """The plain inputs of PublicEndpoint, checked with the stack config's value types."""

    namespace: DnsLabel
    # The certificate's only DNS name: cert-manager would refuse anything else later, in its own events.
    hostname: Fqdn
    primary_site: str
    dns_record_target: IPv4 | None = None


def _backend(value: Any, key: str) -> endpoint.Backend:
    """The backend given as input ``key``, its fields required and typed."""
    backend = settings_of(_Backend, value, key)
    return endpoint.Backend(service=backend.service, port=backend.port)


class PublicEndpoint(pulumi.ComponentResource):
    """The public routes of the hostname and their certificate: `/` to Headscale, `/admin` to Headplane, through
    an own Gateway with HTTPRoutes or an Ingress, TLS from cert-manager, and the failover record (a k8gb Gslb, or an
    external-dns DNSEndpoint on the site that publishes) when `endpoint.failover` asks for one."""

    hostname: pulumi.Output[str]
    """The public hostname."""
    url: pulumi.Output[str]
    """`https://<hostname>`: the login server URL of clients and routers."""
    tls_secret: pulumi.Output[str]
    """The Secret cert-manager writes the certificate to."""
    route_kind: pulumi.Output[str]
    """`gateway` or `ingress`: what serves the hostname."""
    route: pulumi.Output[str]
    """The name of the HTTPRoute (and its Gateway) or the Ingress serving the hostname."""

    @staticmethod
    def component_args(
        args: PublicEndpointArgs, opts: pulumi.ResourceOptions | None = None
    ) -> endpoint.PublicEndpointArgs:
        """The Python component's args from these inputs, every one checked first (the provider calls it before
        constructing, so a bad input is reported as the invalid property it is)."""
        plain = settings_of(
            _EndpointInputs, {k: v for k, v in args.items() if k not in ("headscale", "headplane", "endpoint")}
        )
        headscale = _backend(required(args, "headscale"), "headscale")
        headplane_input = args.get("headplane")
        headplane = None if headplane_input is None else _backend(headplane_input, "headplane")
        settings = settings_of(EndpointSettings, required(args, "endpoint"), "endpoint")
        if settings.failover is FailoverMode.K8GB and not plain.primary_site:
            at = schema_path("primary_site")
            raise InputPropertyError(
                at,
                f"{at}: is required with endpoint.failover k8gb (the geo tag of the site that serves while it is "
                f"healthy), got {plain.primary_site!r}",
            )
        return endpoint.PublicEndpointArgs(
            namespace=plain.namespace,
            hostname=plain.hostname,
            headscale=headscale,
            headplane=headplane,
            endpoint=settings,
            primary_site=plain.primary_site,
            dns_record_target=plain.dns_record_target,
        )

    def __init__(self, name: str, args: PublicEndpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        component_args = self.component_args(args, opts)
        super().__init__("headscale-ha:index:PublicEndpoint", name, None, opts)
        public = endpoint.PublicEndpoint(name, component_args, child_options(self, opts))
        expose(
            self,
            {
                "hostname": public.hostname,
                "url": public.url,
                "tls_secret": public.tls_secret,
                "route_kind": public.route_kind,
                "route": public.route_name,
            },
        )
