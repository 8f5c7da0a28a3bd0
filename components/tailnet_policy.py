"""TailnetPolicy: the tailnet ACL policy rendered for this stack and published for review.

The base policy lives in Git; the program renders it with what the sites need (router tags, gateway hosts, route
auto-approvals: see program/args_gateway.py). The result goes into a ConfigMap ending in `-policy-rendered` and
its SHA-256 into the stack outputs, so every change to the live policy is a reviewable diff of `pulumi preview`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.pod import labels
from components.settings import PolicyMode
from headscale_provider.resources import HeadscalePolicy, PolicyProvider
from policy.render import RenderedPolicy

CONFIG_MAP = "headscale-policy-rendered"
HASH_ANNOTATION = "headscale-ha/policy-sha256"


@dataclass(frozen=True, kw_only=True)
class LiveApi:
    """API access to the Headscale whose live policy this stack owns."""

    url: str  # the Headscale REST API
    headscale_version: str  # the server release; selects the API dialect


@dataclass(frozen=True, kw_only=True)
class TailnetPolicyArgs:
    """The rendered policy and what to do with it."""

    namespace: str  # where the ConfigMap with the rendered policy is published
    policy: RenderedPolicy  # the policy text and its SHA-256
    mode: PolicyMode  # `dryRun` compares with the live policy, `apply` writes it
    live: LiveApi | None  # API access of the stack that owns the live policy; None: only the ConfigMap


class TailnetPolicy(pulumi.ComponentResource):
    """The rendered policy, published in a ConfigMap; with API access also compared with (`dryRun`) or written
    to (`apply`) the live policy.

    Outputs (also attributes): `configMap` (`config_map_name`), the ConfigMap holding `policy.json`; `sha256`;
    `mode`. Attributes `rendered` (the policy), `config_map` and `live` (the HeadscalePolicy, or None).
    """

    rendered: RenderedPolicy
    config_map: k8s.core.v1.ConfigMap
    config_map_name: str
    live: HeadscalePolicy | None

    def __init__(self, name: str, args: TailnetPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:policy:TailnetPolicy", name, None, opts)
        if args.mode is PolicyMode.APPLY and args.live is None:
            raise ValueError("policy mode apply needs API access (args.live)")
        self.rendered = args.policy
        self.config_map_name = CONFIG_MAP
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-rendered",
            metadata={
                "name": CONFIG_MAP,
                "namespace": args.namespace,
                "labels": labels("headscale", "policy"),
                "annotations": {HASH_ANNOTATION: self.rendered.sha256, "headscale-ha/policy-mode": args.mode},
            },
            data={"policy.json": self.rendered.text},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.live = None
        if args.live is not None:
            self.live = HeadscalePolicy(
                f"{name}-live",
                policy=self.rendered.text,
                mode=args.mode.value,
                provider=PolicyProvider(api_url=args.live.url, version=args.live.headscale_version),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"configMap": CONFIG_MAP, "sha256": self.rendered.sha256, "mode": args.mode.value})
