"""The stack's outputs: those the config decides alone (``site_output_args``, part of the one pass of
program/site_args.py), and the whole set once the site has built its components (``stack_outputs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from headscale_ha.components import headscale as headscale_module
from headscale_ha.components import subnet_routers
from headscale_ha.components.gateway_config import rewrite_kubeconfig
from headscale_ha.components.headplane import Headplane
from headscale_ha.components.headscale import HeadscaleServer
from headscale_ha.components.release import VERSION
from headscale_ha.components.settings import PROJECT, Role
from headscale_ha.components.subnet_routers import advertised_routes
from headscale_ha.components.tailnet_policy import POLICY_CONFIG_MAP, TailnetPolicy
from headscale_ha.program import args
from headscale_ha.program.availability import StackFacts, availability_output, facts_report, stack_facts
from headscale_ha.program.config import StackConfig
from headscale_ha.program.failover import kubectl, promotion_steps
from headscale_ha.program.inventory import must_back_up
from headscale_ha.program.lease_gates import SERVING_LEASE
from headscale_ha.program.recovery import RecoveryInputs, recovery_inputs, recovery_model
from headscale_ha.program.standby import StandbyGate


def endpoints(config: StackConfig) -> dict[str, Any]:
    """Where users, clients and in-cluster tools reach this site; pure, so tests and outputs agree."""
    host = config.tailnet.public_hostname
    result: dict[str, Any] = {
        "serverUrl": f"https://{host}",
        "apiUrl": headscale_module.in_cluster_url(config.namespace),
        "site": config.site.name,
        "role": config.role.value,
        "dnsZone": config.dns_zone,
        "gatewayIp": config.site.gateway_ip,
        "activeSite": config.tailnet.active_site,
        "failover": config.endpoint.failover.value,
    }
    if config.headplane.enabled:
        result["adminUrl"] = f"https://{host}/admin"
    return result


def next_steps(config: StackConfig) -> list[str]:
    """The commands that give this stack API access, in order, aimed at this stack and the right cluster.

    A standby's Headscale runs 0 replicas and its provider talks to the active's API (`headscaleApiUrl`, default
    the public URL): the key is created on the active site's Headscale, then set on this stack.
    """
    tailnet = config.tailnet
    this_stack = tailnet.stack_of(config.site)
    create = "exec deployment/headscale -c headscale -- headscale apikeys create --expiration 90d"
    if config.role is Role.ACTIVE:
        make_key = [
            f"{kubectl(config, config.site)} rollout status deployment/headscale",
            f"{kubectl(config, config.site)} {create}",
        ]
    else:
        active = tailnet.site(tailnet.active_site)
        make_key = [
            f"# this standby's Headscale runs 0 replicas: create the key on the active site {active.name}",
            f"{kubectl(config, active)} {create}",
        ]
    without_keys = [
        f"# until then the subnet routers in {args.routers_namespace(config)} have no pre-auth key and stay not "
        f"ready; pulumi up mints one single-use key per replica, each into its own Secret "
        f"{subnet_routers.AUTHKEY_SECRET}-<N> there "
        "(or set routerAuthKeys instead)"
    ]
    return [
        *make_key,
        f"pulumi config set -s {this_stack} --secret {PROJECT}:bootstrapApiKey '<the key printed above>'",
        f"pulumi up -s {this_stack}",
        *([] if config.router_auth_keys is not None else without_keys),
    ]


def gateway_output(config: StackConfig) -> dict[str, Any]:
    """The `gateway` output: the stable IP, the split-DNS zone, what answers there, and the namespaces."""
    return {
        "ip": config.site.gateway_ip,
        "dnsZone": config.dns_zone,
        "endpoints": args.gateway_endpoints(config),
        "routes": advertised_routes(config.site),
        "namespace": config.gateway.namespace,
        "routersNamespace": args.routers_namespace(config),
    }


def tailnet_kubeconfig(config: StackConfig) -> str | None:
    """The stack's kubeconfig aimed at the API server through the gateway's stable IP (a secret), if it has one."""
    if config.kubeconfig is None:
        return None
    api_port = next((proxy.port for proxy in args.gateway_proxies(config) if proxy.name == "kube-api"), 6443)
    return rewrite_kubeconfig(config.kubeconfig.get_secret_value(), gateway_ip=config.site.gateway_ip, port=api_port)


@dataclass(frozen=True, kw_only=True)
class ReportInputs:
    """The config as the two reports read it: completed by the pods' facts once the site has rendered them."""

    recovery: RecoveryInputs
    availability: StackFacts


