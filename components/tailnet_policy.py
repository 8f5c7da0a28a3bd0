"""TailnetPolicy: the tailnet ACL policy rendered for this stack and published for review.

The base policy lives in Git; the render adds what the sites need (router tags, gateway hosts, route
auto-approvals). The result goes into a ConfigMap ending in `-policy-rendered` and its SHA-256 into the stack
outputs, so every change to the live policy is a reviewable diff of `pulumi preview`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components.pod import labels
from components.settings import PROJECT, PolicyMode
from components.tailnet_objects import api_url, manages_tailnet
from headscale_provider.resources import HeadscalePolicy, PolicyProvider
from policy.model import PolicyError
from policy.render import RenderedPolicy, SiteRoutes, render_policy
from program.config import ConfigError, StackConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFIG_MAP = "headscale-policy-rendered"
HASH_ANNOTATION = "headscale-ha/policy-sha256"


@dataclass(frozen=True, kw_only=True)
class TailnetPolicyArgs:
    config: StackConfig
    namespace: str


def site_routes(config: StackConfig) -> list[SiteRoutes]:
    """Every site with all it advertises: its cluster CIDRs and its tailnet load-balancer pool."""
    return [
        SiteRoutes(name=site.name, gateway_ip=site.gateway_ip, routes=(*site.routes, site.lb_pool))
        for site in config.tailnet.sites
    ]


def render_stack_policy(config: StackConfig, project_root: Path = PROJECT_ROOT) -> RenderedPolicy:
    """The policy of this stack; config errors name the policy file and the path inside it."""
    path = Path(config.policy.file)
    path = path if path.is_absolute() else project_root / path
    try:
        base_text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            [f"{PROJECT}:policy.file: cannot be read ({exc.strerror}), got '{config.policy.file}'"]
        ) from None
    try:
        return render_policy(
            base_text,
            sites=site_routes(config),
            version=config.headscale.version,
            router_tag_owner=config.policy.router_tag_owner,
        )
    except PolicyError as exc:
        raise ConfigError(
            [f"{PROJECT}:policy ({config.policy.file}) {problem.path}: {problem.reason}" for problem in exc.problems]
        ) from None


class TailnetPolicy(pulumi.ComponentResource):
    """The rendered policy, published in a ConfigMap; with API access also compared with (`dryRun`) or written
    to (`apply`) the live policy."""

    rendered: RenderedPolicy
    config_map: k8s.core.v1.ConfigMap

    def __init__(self, name: str, args: TailnetPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:policy:TailnetPolicy", name, None, opts)
        config = args.config
        if config.policy.mode is PolicyMode.APPLY and not manages_tailnet(config):
            raise ConfigError(
                [
                    f"{PROJECT}:policy.mode: apply needs API access on the active stack (set bootstrapApiKey there; "
                    "a standby never writes the policy), got 'apply'"
                ]
            )
        self.rendered = render_stack_policy(config)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-rendered",
            metadata={
                "name": CONFIG_MAP,
                "namespace": args.namespace,
                "labels": labels("headscale", "policy"),
                "annotations": {HASH_ANNOTATION: self.rendered.sha256, "headscale-ha/policy-mode": config.policy.mode},
            },
            data={"policy.json": self.rendered.text},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.live: HeadscalePolicy | None = None
        if manages_tailnet(config):
            self.live = HeadscalePolicy(
                f"{name}-live",
                policy=self.rendered.text,
                mode=config.policy.mode.value,
                provider=PolicyProvider(api_url=api_url(config), version=config.headscale.version),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"sha256": self.rendered.sha256, "mode": config.policy.mode.value})
