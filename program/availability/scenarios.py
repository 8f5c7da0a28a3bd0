"""The failure scenarios of a configuration: what keeps working, what stops, and the `recovery` row of its figures.

A table per state of the site (serving or stopped, standing by, migrating) lists the scenarios it may hold, in
order, each with the condition that selects it; `_words` fills their placeholders. A standby serves nothing: its
own failures cost the tailnet its fallback, and the failures it would face once promoted follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headscale_ha.components.settings import DatabaseStage
from headscale_ha.program.availability.facts import Facts, State, When, always, chosen, first
from headscale_ha.program.availability.figures import scenario_figures
from headscale_ha.program.availability.model import FailureScenario
from headscale_ha.program.availability.phrases import Scenarios, ScenarioText
from headscale_ha.program.availability.words import Words, app_names, fill, sites

POSTGRES = DatabaseStage.POSTGRES


@dataclass(frozen=True)
class Candidate:
    """A scenario a table may hold: its words and the `recovery` row its figures are copied from."""

    text: ScenarioText
    failure: str | None = None
    """The `recovery` row (None: that output models no such failure)."""
    replicated: bool = False
    """The figures are those of the applications Litestream replicates only (a failure of the backup target)."""


CRASH = Candidate(Scenarios.CRASH, "containerCrash")
ONLY_NODE = Candidate(Scenarios.ONLY_NODE, "nodeLoss")
HEADSCALE_NODE = Candidate(Scenarios.HEADSCALE_NODE, "nodeLoss")
BACKUP_TARGET = Candidate(Scenarios.BACKUP_TARGET, "nfsLoss", replicated=True)
POD_REPLACED = Candidate(Scenarios.POD_REPLACED, "nfsLossThenPodReplaced", replicated=True)
CLUSTER = Candidate(Scenarios.CLUSTER, "clusterLoss")

#: The OIDC provider, a start dependency or not.
OIDC = (
    When(lambda f: f.oidc_required, Candidate(Scenarios.OIDC_REQUIRED)),
    When(lambda f: f.oidc and not f.oidc_required, Candidate(Scenarios.OIDC_OPTIONAL)),
)
#: The active site, serving or scaled to 0.
ACTIVE = (
    When(always, CRASH),
    When(lambda f: f.single_node, ONLY_NODE),
    When(lambda f: not f.single_node, HEADSCALE_NODE),
    When(lambda f: not f.single_node, Candidate(Scenarios.ROUTER_NODE)),
    When(lambda f: f.stage is POSTGRES and f.instances > 1, Candidate(Scenarios.POSTGRES_PRIMARY)),
    When(lambda f: f.stage is POSTGRES and f.instances <= 1, Candidate(Scenarios.POSTGRES_INSTANCE)),
    When(lambda f: f.stage is POSTGRES, Candidate(Scenarios.OBJECT_STORE)),
    When(lambda f: f.backed_up, BACKUP_TARGET),
    When(lambda f: f.backed_up, POD_REPLACED),
    When(lambda f: not f.standbys, Candidate(Scenarios.CLUSTER_WITHOUT_STANDBY)),
    When(lambda f: bool(f.standbys), CLUSTER),
    *OIDC,
    When(always, Candidate(Scenarios.SECOND_FAILURE)),
)
#: A standby: its own loss, the active site's (which promotes it), then what it faces once promoted.
STANDBY = (
    When(always, Candidate(Scenarios.THIS_SITE_LOST)),
    When(always, CLUSTER),
    When(lambda f: f.single_node, ONLY_NODE),
    When(lambda f: not f.single_node, HEADSCALE_NODE),
    When(lambda f: f.backed_up, Candidate(Scenarios.STANDBY_BACKUP_TARGET, "nfsLoss", replicated=True)),
    When(lambda f: f.stage is POSTGRES, Candidate(Scenarios.REPLICA_OBJECT_STORE)),
    *OIDC,
)
#: The active site while its database moves to PostgreSQL (Headscale at 0).
MIGRATING = (
    When(always, Candidate(Scenarios.MIGRATION_JOB)),
    When(lambda f: f.nfs is not None, BACKUP_TARGET),
    When(lambda f: f.nfs is not None, POD_REPLACED),
)
TABLES = {
    State.STANDBY: STANDBY,
    State.MIGRATING: MIGRATING,
    State.STOPPED: ACTIVE,
    State.SQLITE: ACTIVE,
    State.POSTGRES: ACTIVE,
}
#: How a lost node running Headscale is replaced.
REPLACEMENT = (
    When(lambda f: f.stage is POSTGRES, Scenarios.RECONNECTS),
    When(lambda f: f.disposable, Scenarios.RESTORES),
    When(always, Scenarios.WAITS),
)


def _node_words(f: Facts, words: Words) -> dict[str, str]:
    """The words of the scenarios of a lost node."""
    detection = f.recovery.detection
    return {
        "crashes": Scenarios.CRASHES.pick(f.headplane),
        "with_volume": Scenarios.WITH_VOLUME.pick(bool(f.litestream_apps)),
        "the_node": Scenarios.THE_NODE.pick(f.active),
        "headplane_listed": Scenarios.HEADPLANE_LISTED.pick(f.headplane),
        "may_share": Scenarios.MAY_SHARE.pick(f.headplane),
        "routers_left": Scenarios.ROUTERS_LEFT.pick(f.routers > 1).format(routers=f.routers),
        "replacement": fill(first(REPLACEMENT, f), words),
        "routes_keep": Scenarios.ROUTES_KEEP.pick(f.routers > 1),
        "gateway_keeps": Scenarios.GATEWAY_KEEPS.pick(f.services > 1),
        "routes_stop": Scenarios.ROUTES_STOP.pick(f.routers > 1),
        "gateway_stops": Scenarios.GATEWAY_STOPS.pick(f.services <= 1).format(
            detection=Scenarios.DETECTION.format(seconds=detection) if detection is not None else ""
        ),
        "extent": Scenarios.EXTENT.pick(f.single_node),
    }


def _words(f: Facts, words: Words) -> dict[str, str]:
    """The words of the scenarios."""
    replicated = f.litestream_apps
    headscale_replicated = "headscale" in replicated
    return {
        **words,
        **_node_words(f, words),
        "archive_followers": Scenarios.ARCHIVE_FOLLOWERS.pick(bool(f.others)),
        "keep_serving": Scenarios.KEEP_SERVING.pick(len(replicated) == 1).format(names=app_names(replicated)),
        "snapshot": Scenarios.SNAPSHOT.pick(headscale_replicated),
        "no_promotion": Scenarios.NO_PROMOTION.pick(bool(f.others) and headscale_replicated),
        "replaced_pod": Scenarios.REPLACED_POD.pick(f.disposable).format(names=app_names(replicated, " or ")),
        "backups": words["nfs_text"] if f.nfs is not None else Scenarios.BACKUPS,
        "whole_site": Scenarios.WHOLE_SITE.pick(f.active),
        "promoted": sites(f.standbys) if f.active else Scenarios.THIS_SITE,
        "promotion_restores": Scenarios.PROMOTION_RESTORES.pick(f.stage is not POSTGRES).format(
            nfs_text=words["nfs_text"]
        ),
        "dns": Scenarios.DNS[f.failover],
        "estimated": Scenarios.ESTIMATED.pick(f.active),
        "during_promotion": Scenarios.DURING_PROMOTION.pick(not f.active),
        "still_streaming": Scenarios.STILL_STREAMING.pick(f.streaming),
        "following": Scenarios.FOLLOWING.pick(f.streaming),
    }


def failures(f: Facts, words: Words, recovery: Mapping[str, Any]) -> list[FailureScenario]:
    """The failure scenarios of this configuration, each with what keeps working, what stops, and the figures of
    ``recovery`` (the stack's `recovery` output) for it."""
    words = _words(f, words)
    return [
        FailureScenario(
            scenario=fill(candidate.text.scenario, words),
            keeps=fill(candidate.text.keeps, words),
            stops=fill(candidate.text.stops, words),
            figures=scenario_figures(
                recovery, candidate.failure, f.litestream_apps if candidate.replicated else f.apps
            ),
        )
        for candidate in chosen(TABLES[f.state], f)
    ]