@dataclass(frozen=True, kw_only=True)
class SiteOutputArgs:
    """The outputs the stack config decides alone; ``stack_outputs`` adds those of the built components."""

    endpoints: Mapping[str, Any]
    headscale_version: str
    database_stage: str
    backup_key_epoch: int  # with the identity's fingerprint, what the backup key is derived from
    must_back_up: list[dict[str, Any]]
    serving_lease: bool = False  # Headscale runs behind the witness lease (program/lease_gates.py reads it)
    failover: Mapping[str, Any]
    gateway: Mapping[str, Any]
    next_steps: list[str] | None  # None once the stack has API access
    policy_mode: str
    policy_config_map: str  # `<namespace>/<name>` of the ConfigMap the rendered policy is published in
    kubeconfig: str | None  # secret
    #: What the recovery and availability reports read of the config (with the facts of the pods the site renders).
    reports: ReportInputs


def site_output_args(config: StackConfig) -> SiteOutputArgs:
    """The outputs of ``config`` known before any resource exists."""
    return SiteOutputArgs(
        endpoints=endpoints(config),
        headscale_version=config.headscale.version,
        database_stage=config.database.stage.value,
        backup_key_epoch=config.backup.auth.key_epoch,
        must_back_up=must_back_up(config),
        serving_lease=config.tailnet.failover.automatic,
        failover=promotion_steps(config),
        gateway=gateway_output(config),
        next_steps=None if config.bootstrap_api_key is not None else next_steps(config),
        policy_mode=config.policy.mode.value,
        policy_config_map=f"{config.namespace}/{POLICY_CONFIG_MAP}",
        kubeconfig=tailnet_kubeconfig(config),
        reports=ReportInputs(recovery=recovery_inputs(config), availability=stack_facts(config)),
    )


def policy_output(out: SiteOutputArgs, policy: TailnetPolicy) -> dict[str, Any]:
    """The `policy` output: its mode and SHA-256, where it is published, and what the plan found in it."""
    rendered = policy.rendered
    return {
        "mode": out.policy_mode,
        "sha256": rendered.sha256,
        "configMap": out.policy_config_map,
        # False: a Headscale starting without a stored policy allows everything (see policy.mode).
        "enforcedFromStart": policy.enforced_from_start,
        # Findings in a policy Headscale accepts (the plan prints them), and the policy's tests that only the live
        # server can decide.
        "lints": [str(lint) for lint in rendered.lints],
        "testsCheckedAtApply": [
            outcome.path for outcome in rendered.test_outcomes if outcome.verdict == "checked at apply"
        ],
    }


def stack_outputs(
    name: str,
    out: SiteOutputArgs,
    *,
    namespace: pulumi.Output[str],
    headscale: HeadscaleServer,
    headplane: Headplane | None,
    policy: TailnetPolicy,
    gate: StandbyGate | None,
) -> dict[str, Any]:
    """Every output of the stack ``name``, from the config's and from what the site built."""
    pods = {"headscale": headscale.recovery_facts, **({"headplane": headplane.recovery_facts} if headplane else {})}
    recovery = recovery_model(out.reports.recovery, pods)
    outputs: dict[str, Any] = {
        "namespace": namespace,
        "endpoints": out.endpoints,
        "release": VERSION,
        "headscaleVersion": out.headscale_version,
        "databaseStage": out.database_stage,
        # The tailnet identity this site serves with (the identity stack's, or of the keys imported here).
        "identityFingerprint": headscale.identity_fingerprint,
        "backupKeyEpoch": out.backup_key_epoch,
        "mustBackUp": out.must_back_up,
        # RTO and RPO per failure, from the pods rendered here, bench/measured and the `recovery` config.
        "recovery": recovery,
        # What the configuration promises, in short; the whole report is docs/availability/<stack>.md.
        "availability": availability_output(name, facts_report(out.reports.availability, recovery)),
        "failover": out.failover,
        "gateway": out.gateway,
        **({} if out.next_steps is None else {"nextSteps": out.next_steps}),
        "policy": policy_output(out, policy),
    }
    if out.serving_lease:  # only then: a stack without the lease exports what it did before
        outputs[SERVING_LEASE] = True
    if out.kubeconfig is not None:
        outputs["kubeconfig"] = pulumi.Output.secret(out.kubeconfig)
    if gate is not None:
        outputs["follows"] = gate.follows
    return outputs
