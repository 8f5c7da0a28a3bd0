"""The table "What supplies redundancy": component by component, the declared layout and the mechanism behind it.

`ROWS` lists every row the table may hold, in order, each with the condition that selects it (the rows of one
component exclude each other); `_words` fills their placeholders.
"""

from __future__ import annotations

from headscale_ha.components.settings import DatabaseStage
from headscale_ha.program.availability.facts import Facts, When, always, chosen
from headscale_ha.program.availability.model import RedundancyRow
from headscale_ha.program.availability.phrases import Redundancy, RowText
from headscale_ha.program.availability.words import Words, app_names, count, fill, sites, spread

SQLITE, MIGRATING, POSTGRES = DatabaseStage.SQLITE, DatabaseStage.MIGRATING, DatabaseStage.POSTGRES

ROWS: tuple[When[RowText], ...] = (
    When(lambda f: f.stage is POSTGRES, Redundancy.HEADSCALE_ON_POSTGRES),
    When(lambda f: f.stage is not POSTGRES, Redundancy.HEADSCALE_ON_SQLITE),
    When(lambda f: f.headplane, Redundancy.HEADPLANE),
    When(lambda f: not f.headplane, Redundancy.NO_HEADPLANE),
    When(lambda f: f.stage is SQLITE, Redundancy.SQLITE_DATABASES),
    When(lambda f: f.stage is MIGRATING, Redundancy.MIGRATING_DATABASES),
    When(lambda f: f.stage is POSTGRES and f.active, Redundancy.POSTGRES_DATABASES),
    When(lambda f: f.stage is POSTGRES and not f.active, Redundancy.REPLICA_DATABASES),
    When(lambda f: f.backed_up, Redundancy.BACKUP_TARGET),
    When(lambda f: f.stage is not SQLITE and f.object_store is not None, Redundancy.OBJECT_STORE),
    When(lambda f: f.routers > 1, Redundancy.ROUTERS),
    When(lambda f: f.routers <= 1, Redundancy.ONE_ROUTER),
    When(lambda f: f.services > 1, Redundancy.GATEWAY_SERVICES),
    When(lambda f: f.services <= 1, Redundancy.ONE_GATEWAY_POD),
    When(always, Redundancy.PUBLIC_ENDPOINT),
    When(lambda f: f.active and bool(f.standbys), Redundancy.STANDBY_SITES),
    When(lambda f: f.active and not f.standbys, Redundancy.NO_STANDBY),
    When(lambda f: not f.active, Redundancy.THIS_STANDBY),
    When(lambda f: f.derp_embedded, Redundancy.EMBEDDED_DERP),
)


def _replicas(f: Facts, runs: bool) -> str:
    """A singleton Deployment's declared replicas, and why there are none."""
    if runs:
        return Redundancy.RUNNING
    if not f.active:
        return Redundancy.STANDING_BY
    return Redundancy.MIGRATING if f.stage is MIGRATING else Redundancy.SCALED_TO_ZERO


def _database_words(f: Facts, words: Words) -> dict[str, str]:
    """The words of the database and backup rows."""
    store = f.object_store
    return {
        "databases": count(len(f.litestream_apps), Redundancy.DATABASE),
        "litestream_list": app_names(f.litestream_apps, ", "),
        "storage": f.storage.value,
        "anti_affinity": Redundancy.ANTI_AFFINITY.pick(f.instances > 1),
        "database_failover": Redundancy.DATABASE_FAILOVER.pick(f.instances > 1),
        "replica_source": Redundancy.REPLICA_SOURCE.pick(f.streaming),
        "headplane_volume": Redundancy.HEADPLANE_VOLUME.pick(f.headplane).format(local_volume=words["local_volume"]),
        "headplane_shipped": Redundancy.HEADPLANE_SHIPPED.pick(f.headplane).format(sync_interval=f.sync_interval),
        "shared": Redundancy.SHARED.pick(bool(f.others)),
        "rehearsal": Redundancy.REHEARSAL.pick(f.rehearsal).format(schedule=f.rehearsal_schedule),
        "volsync": Redundancy.VOLSYNC.pick(f.volsync),
        "store_path": store.destination_path if store is not None else "",
        "store_retention": store.retention if store is not None else "",
        "store_followed": Redundancy.STORE_FOLLOWED.pick(bool(f.others)),
    }


def _words(f: Facts, words: Words) -> dict[str, str]:
    """The words of the rows."""
    return {
        **words,
        **_database_words(f, words),
        "headscale_replicas": _replicas(f, f.headscale_runs),
        "headplane_replicas": _replicas(f, f.headplane_runs),
        "headscale_returns": Redundancy.HEADSCALE_RETURNS.pick(f.active),
        "headplane_returns": Redundancy.HEADPLANE_RETURNS.pick(f.active),
        "on_any_node": Redundancy.ON_ANY_NODE.pick(f.single_node),
        "router_pods": spread(f.routers, Redundancy.ROUTER_POD),
        "gateway_pods": spread(f.services, Redundancy.GATEWAY_POD),
        "gateway_ip": f.gateway_ip,
        "proxies": ", ".join(f.proxies),
        "public_hostname": f.public_hostname,
        "route": Redundancy.ROUTE[f.route].format(route_class=f.route_class),
        "follows": Redundancy.FOLLOWS[f.failover].format(active_site=f.active_site, ttl=f.ttl),
        "standbys": sites(f.standbys),
        "derp_maps": Redundancy.DERP_MAPS.pick(f.derp_maps),
        "other_relays": Redundancy.OTHER_RELAYS.pick(f.derp_maps),
    }


def redundancy(f: Facts, words: Words) -> list[RedundancyRow]:
    """What supplies redundancy, component by component."""
    words = _words(f, words)
    return [RedundancyRow(*(fill(text, words) for text in row)) for row in chosen(ROWS, f)]
