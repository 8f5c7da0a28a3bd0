"""The facts the availability report is made of, read once from the stack config, and the tables that choose by them.

Every section of the report decides from one typed value, `Facts`, never from the config itself: what the site is
(its role, stage, nodes, storage), what it declares (replicas, routes, backups, endpoint) and the few figures of the
`recovery` output its sentences quote. A section is a table of `When` entries: the condition that selects an entry
and the entry itself (a sentence, a table row, a failure scenario).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Generic, TypeVar

from headscale_ha.components.settings import (
    DatabaseStage,
    FailoverMode,
    LocalStorage,
    Nfs,
    ObjectStore,
    PolicyMode,
    Role,
    RouteKind,
)
from headscale_ha.program.args import gateway_proxies, headplane_replicas, headscale_replicas
from headscale_ha.program.availability.figures import RecoveryFacts, recovery_facts
from headscale_ha.program.config import StackConfig


class State(StrEnum):
    """What the site's control plane is doing: the first thing the classification says of it."""

    STANDBY = "standby"
    """Not the active site: Headscale and Headplane run 0 replicas until a promotion."""
    MIGRATING = "migrating"
    """The active site, paused while its database moves to PostgreSQL."""
    STOPPED = "stopped"
    """The active site with headscale.replicas 0."""
    SQLITE = "sqlite"
    """Serving, each application on its own SQLite database."""
    POSTGRES = "postgres"
    """Serving, Headscale on CloudNativePG."""


@dataclass(frozen=True, kw_only=True)
class StackFacts:
    """What the report's sentences are made of that the config decides, read once from it (`stack_facts`)."""

    site: str
    role: Role
    active_site: str
    others: tuple[str, ...]
    """The other sites of the tailnet."""
    standbys: tuple[str, ...]
    """Every site but the active one."""
    stage: DatabaseStage
    nodes: int
    exclude_nodes: tuple[str, ...]
    """Nodes the control plane never runs on, sorted."""
    workloads_on_control_plane: bool
    storage_class: str | None
    """The cluster's class for retained claims (None: the default class)."""
    storage: LocalStorage
    ephemeral_storage_class: str | None
    headscale_runs: bool
    headplane: bool
    headplane_runs: bool
    routers: int
    services: int
    instances: int
    streaming: bool
    """A standby's replica cluster streams from the active site (beside the archive)."""
    object_store: ObjectStore | None
    failover: FailoverMode
    nfs: Nfs | None
    sync_interval: str
    rehearsal: bool
    rehearsal_schedule: str
    volsync: bool
    gateway_ip: str
    proxies: tuple[str, ...]
    route: RouteKind
    route_class: str
    """The class of the Gateway or Ingress the public name is routed through."""
    ttl: int
    public_hostname: str
    derp_embedded: bool
    derp_maps: bool
    """DERP maps are configured (beside an embedded region, the other relays)."""
    policy_mode: PolicyMode
    oidc: bool
    oidc_required: bool
    """OIDC with onlyStartIfAvailable: no Headscale start succeeds while the issuer is down."""

    @property
    def active(self) -> bool:
        return self.role is Role.ACTIVE

    @property
    def single_node(self) -> bool:
        return self.nodes == 1

    @property
    def disposable(self) -> bool:
        return self.storage is LocalStorage.DISPOSABLE

    @property
    def state(self) -> State:
        if not self.active:
            return State.STANDBY
        if self.stage is DatabaseStage.MIGRATING:
            return State.MIGRATING
        if not self.headscale_runs:
            return State.STOPPED
        return State.SQLITE if self.stage is DatabaseStage.SQLITE else State.POSTGRES

    @property
    def serving(self) -> bool:
        return self.state in (State.SQLITE, State.POSTGRES)

    @property
    def litestream_apps(self) -> list[str]:
        """Applications whose SQLite database is replicated by Litestream to the NFS export."""
        return [
            app
            for app, uses in (("headscale", self.stage is not DatabaseStage.POSTGRES), ("headplane", self.headplane))
            if uses
        ]

    @property
    def apps(self) -> list[str]:
        """The deployed applications."""
        return ["headscale", *(["headplane"] if self.headplane else [])]

    @property
    def loses_tail(self) -> bool:
        """A SQLite database on disposable storage: what Litestream has not shipped yet dies with the node."""
        return self.stage is not DatabaseStage.POSTGRES and self.disposable

    @property
    def backed_up(self) -> bool:
        """Some database is replicated to an NFS export (the backup target of the report)."""
        return self.nfs is not None and bool(self.litestream_apps)


