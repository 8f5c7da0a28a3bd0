"""The claims of the availability report: its classification, and the lists of what it assumes, what prevents a
stronger claim and what would improve it.

Each list is a table of the sentences it may hold, in order, with the condition under which the configuration makes
that sentence true; the sentences are phrases.py's.
"""

from __future__ import annotations

from headscale_ha.components.settings import DatabaseStage, FailoverMode
from headscale_ha.program.availability.facts import Facts, State, When, always, chosen, first
from headscale_ha.program.availability.phrases import Assumptions, Classification, Improvements, Limits
from headscale_ha.program.availability.words import Words, app_names, fill, sites

POSTGRES, SQLITE = DatabaseStage.POSTGRES, DatabaseStage.SQLITE

#: What the site's control plane is doing, the classification's first part.
STATE = {
    State.STANDBY: Classification.STANDBY,
    State.MIGRATING: Classification.MIGRATING,
    State.STOPPED: Classification.STOPPED,
    State.SQLITE: Classification.SQLITE,
    State.POSTGRES: Classification.POSTGRES,
}
#: What the site's routes survive, its second part.
ROUTES = (
    When(lambda f: f.single_node, Classification.SINGLE_NODE),
    When(lambda f: f.routers > 1, Classification.ROUTES_SURVIVE),
    When(always, Classification.ONE_ROUTER),
)

ASSUMPTIONS = (
    When(always, Assumptions.HEALTHY),
    When(always, Assumptions.CLUSTER_SERVICES),
    When(lambda f: bool(f.exclude_nodes), Assumptions.EXCLUDED_NODES),
    When(always, Assumptions.FIGURES),
)

LIMITS = (
    When(always, Limits.SINGLE_WRITER),
    When(lambda f: f.headplane, Limits.SECOND_SINGLETON),
    When(lambda f: f.loses_tail and f.recovery.node_loss_rpo is not None, Limits.UNREPLICATED_TAIL),
    When(lambda f: f.loses_tail and not f.single_node, Limits.NO_FENCING),
    When(lambda f: not f.disposable and f.stage is not POSTGRES, Limits.PINNED),
    When(lambda f: f.backed_up, Limits.SHARED_TARGET),
    When(lambda f: f.single_node, Limits.SINGLE_NODE),
    When(lambda f: bool(f.others), Limits.MANUAL_PROMOTION),
    When(lambda f: not f.others, Limits.NO_STANDBY),
    When(lambda f: f.failover is FailoverMode.NONE and bool(f.others), Limits.NO_DNS_FAILOVER),
    When(lambda f: f.stage is POSTGRES and f.instances == 1, Limits.SINGLE_INSTANCE),
    When(lambda f: f.stage is not SQLITE, Limits.UPSTREAM_POSTGRES),
    When(lambda f: not f.single_node and f.routers == 1, Limits.ONE_ROUTER),
    When(lambda f: f.oidc_required, Limits.OIDC_START),
    When(lambda f: not f.rehearsal and bool(f.litestream_apps), Limits.NO_REHEARSAL),
    When(lambda f: f.recovery.stated_inputs, Limits.STATED_INPUTS),
)

IMPROVEMENTS = (
    When(lambda f: bool(f.others) and f.failover is FailoverMode.NONE, Improvements.DNS_FAILOVER),
    When(lambda f: f.single_node, Improvements.ADD_NODES),
    When(lambda f: not f.single_node and f.routers == 1, Improvements.MORE_ROUTERS),
    When(lambda f: not f.single_node and f.services == 1, Improvements.MORE_GATEWAY_PODS),
    When(lambda f: not f.single_node and f.stage is SQLITE, Improvements.POSTGRES_STAGE),
    When(lambda f: not f.single_node and f.stage is not SQLITE and f.instances == 1, Improvements.MORE_INSTANCES),
    When(lambda f: f.loses_tail, Improvements.SHORTER_SYNC),
    When(lambda f: f.backed_up and not f.volsync, Improvements.SECOND_COPY),
    When(lambda f: not f.rehearsal and bool(f.litestream_apps), Improvements.REHEARSALS),
    When(lambda f: f.oidc_required, Improvements.OIDC_LENIENT),
    When(lambda f: f.loses_tail and not f.single_node, Improvements.FENCING),
    When(lambda f: bool(f.others), Improvements.REHEARSE_PROMOTION),
    When(always, Improvements.MEASURE),
)


def classification(f: Facts, words: Words) -> str:
    """One sentence: which kind of availability the configuration gives, in words derived from it."""
    spare = f.routers - 1
    words = {
        **words,
        "apps": app_names(f.apps),
        "processes": Classification.PROCESSES.pick(f.headplane),
        "database": Classification.DATABASE.pick(f.instances > 1).format(instances=f.instances),
        "headplane": Classification.HEADPLANE_ON_SQLITE.pick(f.headplane),
        "spare": Classification.SPARE.pick(spare == 1).format(count=spare),
    }
    return "; ".join(fill(template, words) for template in (STATE[f.state], first(ROUTES, f)))


def assumptions(f: Facts, words: Words) -> list[str]:
    """What the interpretation takes for granted."""
    words = {
        **words,
        "operator": Assumptions.OPERATOR.pick(f.stage is not SQLITE),
        "excluded": sites(f.exclude_nodes),
    }
    return [fill(template, words) for template in chosen(ASSUMPTIONS, f)]


def limits(f: Facts, words: Words) -> list[str]:
    """What prevents a stronger availability claim on this configuration."""
    promotion = f.recovery.promotion
    words = {
        **words,
        "node_loss_rpo": f.recovery.node_loss_rpo or "",
        "databases": Limits.DATABASES.pick(len(f.litestream_apps) == 1),
        "restore_source": Limits.RESTORE_SOURCE.pick(bool(f.others) and "headscale" in f.litestream_apps),
        "replaced_pod": Limits.REPLACED_POD.pick(f.disposable),
        "stated": Limits.STATED_PROMOTION.format(seconds=promotion) if promotion is not None else "",
    }
    return [fill(template, words) for template in chosen(LIMITS, f)]


def improvements(f: Facts, words: Words) -> list[str]:
    """What would strengthen the claim, from this configuration's own knobs."""
    return [fill(template, words) for template in chosen(IMPROVEMENTS, f)]
