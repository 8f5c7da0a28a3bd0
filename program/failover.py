"""The promotion runbook, generated from the config so it names this tailnet's stacks, files and kube contexts.

Promotion is a config change and `pulumi up`: fence the old active (if it is reachable), promote the data,
scale up, let the other standbys follow, move DNS. The program refuses a config with two active sites, so the
order below is enforced by the stack files, not by memory.

The `failover` output maps each site this stack can hand over to (the target) to the ordered steps:
on a standby, only its own promotion (the old active is `tailnet.activeSite`); on the active, one entry per
standby. Every step names the files to edit (``edits``) and the commands, with the fully qualified stack
(``-s <stackPrefix>/<stack>``, accepted by `pulumi` run in the project directory) and the site's kube context.
"""

from __future__ import annotations

from typing import Any

from components.headscale import APP as HEADSCALE_APP
from components.pod import selector
from components.settings import PROJECT, DatabaseStage, FailoverMode, Role, Site
from program.config import StackConfig

#: Shared project config: the CLI only writes stack files, and a stack value would replace the whole object.
PROJECT_FILE = "Pulumi.yaml"


def stack_file(site: Site) -> str:
    """The stack file of ``site``'s stack, beside Pulumi.yaml."""
    return f"Pulumi.{site.stack_name}.yaml"


def _namespace(config: StackConfig, site: Site) -> str:
    """The control plane's namespace on ``site``: this stack's own, or what that stack exports."""
    if site.name == config.site.name:
        return config.namespace
    return f'"$(pulumi stack output -s {config.tailnet.stack_of(site)} namespace)"'


def kubectl(config: StackConfig, site: Site) -> str:
    """`kubectl` aimed at the control plane of ``site``."""
    return f"kubectl --context {site.context} -n {_namespace(config, site)}"


def _set_role(config: StackConfig, site: Site, role: Role) -> dict[str, str]:
    return {
        "file": stack_file(site),
        "key": f"{PROJECT}:role",
        "value": role.value,
        "command": f"pulumi config set -s {config.tailnet.stack_of(site)} {PROJECT}:role {role.value}",
    }


def _set_active_site(site: Site) -> dict[str, str]:
    return {
        "file": PROJECT_FILE,
        "key": "tailnet.activeSite",
        "value": site.name,
        "command": f"by hand: in {PROJECT_FILE}, config.tailnet.value.activeSite: {site.name} "
        "(`pulumi config set` writes stack files, where the value would replace the whole tailnet object)",
    }


def promotion_steps_to(config: StackConfig, new: Site) -> list[dict[str, Any]]:
    """Ordered steps (what, why, edits, command) that make ``new`` the active site instead of today's active."""
    tailnet = config.tailnet
    old = tailnet.site(tailnet.active_site)
    others = [site for site in tailnet.sites if site.name not in (old.name, new.name)]
    postgres = config.database.stage is DatabaseStage.POSTGRES
    pods = ",".join(f"{key}={value}" for key, value in selector(HEADSCALE_APP).items())
    steps: list[dict[str, Any]] = [
        {
            "step": "fence the old active",
            "why": "two Headscale writers on one registry diverge; when the old cluster is gone, make the edits, skip "
            f"the commands, and run them before {old.name} serves again",
            "edits": [_set_active_site(new), _set_role(config, old, Role.STANDBY)],
            "command": f"pulumi up -s {tailnet.stack_of(old)}   # scales {old.name}'s Headscale to 0; then "
            f"{kubectl(config, old)} get pods -l {pods}   # until it lists no pod (no second writer)",
        },
        {
            "step": "promote the data",
            "why": "the new active must serve the newest registry",
            "edits": [_set_role(config, new, Role.ACTIVE)],
            "command": f"pulumi up -s {tailnet.stack_of(new)}   # "
            + (
                "the CNPG replica cluster is promoted (replica.enabled false)"
                if postgres
                else "the restore init container restores the latest Litestream replica before serving"
            ),
        },
        {
            "step": "scale up",
            "why": f"Headscale and Headplane start on {new.name} with the tailnet's identity",
            "edits": [],
            "command": f"{kubectl(config, new)} rollout status deployment/headscale",
        },
    ]
    if others:
        steps.append(
            {
                "step": "follow the new active",
                "why": f"the other standbys check (and, on PostgreSQL, replicate) the active named by "
                f"tailnet.activeSite, now {new.name}",
                "edits": [],
                "command": "; ".join(f"pulumi up -s {tailnet.stack_of(site)}" for site in others),
            }
        )
    steps.append(
        {
            "step": "move DNS",
            "why": f"{tailnet.public_hostname} must point at the new active",
            "edits": [],
            "command": {
                FailoverMode.K8GB: f"automatic: the Gslb's primaryGeoTag becomes {new.name} "
                f"(TTL {config.endpoint.ttl}s)",
                FailoverMode.EXTERNAL_DNS: f"automatic: only the active stack publishes the DNSEndpoint "
                f"(TTL {config.endpoint.ttl}s)",
                FailoverMode.NONE: f"update the A record of {tailnet.public_hostname} by hand"
                + (f" to {new.public_address}" if new.public_address else ""),
            }[config.endpoint.failover],
        }
    )
    return steps


def promotion_steps(config: StackConfig) -> dict[str, list[dict[str, Any]]]:
    """The `failover` output: target site → steps. A standby lists its own promotion; the active, every standby's."""
    if config.role is Role.STANDBY:
        targets = [config.site]
    else:
        targets = [site for site in config.tailnet.sites if site.name != config.tailnet.active_site]
    return {site.name: promotion_steps_to(config, site) for site in targets}
