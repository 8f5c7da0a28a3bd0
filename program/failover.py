"""The runbooks that move the active role between sites, as commands: one source for the `failover` output and
for `make promote` / `make demote` (tools/runbook.py), so what the output says is what the command runs.

Promotion is config and `pulumi up`: fence the old active (when it is reachable), promote the data, check the
rollout, let the other standbys follow, move DNS. The program refuses a config with two active sites, and a
site whose role disagrees with `tailnet.activeSite`, so half-way through a promotion no second writer can start.

Every command is idempotent (a `pulumi config set` of the value it already has, a `pulumi up` with nothing to do,
a check that already holds), so a runbook that stopped at a failed command is simply run again.

The `failover` output maps each site this stack can hand over to (the target) to its runbook: on a standby, its
own promotion (the old active is `tailnet.activeSite`); on the active, one per standby. Stacks are fully
qualified (``-s <stackPrefix>/<stack>``, accepted by `pulumi` run in the project directory), kubectl uses the
site's kube context.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headscale_ha.components import headscale as headscale_module
from headscale_ha.components.pod import selector
from headscale_ha.components.settings import PROJECT, DatabaseStage, FailoverMode, Role, Site, TailnetSettings
from headscale_ha.components.workload import ROLLOUT_BUDGET_SECONDS
from headscale_ha.program.config import StackConfig

#: Shared project config: the CLI only writes stack files, and a stack value would replace the whole object.
PROJECT_FILE = "Pulumi.yaml"
#: The runbook command, run from the project directory (tools/runbook.py behind `make`).
RUNBOOK = ".venv/bin/python -m tools.runbook"
#: What skipping the fence risks, said before the runbook asks for confirmation.
LOST_RISK = (
    "{old}'s fence is skipped: nothing stops its Headscale. If {old} is not really gone (a network partition, a "
    "cluster that comes back), it keeps serving its own copy of the registry to every client that reaches it, "
    "and the two registries diverge for good (nodes, keys and routes registered on one are unknown to the other). "
    "Run `make demote SITE={old}` the moment {old} is reachable, before anything else"
)
#: How long `kubectl rollout status` waits for the new active's Headscale (restore included): the budget its
#: Deployment's progress deadline and `pulumi up`'s await share.
ROLLOUT_TIMEOUT_SECONDS = ROLLOUT_BUDGET_SECONDS
#: How long the fence waits for the old active's Headscale pods to be gone (their grace period is 30 s).
FENCE_TIMEOUT_SECONDS = 300


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command of a runbook.

    ``site``: the site whose cluster it reaches (None: only files and the Pulumi backend), so a runbook for a lost
    site skips exactly these; ``until_empty``: a check repeated until it prints nothing (kubectl has no wait for
    "no pod matches": `kubectl wait --for=delete -l` fails when nothing matches).
    """

    argv: tuple[str, ...]
    expect: str
    site: str | None = None
    until_empty: bool = False

    @property
    def line(self) -> str:
        """The command as a shell line; a ``$(...)`` argument is kept for the shell to expand."""
        return " ".join(arg if arg.startswith('"$(') else shlex.quote(arg) for arg in self.argv)

    def as_output(self) -> dict[str, str]:
        return {"run": self.line, "expect": self.expect}


@dataclass(frozen=True, kw_only=True)
class Step:
    """A named group of commands; ``edits`` lists the files and keys they change, for a reviewer."""

    name: str
    why: str
    commands: tuple[Command, ...]
    edits: tuple[dict[str, str], ...] = field(default=())

    def as_output(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "why": self.why,
            "edits": list(self.edits),
            "commands": [command.as_output() for command in self.commands],
        }


