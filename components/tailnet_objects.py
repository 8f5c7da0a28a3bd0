"""TailnetObjects: what lives inside Headscale, managed through its API by the dynamic provider.

Every stack with API access mints the enrolment keys of its own site's subnet routers: one single-use, pre-tagged,
short-lived pre-auth key per replica, each in a Secret of its own that only that replica mounts
(`subnet-router-authkey-<ordinal>`); nothing reusable carries the route-approving tag. The stack that owns the
tailnet also manages the users and Headplane's API key (an API key for Headplane's admin calls, not an enrolment
key). Which stack that is, and whether there is API access at all, the program decides (see program/args.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from headscale_ha.components.settings import TailnetUser
from headscale_ha.components.subnet_routers import router_key_name, router_key_secret, router_key_secrets
from headscale_ha.provider.resources import (
    ApiKey,
    ApiKeyProvider,
    HeadscaleUser,
    PreAuthKey,
    PreAuthKeyProvider,
    UserProvider,
)


@dataclass(frozen=True, kw_only=True)
class TailnetObjectsArgs:
    """How to reach the Headscale API and which objects to keep there."""

    api_url: str  # the Headscale REST API the dynamic provider talks to
    headscale_version: str  # the server release; selects the API dialect
    router_tag: str  # the ACL tag the routers' pre-auth keys carry (auto-approved for the site's routes)
    router_replicas: int  # one single-use key per StatefulSet ordinal 0..router_replicas-1
    router_key_lifetime: str  # validity of each key (a Go duration)
    router_key_rotate_before: str  # a key expiring within this window is replaced at the next up (a Go duration)
    routers_namespace: str  # where the routers run and read their keys
    users: tuple[TailnetUser, ...] = ()  # users to manage; empty on a stack that does not own the tailnet
    mint_headplane_api_key: bool = False  # mint an API key for this site's Headplane (whatever the site's role)


@dataclass(frozen=True)
class KeyExpiry:
    """A provider-managed key's expiry, for the monitoring's key metrics: it only moves when `pulumi up` rotates."""

    kind: str  # "api" or "preauth"
    name: str  # what the key is for: "headplane", or router replica N's "authkey-<N>"
    expiration: pulumi.Output[str]  # RFC 3339, as the provider reads it back from Headscale


class TailnetObjects(pulumi.ComponentResource):
    """Users, the routers' pre-auth keys and Headplane's API key, as far as this stack owns them.

    Outputs: `routerKeySecrets`, `<namespace>/<name>` of each router replica's key Secret (attribute
    `router_key_secrets`, the Secrets themselves; `router_key_secret_refs`, those references). Attribute
    `headplane_api_key`: Headplane's API key (a secret), or None when not minted; not registered as an output.
    """

    router_key_secrets: list[k8s.core.v1.Secret]
    router_key_secret_refs: list[str]
    headplane_api_key: pulumi.Output[str] | None
    key_expiries: list[KeyExpiry]

    def __init__(self, name: str, args: TailnetObjectsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:tailnet:TailnetObjects", name, None, opts)
        url, version = args.api_url, args.headscale_version
        # What this component depends on (the server's Deployment and route: the API its children call) is where
        # every child waits: Pulumi does not pass a component's depends_on to its children, and without the edge
        # the engine would mint keys while the server is still rolling out, and delete the server before them.
        child = pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None)
        # One single-use key per replica, as the Tailscale operator mints one per proxy. `always`: a key that was
        # used (its replica enrolled), expired or vanished is replaced at the next `pulumi up`, so a replica whose
        # state is lost finds a fresh key after that up; an enrolled replica never presents its key again
        # (TS_AUTH_ONCE, see SubnetRouters), so replacing a used key disturbs nobody.
        router_keys = {
            router_key_name(ordinal): PreAuthKey(
                f"{name}-router-key-{ordinal}",
                acl_tags=[args.router_tag],
                reusable=False,
                ephemeral=False,  # the routers keep their node state in Secrets: a restart is not a new node
                lifetime=args.router_key_lifetime,
                rotate_before=args.router_key_rotate_before,
                recreate_if_invalid="always",
                provider=PreAuthKeyProvider(api_url=url, version=version),
                opts=child,
            )
            for ordinal in range(args.router_replicas)
        }
        self.router_key_secrets = router_key_secrets(
            f"{name}-router-key-secret", args.routers_namespace, [key.key for key in router_keys.values()], child
        )
        self.headplane_api_key = None
        self.key_expiries = [KeyExpiry("preauth", data_key, key.expiration) for data_key, key in router_keys.items()]
        for user in args.users:
            HeadscaleUser(
                f"{name}-user-{user.name}",
                user_name=user.name,
                display_name=user.display_name,
                email=user.email,
                force_delete=user.force_delete,
                provider=UserProvider(api_url=url, version=version),
                opts=child,
            )
        if args.mint_headplane_api_key:
            key = ApiKey(
                f"{name}-headplane-api-key",
                lifetime="2160h",
                rotate_before="336h",
                provider=ApiKeyProvider(api_url=url, version=version),
                opts=child,
            )
            self.headplane_api_key = pulumi.Output.secret(key.key)
            self.key_expiries.append(KeyExpiry("api", "headplane", key.expiration))
        self.router_key_secret_refs = [
            f"{args.routers_namespace}/{router_key_secret(n)}" for n in range(args.router_replicas)
        ]
        self.register_outputs({"routerKeySecrets": self.router_key_secret_refs})
