"""The table "Upgrades and voluntary maintenance": what each upgrade or voluntary disruption costs.

`ROWS` lists every activity the table may hold, in order, with the condition that selects it; an activity's effect
is one sentence, or a table of the sentences that apply, joined (a drain touches every workload of a node).
"""

from __future__ import annotations

from headscale_ha.components.settings import DatabaseStage, FailoverMode
from headscale_ha.program.availability.facts import Facts, When, always, chosen
from headscale_ha.program.availability.model import MaintenanceRow
from headscale_ha.program.availability.phrases import Common, Maintenance
from headscale_ha.program.availability.words import Words, fill

#: An effect: one sentence, or the sentences of a table that apply.
Effect = str | tuple[When[str], ...]

UPGRADE = (
    When(lambda f: not f.active, Maintenance.UPGRADE_STANDBY),
    When(lambda f: f.active and f.stage is DatabaseStage.POSTGRES, Maintenance.UPGRADE_POSTGRES),
    When(lambda f: f.active and f.stage is not DatabaseStage.POSTGRES, Maintenance.UPGRADE_SQLITE),
)
DRAIN = (
    When(lambda f: f.single_node, Maintenance.DRAIN_ONLY_NODE),
    When(lambda f: not f.single_node and f.headscale_runs, Maintenance.DRAIN_SINGLETONS),
    When(lambda f: not f.single_node and f.routers > 1, Maintenance.DRAIN_ROUTERS),
    When(lambda f: not f.single_node and f.routers <= 1, Maintenance.DRAIN_ONE_ROUTER),
    When(lambda f: not f.single_node and f.services > 1, Maintenance.DRAIN_GATEWAY),
    When(lambda f: not f.single_node and f.services <= 1, Maintenance.DRAIN_ONE_GATEWAY_POD),
    When(lambda f: f.stage is not DatabaseStage.SQLITE and f.instances > 1, Maintenance.DRAIN_SWITCHES_OVER),
    When(lambda f: f.stage is not DatabaseStage.SQLITE and f.instances <= 1, Maintenance.DRAIN_BLOCKED),
)
ROWS: tuple[When[tuple[str, Effect]], ...] = (
    When(always, (Maintenance.UPGRADE, UPGRADE)),
    When(lambda f: f.headscale_runs, (Maintenance.CONFIG, Maintenance.CONFIG_ROLLS)),
    When(lambda f: f.headplane_runs, (Maintenance.HEADPLANE, Maintenance.HEADPLANE_RECREATE)),
    When(always, (Maintenance.DRAIN, DRAIN)),
    When(lambda f: bool(f.others), (Maintenance.SWITCH, Maintenance.SWITCH_STEPS)),
)


def _words(f: Facts, words: Words) -> dict[str, str]:
    """The words of the effects."""
    headscale, headplane = f.recovery.headscale_replaced, f.recovery.headplane_replaced
    return {
        **words,
        "outage": Maintenance.OUTAGE.pick(headscale is not None).format(rto=headscale),
        "policy": Maintenance.POLICY[f.policy_mode],
        "headplane_outage": Maintenance.HEADPLANE_OUTAGE.pick(headplane is not None).format(rto=headplane),
        "fallback": Maintenance.FALLBACK.pick(f.active),
        "and_headplane_running": Common.AND_HEADPLANE if f.headplane_runs else "",
        "tail": Maintenance.TAIL.pick(f.stage is not DatabaseStage.POSTGRES),
        "dns": Maintenance.DNS.pick(f.failover is not FailoverMode.NONE),
    }


def _effect(effect: Effect, f: Facts, words: Words) -> str:
    sentences = [effect] if isinstance(effect, str) else chosen(effect, f)
    return " ".join(fill(sentence, words) for sentence in sentences)


def maintenance(f: Facts, words: Words) -> list[MaintenanceRow]:
    """Upgrades and voluntary disruptions: what each costs on this configuration."""
    words = _words(f, words)
    return [MaintenanceRow(activity, _effect(effect, f, words)) for activity, effect in chosen(ROWS, f)]