@dataclass(frozen=True, kw_only=True)
class Sites:
    """What the runbooks need to know about the tailnet: its sites, their stacks and namespaces."""

    tailnet: TailnetSettings
    namespace_of: Callable[[Site], str]
    stage: DatabaseStage
    failover: FailoverMode
    ttl: int

    @classmethod
    def seen_from(cls, config: StackConfig) -> Sites:
        """As one stack sees them: its own namespace, and the others' as their stacks export them."""

        def namespace_of(site: Site) -> str:
            if site.name == config.site.name:
                return config.namespace
            return f'"$(pulumi stack output -s {config.tailnet.stack_of(site)} namespace)"'

        return cls(
            tailnet=config.tailnet,
            namespace_of=namespace_of,
            stage=config.database.stage,
            failover=config.endpoint.failover,
            ttl=config.endpoint.ttl,
        )


def stack_file(site: Site) -> str:
    """The stack file of ``site``'s stack, beside Pulumi.yaml."""
    return f"Pulumi.{site.stack_name}.yaml"


def kubectl(config: StackConfig, site: Site) -> str:
    """`kubectl` aimed at the control plane of ``site``, as a shell prefix (for the `nextSteps` output)."""
    return " ".join(_kubectl(Sites.seen_from(config), site))


def _kubectl(sites: Sites, site: Site, *args: str) -> tuple[str, ...]:
    return ("kubectl", "--context", site.context, "-n", sites.namespace_of(site), *args)


def pulumi_up(sites: Sites, site: Site, why: str, *, refresh: bool = False) -> Command:
    """`pulumi up --yes` previews first and stops before any change when the preview fails. ``refresh`` reads every
    object of the stack from the cluster first: without it the engine trusts its state, so a cluster rebuilt empty
    would get no step at all and the run would report success."""
    flags = ("--refresh", "--yes") if refresh else ("--yes",)
    return Command(argv=("pulumi", "up", *flags, "-s", sites.tailnet.stack_of(site)), expect=why, site=site.name)


def pulumi_preview(sites: Sites, site: Site, why: str) -> Command:
    """`pulumi preview`: the program and its checks run against the stack's state, and nothing is applied."""
    return Command(argv=("pulumi", "preview", "-s", sites.tailnet.stack_of(site)), expect=why, site=site.name)


def set_role(sites: Sites, site: Site, role: Role) -> Command:
    key = f"{PROJECT}:role"
    argv = ("pulumi", "config", "set", "-s", sites.tailnet.stack_of(site), key, role.value)
    return Command(argv=argv, expect=f"{stack_file(site)} has {key}: {role.value}")


def set_active_site(site: Site) -> Command:
    """The one edit of Pulumi.yaml (`pulumi config set` writes stack files, where the value would replace the whole
    tailnet object); the runbook tool edits that one line and checks nothing else changed."""
    argv = (*RUNBOOK.split(), "set-active-site", site.name)
    return Command(argv=argv, expect=f"{PROJECT_FILE} has tailnet.activeSite: {site.name}")


def headscale_pods(sites: Sites, site: Site) -> Command:
    pods = ",".join(f"{key}={value}" for key, value in selector(headscale_module.APP).items())
    return Command(
        argv=_kubectl(sites, site, "get", "pods", "-l", pods, "-o", "name"),
        expect=f"prints nothing: no Headscale pod left on {site.name} (repeat until it does)",
        site=site.name,
        until_empty=True,
    )


def rollout_status(sites: Sites, site: Site) -> Command:
    argv = _kubectl(sites, site, "rollout", "status", "deployment/headscale", f"--timeout={ROLLOUT_TIMEOUT_SECONDS}s")
    return Command(argv=argv, expect=f"Headscale on {site.name} rolled out and ready", site=site.name)


def file_edit(file: str, key: str, value: str) -> dict[str, str]:
    return {"file": file, "key": key, "value": value}


def fence_step(sites: Sites, old: Site, new: Site) -> Step:
    """The old active stops writing: its role becomes standby and its Headscale scales to 0."""
    return Step(
        name="fence the old active",
        why="two Headscale writers on one registry diverge: the old active stops before the new one starts",
        edits=(
            file_edit(PROJECT_FILE, "tailnet.activeSite", new.name),
            file_edit(stack_file(old), f"{PROJECT}:role", "standby"),
        ),
        commands=(
            set_active_site(new),
            set_role(sites, old, Role.STANDBY),
            pulumi_up(sites, old, f"{old.name}'s Headscale scales to 0"),
            headscale_pods(sites, old),
        ),
    )


