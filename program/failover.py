"""The promotion runbook of a stack pair, generated from the config so it names this tailnet's sites.

Promotion is a config change and `pulumi up`: fence the old active (if it is reachable), promote the data,
scale up, move DNS. The program refuses a config with two active sites, so the order below is enforced by the
stack files, not by memory.
"""

from __future__ import annotations

from components.settings import PROJECT, DatabaseStage, FailoverMode, Role
from program.config import StackConfig


def promotion_steps(config: StackConfig) -> list[dict[str, str]]:
    """Ordered steps (what, why, command) that make the other site active, as seen from this stack."""
    sites = [site.name for site in config.tailnet.sites]
    active = config.tailnet.active_site
    standby = next((name for name in sites if name != active), active)
    postgres = config.database.stage is DatabaseStage.POSTGRES
    steps = [
        {
            "step": "fence the old active",
            "why": "two Headscale writers on one registry diverge; skip only when the old cluster is gone",
            "command": f"set tailnet.activeSite: {standby} in Pulumi.yaml and role: standby in Pulumi.{active}.yaml; "
            f"pulumi up -s {active}   # scales {active}'s Headscale to 0",
        },
        {
            "step": "promote the data",
            "why": "the new active must serve the newest registry",
            "command": f"set role: active in Pulumi.{standby}.yaml; pulumi up -s {standby}   # "
            + (
                "the CNPG replica cluster is promoted (replica.enabled false)"
                if postgres
                else "the restore init container restores the latest Litestream replica before serving"
            ),
        },
        {
            "step": "scale up",
            "why": "Headscale and Headplane start on the promoted site with the shared identity",
            "command": f"kubectl -n {config.namespace} rollout status deployment/headscale   # on {standby}",
        },
        {
            "step": "move DNS",
            "why": f"{config.tailnet.public_hostname} must point at the new active",
            "command": {
                FailoverMode.K8GB: f"automatic: the Gslb's primaryGeoTag becomes {standby} "
                f"(TTL {config.endpoint.ttl}s)",
                FailoverMode.EXTERNAL_DNS: f"automatic: only the active stack publishes the DNSEndpoint "
                f"(TTL {config.endpoint.ttl}s)",
                FailoverMode.NONE: f"update the A record of {config.tailnet.public_hostname} by hand",
            }[config.endpoint.failover],
        },
    ]
    if config.noise_private_key is None:
        # Generated keys live only in the active stack's state, protected: demoting that stack (which must then take
        # its identity from elsewhere) would delete them, so `pulumi up` refuses until they are imported.
        steps.insert(
            0,
            {
                "step": "keep the identity",
                "why": f"{active}'s Noise and DERP keys were generated and exist only in its Pulumi state (protected); "
                "both stacks must hold them as secret config before either changes role",
                "command": f"pulumi stack output -s {active} --show-secrets identity; on both stacks: "
                f"pulumi config set --secret {PROJECT}:noisePrivateKey '<noisePrivateKey>' and "
                f"pulumi config set --secret {PROJECT}:derpPrivateKey '<derpPrivateKey>'; "
                f"then pulumi state unprotect -s {active} on its two RandomBytes keys and pulumi up -s {active} "
                "(same keys, now from config)",
            },
        )
    if config.role is Role.STANDBY:
        steps[-4]["note"] = f"this stack ({config.site.name}) is the standby; {PROJECT} refuses two active sites"
    return steps
