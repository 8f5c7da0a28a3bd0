"""TailnetPolicy: the tailnet ACL policy rendered for this stack, published, and enforced from Headscale's start.

The base policy lives in Git; the program renders it with what the sites need (router tags, gateway hosts, route
auto-approvals: see program/args.py). The result goes into a ConfigMap ending in `-policy-rendered` and its SHA-256
into the stack outputs, so every change to the live policy is a reviewable diff of `pulumi preview`.

Who makes Headscale enforce it (``PolicyMode``):
- `file` (default): Headscale's config names the ConfigMap's file, mounted read-only; Headscale loads it before it
  serves, so the tailnet is never open, and Git is the only owner (API and Headplane writes are refused). A policy
  change restarts Headscale (the pod carries the hash).
- `apply`: database mode; the provider writes the policy over the API once the server is rolled out. The database
  keeps it across restarts, but a server that starts with an empty policy store allows everything until then.
- `databaseUnmanaged`: database mode and no writer: allow-all until someone writes a policy. Only on purpose; the
  plan warns and the output `policy.enforcedFromStart` is false.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from headscale_ha.components.pod import labels
from headscale_ha.components.settings import PolicyMode
from headscale_ha.policy.render import RenderedPolicy
from headscale_ha.provider.resources import HeadscalePolicy, PolicyProvider

POLICY_CONFIG_MAP = "headscale-policy-rendered"
HASH_ANNOTATION = "headscale-ha/policy-sha256"
POLICY_KEY = "policy.json"
#: Printed by every plan and `pulumi up` of a stack that chose database mode without a writer.
ALLOW_ALL_WARNING = (
    "policy.mode is databaseUnmanaged: Headscale keeps its policy in the database and nothing writes it, so the "
    "tailnet allows all traffic between all nodes and routes until someone does (headscale policy set, Headplane); "
    "set policy.mode to file (the default) or apply to enforce the Git policy"
)


def enforced_from_start(mode: PolicyMode) -> bool:
    """Whether a Headscale that starts with no stored policy already enforces the Git policy: only in file mode.
    (`apply` writes it after the server is up; its database keeps it across later restarts.)"""
    return mode is PolicyMode.FILE


@dataclass(frozen=True, kw_only=True)
class LiveApi:
    """API access to the Headscale whose live policy this stack owns."""

    url: str  # the Headscale REST API
    headscale_version: str  # the server release; selects the API dialect


@dataclass(frozen=True, kw_only=True)
class TailnetPolicyArgs:
    """The rendered policy and what to do with it."""

    namespace: str  # where the ConfigMap with the rendered policy is published (Headscale's namespace)
    policy: RenderedPolicy  # the policy text and its SHA-256
    mode: PolicyMode  # `file`: Headscale reads it; `apply`: the provider writes it; `databaseUnmanaged`: nobody
    live: LiveApi | None  # API access of the stack that owns the live policy; None: no comparison, no write


class TailnetPolicy(pulumi.ComponentResource):
    """The rendered policy, published in a ConfigMap (in file mode the file Headscale reads). With API access,
    ``live_policy`` then compares it with the live policy (`file`, `databaseUnmanaged`: never written) or writes it
    (`apply`) once the server has rolled out.

    Outputs (also attributes): `configMap` (`config_map_name`), the ConfigMap holding `policy.json`; `sha256`;
    `mode`; `enforcedFromStart` (`enforced_from_start`). Attributes `rendered` (the policy), `config_map` (what the
    Headscale pod waits for in file mode) and `resource_name` (what ``live_policy`` names its resource after).
    """

    rendered: RenderedPolicy
    config_map: k8s.core.v1.ConfigMap
    config_map_name: str
    enforced_from_start: bool
    resource_name: str

    def __init__(self, name: str, args: TailnetPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("headscale-ha:policy:TailnetPolicy", name, None, opts)
        if args.mode is PolicyMode.APPLY and args.live is None:
            raise ValueError("policy mode apply needs API access (args.live)")
        self.resource_name = name
        self.rendered = args.policy
        self.config_map_name = POLICY_CONFIG_MAP
        self.enforced_from_start = enforced_from_start(args.mode)
        # Where the project is stricter than Headscale it warns instead of refusing (policy.check.lint_policy).
        for lint in self.rendered.lints:
            pulumi.log.warn(f"policy lint: {lint}", resource=self)
        for outcome in self.rendered.test_outcomes:
            if outcome.verdict == "checked at apply":
                pulumi.log.info(f"policy test {outcome.path}: checked at apply ({outcome.reason})", resource=self)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-rendered",
            metadata={
                "name": POLICY_CONFIG_MAP,
                "namespace": args.namespace,
                "labels": labels("headscale", "policy"),
                "annotations": {HASH_ANNOTATION: self.rendered.sha256, "headscale-ha/policy-mode": args.mode},
            },
            data={POLICY_KEY: self.rendered.text},
            opts=pulumi.ResourceOptions(parent=self),
        )
        if args.mode is PolicyMode.DATABASE_UNMANAGED:
            pulumi.log.warn(ALLOW_ALL_WARNING, resource=self)
        self.register_outputs(
            {
                "configMap": POLICY_CONFIG_MAP,
                "sha256": self.rendered.sha256,
                "mode": args.mode.value,
                "enforcedFromStart": self.enforced_from_start,
            }
        )


def live_policy(
    policy: TailnetPolicy,
    args: TailnetPolicyArgs,
    *,
    after: Sequence[pulumi.Resource],
    parent: pulumi.Resource,
) -> HeadscalePolicy | None:
    """With API access: the provider's view of the live policy of ``policy``, created after ``after`` (the
    server's Deployment and its route) so it talks to the server this run rolled out: a write to a server still in
    file mode would be refused, and a comparison would see the old file. Writes only in `apply`; in `file` mode the
    comparison shows whether the running server loaded this policy. None without API access.

    A function, not a child of TailnetPolicy: the policy's ConfigMap comes before the server and this comes after
    it, and a component is complete when its constructor returns. Up to 0.1.0 it was that component's child: the
    alias keeps the stacks' existing resource (same name, the old parent), so nothing is replaced.
    """
    if args.live is None:
        return None
    return HeadscalePolicy(
        f"{policy.resource_name}-live",
        policy=policy.rendered.text,
        mode="apply" if args.mode is PolicyMode.APPLY else "dryRun",
        provider=PolicyProvider(api_url=args.live.url, version=args.live.headscale_version),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after), aliases=[pulumi.Alias(parent=policy)]),
    )