def promotion_runbook(sites: Sites, new: Site, old: Site | None) -> list[Step]:
    """The steps that make ``new`` the active site instead of ``old`` (None: no site is active any more, the fence
    is done); every other site follows the new active."""
    fenced = () if old is None else (old.name,)
    others = [site for site in sites.tailnet.sites if site.name not in (*fenced, new.name)]
    data = (
        "the CNPG replica cluster is promoted (replica.enabled false)"
        if sites.stage is DatabaseStage.POSTGRES
        else "the restore init container restores the latest Litestream replica before serving"
    )
    steps = [] if old is None else [fence_step(sites, old, new)]
    steps += [
        Step(
            name="promote the data",
            why="the new active must serve the newest registry",
            edits=(file_edit(stack_file(new), f"{PROJECT}:role", "active"),),
            commands=(set_role(sites, new, Role.ACTIVE), pulumi_up(sites, new, data), rollout_status(sites, new)),
        ),
    ]
    if others:
        steps.append(
            Step(
                name="follow the new active",
                why=f"the other standbys check (and, on PostgreSQL, replicate) the active named by "
                f"tailnet.activeSite, now {new.name}",
                commands=tuple(pulumi_up(sites, site, f"{site.name} follows {new.name}") for site in others),
            )
        )
    return steps


def dns_instruction(sites: Sites, new: Site) -> str:
    """What moves the public name to ``new``: automatic with k8gb and external-dns, else a hand edit."""
    host = sites.tailnet.public_hostname
    return {
        FailoverMode.K8GB: f"automatic: the Gslb's primaryGeoTag becomes {new.name} (TTL {sites.ttl}s)",
        FailoverMode.EXTERNAL_DNS: f"automatic: only the active stack publishes the DNSEndpoint (TTL {sites.ttl}s)",
        FailoverMode.NONE: f"by hand: point the A record of {host} at {new.name}"
        + (f" ({new.public_address})" if new.public_address else ""),
    }[sites.failover]


def demotion_runbook(sites: Sites, site: Site) -> list[Step]:
    """A former active that comes back after its standby was promoted: it stops serving before anything else."""
    return [
        Step(
            name="demote the returning site",
            why=f"{site.name} was the active when it was lost; its Headscale would serve an old registry to every "
            "client that still resolves its address",
            edits=(file_edit(stack_file(site), f"{PROJECT}:role", "standby"),),
            commands=(
                set_role(sites, site, Role.STANDBY),
                pulumi_up(
                    sites,
                    site,
                    f"{site.name}'s Headscale scales to 0 and it follows the active; what its cluster lost (all of "
                    "it, when it was rebuilt) is created again",
                    refresh=True,
                ),
                headscale_pods(sites, site),
            ),
        )
    ]


def _runbook_output(sites: Sites, new: Site) -> dict[str, Any]:
    old = sites.tailnet.active_site
    return {
        "command": f"make promote SITE={new.name}",
        "ifActiveLost": {
            "command": f"make promote SITE={new.name} LOST={old}",
            "risk": LOST_RISK.format(old=old),
            "whenItReturns": f"make demote SITE={old}",
        },
        "steps": [step.as_output() for step in promotion_runbook(sites, new, sites.tailnet.site(old))],
        "dns": dns_instruction(sites, new),
    }


def promotion_steps(config: StackConfig) -> dict[str, dict[str, Any]]:
    """The `failover` output: target site → runbook. A standby lists its own promotion; the active, every standby's."""
    if config.role is Role.STANDBY:
        targets = [config.site]
    else:
        targets = [site for site in config.tailnet.sites if site.name != config.tailnet.active_site]
    sites = Sites.seen_from(config)
    return {site.name: _runbook_output(sites, site) for site in targets}