def stack_facts(config: StackConfig) -> StackFacts:
    """The facts of ``config``."""
    sites = config.tailnet.sites
    postgres = config.database.postgres
    endpoint = config.endpoint
    oidc = config.headscale.oidc
    return StackFacts(
        site=config.site.name,
        role=config.role,
        active_site=config.tailnet.active_site,
        others=tuple(site.name for site in sites if site.name != config.site.name),
        standbys=tuple(site.name for site in sites if site.name != config.tailnet.active_site),
        stage=config.database.stage,
        nodes=config.cluster.nodes,
        exclude_nodes=tuple(sorted(config.cluster.exclude_nodes)),
        workloads_on_control_plane=config.cluster.workloads_on_control_plane,
        storage_class=config.cluster.storage_class,
        storage=config.backup.local.storage,
        ephemeral_storage_class=config.backup.local.ephemeral_storage_class,
        headscale_runs=headscale_replicas(config) == 1,
        headplane=config.headplane.enabled,
        headplane_runs=config.headplane.enabled and headplane_replicas(config) == 1,
        routers=config.gateway.routers.replicas,
        services=config.gateway.services.replicas,
        instances=postgres.instances,
        streaming=bool(postgres.streaming_host),
        object_store=postgres.object_store,
        failover=endpoint.failover,
        nfs=config.backup.nfs,
        sync_interval=config.backup.litestream.sync_interval,
        rehearsal=config.backup.rehearsal.enabled,
        rehearsal_schedule=config.backup.rehearsal.schedule,
        volsync=config.backup.volsync is not None,
        gateway_ip=config.site.gateway_ip,
        proxies=tuple(proxy.name for proxy in gateway_proxies(config)),
        route=endpoint.route,
        route_class=endpoint.gateway_class if endpoint.route is RouteKind.GATEWAY else endpoint.ingress_class,
        ttl=endpoint.ttl,
        public_hostname=config.tailnet.public_hostname,
        derp_embedded=config.headscale.derp.embedded,
        derp_maps=bool(config.headscale.derp.urls),
        policy_mode=config.policy.mode,
        oidc=oidc is not None,
        oidc_required=oidc is not None and oidc.only_start_if_available,
    )


@dataclass(frozen=True, kw_only=True)
class Facts(StackFacts):
    """Every fact of the report: the config's, and the few figures of the `recovery` output its sentences quote."""

    recovery: RecoveryFacts


def with_recovery(facts: StackFacts, recovery: Mapping[str, Any]) -> Facts:
    """``facts`` with the figures of the stack's ``recovery`` output."""
    return Facts(
        **{item.name: getattr(facts, item.name) for item in fields(StackFacts)}, recovery=recovery_facts(recovery)
    )


# --------------------------------------------------------------------------------------------- choosing by the facts

T = TypeVar("T")
#: A condition on the facts: whether an entry of a section's table applies.
Condition = Callable[[Facts], bool]


def always(_: Facts) -> bool:
    return True


@dataclass(frozen=True)
class When(Generic[T]):
    """One entry of a section's table: ``value`` applies where ``condition`` holds."""

    condition: Condition
    value: T


def chosen(table: Iterable[When[T]], facts: Facts) -> list[T]:
    """The values of ``table`` whose condition holds, in the table's order."""
    return [entry.value for entry in table if entry.condition(facts)]


def first(table: Iterable[When[T]], facts: Facts) -> T:
    """The first value of ``table`` whose condition holds (the table ends with one that always does)."""
    return chosen(table, facts)[0]
