"""TailnetObjects: what lives inside Headscale, managed through its API by the dynamic provider.

Only with `bootstrapApiKey` set. Every stack mints the pre-auth key of its own site's subnet routers (kept in
a Secret the routers read); the active stack alone owns the tailnet-wide objects: the users and Headplane's
API key. Without the bootstrap key, `next_steps` says how to mint and set one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gateway import routers_namespace
from components.pod import labels
from components.settings import PROJECT, Role
from headscale_provider.resources import (
    ApiKey,
    ApiKeyProvider,
    HeadscaleUser,
    PreAuthKey,
    PreAuthKeyProvider,
    UserProvider,
)
from policy.render import router_tag
from program.config import StackConfig

ROUTER_KEY_SECRET = "subnet-router-authkey"


def api_url(config: StackConfig) -> str:
    return config.headscale_api_url or f"https://{config.tailnet.public_hostname}"


def manages_tailnet(config: StackConfig) -> bool:
    """The active stack with API access owns users, Headplane's key and the applied policy."""
    return config.bootstrap_api_key is not None and config.role is Role.ACTIVE


def next_steps(config: StackConfig) -> list[str]:
    """The commands that give this stack API access, in order."""
    return [
        f"kubectl -n {config.namespace} rollout status deployment/headscale",
        f"kubectl -n {config.namespace} exec deployment/headscale -c headscale -- "
        "headscale apikeys create --expiration 90d",
        f"pulumi config set --secret {PROJECT}:bootstrapApiKey '<the key printed above>'",
        "pulumi up",
        *(
            []
            if config.router_auth_key is not None
            else [
                f"# until then the subnet routers in {routers_namespace(config)} have no pre-auth key and stay not "
                f"ready; pulumi up mints it into the Secret {ROUTER_KEY_SECRET} there (or set routerAuthKey instead)"
            ]
        ),
    ]


@dataclass(frozen=True, kw_only=True)
class TailnetObjectsArgs:
    config: StackConfig
    namespace: str
    routers_namespace: str  # where the routers run and read their key


class TailnetObjects(pulumi.ComponentResource):
    """Users, the routers' pre-auth key and Headplane's API key, as far as this stack owns them."""

    router_key_secret: k8s.core.v1.Secret
    headplane_api_key: pulumi.Output[str] | None

    def __init__(self, name: str, args: TailnetObjectsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:tailnet:TailnetObjects", name, None, opts)
        config = args.config
        url, version = api_url(config), config.headscale.version
        child = pulumi.ResourceOptions(parent=self)
        site = config.site.name
        routers = config.gateway.routers
        router_key = PreAuthKey(
            f"{name}-router-key",
            acl_tags=[router_tag(site)],
            reusable=True,
            lifetime=routers.auth_key_lifetime,
            rotate_before=routers.auth_key_rotate_before,
            recreate_if_invalid="reusableOnly",
            provider=PreAuthKeyProvider(api_url=url, version=version),
            opts=child,
        )
        self.router_key_secret = k8s.core.v1.Secret(
            f"{name}-router-key-secret",
            metadata={
                "name": ROUTER_KEY_SECRET,
                "namespace": args.routers_namespace,
                "labels": labels("subnet-router", "auth"),
            },
            type="Opaque",
            string_data={"authkey": pulumi.Output.secret(router_key.key)},
            opts=child,
        )
        self.headplane_api_key = None
        if manages_tailnet(config):
            for user in config.tailnet.users:
                HeadscaleUser(
                    f"{name}-user-{user.name}",
                    user_name=user.name,
                    display_name=user.display_name,
                    email=user.email,
                    force_delete=user.force_delete,
                    provider=UserProvider(api_url=url, version=version),
                    opts=child,
                )
            if config.headplane.enabled:
                key = ApiKey(
                    f"{name}-headplane-api-key",
                    lifetime="2160h",
                    rotate_before="336h",
                    provider=ApiKeyProvider(api_url=url, version=version),
                    opts=child,
                )
                self.headplane_api_key = pulumi.Output.secret(key.key)
        self.register_outputs({"routerKeySecret": f"{args.routers_namespace}/{ROUTER_KEY_SECRET}"})
