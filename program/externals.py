"""What a stack references but does not create: the objects someone else must provide, and who.

One list serves the README's prerequisites, the wiring check the tests run over every rendered set, and the
stack output `prerequisites`, so the three cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from headscale_ha.components import headplane, headscale, sqlite_to_postgres
from headscale_ha.components.litestream import SERVED_KEY, served_config_map
from headscale_ha.components.position_recorder import WITNESS_KEY
from headscale_ha.components.postgres import ACTIVE_CA_SECRET, ACTIVE_REPLICATION_SECRET, DATABASE_CLUSTER
from headscale_ha.components.settings import DatabaseStage, ReplicaSource, Role
from headscale_ha.components.subnet_routers import AUTHKEY_FILE, router_key_secret, router_name
from headscale_ha.program.args import routers_namespace
from headscale_ha.program.config import StackConfig


@dataclass(frozen=True, kw_only=True)
class External:
    """An object the rendered set references but does not contain, documented as created by someone else."""

    kind: str
    namespace: str | None  # None for cluster-scoped kinds
    name: str
    keys: frozenset[str] = frozenset()  # data keys it must hold; empty: not checked
    created_by: str


@dataclass(frozen=True, kw_only=True)
class OptionalRef:
    """An `optional: true` reference the pod is designed to run without, and how the pod shows the absence."""

    namespace: str
    workload: str  # "Kind/name"
    name: str
    absence_shown_by: str
    #: Keys a running pod writes into the object later, so the rendered object lacks them; the kubelet skips an
    #: optional source's missing key (pkg/volume/configmap: `if optional { continue }`).
    runtime_keys: frozenset[str] = frozenset()


def external_objects(config: StackConfig) -> list[External]:
    """Objects the rendered set references and the user must create (operator-made ones follow from the set)."""
    found: list[External] = []
    if config.backup.volsync is not None:
        found.append(
            External(
                kind="Secret",
                namespace=config.namespace,
                name=config.backup.volsync.repository,
                keys=frozenset({"RESTIC_REPOSITORY", "RESTIC_PASSWORD"}),
                created_by="the user: restic repository of the VolSync snapshots (backup.volsync.repository)",
            )
        )
    postgres = config.database.postgres
    streaming_replica = (
        config.role is Role.STANDBY
        and config.database.stage is DatabaseStage.POSTGRES
        and postgres.replica_source is ReplicaSource.STREAMING
    )
    if streaming_replica:
        for name, source, keys in (
            (ACTIVE_REPLICATION_SECRET, f"{DATABASE_CLUSTER}-replication", {"tls.crt", "tls.key"}),
            (ACTIVE_CA_SECRET, f"{DATABASE_CLUSTER}-ca", {"ca.crt"}),
        ):
            found.append(
                External(
                    kind="Secret",
                    namespace=config.namespace,
                    name=name,
                    keys=frozenset(keys),
                    created_by=f"the user: the active cluster's {source}, copied under this name "
                    "(database.postgres.replicaSource: streaming)",
                )
            )
    return found


def optional_references(config: StackConfig) -> list[OptionalRef]:
    """The routers' enrolment keys: absent until the stack can mint them (or `routerAuthKeys` is set); the served
    witnesses of the SQLite applications' restores: absent until the first ready rollout (never read on a standby)."""
    found = [
        OptionalRef(
            namespace=routers_namespace(config),
            workload=f"StatefulSet/{router_name(ordinal)}",
            name=router_key_secret(ordinal),
            absence_shown_by=f"the Secret is mounted optional; without its file {AUTHKEY_FILE} the entrypoint logs "
            f"'subnet-router: no pre-auth key for {router_name(ordinal)}' and the readiness probe (tailscale "
            "/healthz) fails until the node is enrolled; nextSteps says what to set",
        )
        for ordinal in range(config.gateway.routers.replicas)
    ]
    if config.role is Role.STANDBY:
        return found  # a standby's restore requires a backup (REQUIRE_BACKUP): it reads no witness
    apps = [headscale.APP] if config.database.stage is not DatabaseStage.POSTGRES else []
    if config.headplane.enabled:
        apps.append(headplane.APP)
    for app in apps:
        found.append(
            OptionalRef(
                namespace=config.namespace,
                workload=f"Deployment/{app}",
                name=served_config_map(app),
                absence_shown_by=f"the witness is mounted optional into the restore init container: absent (before "
                f"the first ready rollout), the directory holds no file '{SERVED_KEY}' and the restore treats the site "
                "as never served, so with no database and no backup it first-starts and logs 'first start'; present, "
                "the same case is refused (exit 24) and logged 'REFUSING TO START'; its key "
                f"'{WITNESS_KEY}' is written by the running pod's position recorder; a served site without it is "
                "refused (exit 44, 'no replica position was ever recorded'), a site not served yet logs 'no position "
                "recorded in the served witness yet' and checks the replica's age alone",
                runtime_keys=(
                    frozenset({WITNESS_KEY})
                    if app == headscale.APP and config.backup.auth.record_position
                    else frozenset()
                ),
            )
        )
    if config.database.stage is DatabaseStage.MIGRATING:
        found.append(
            OptionalRef(
                namespace=config.namespace,
                workload=f"Job/{sqlite_to_postgres.JOB}-*",  # named from its spec (components/sqlite_to_postgres.py)
                name=served_config_map(headscale.APP),
                absence_shown_by="the migration Job's restore reads the served witness as the pod's restore does: "
                "without the ConfigMap (a site that never served) it logs 'no position recorded in the served "
                "witness yet' and checks the replica's age alone; a served site without a recorded position is "
                "refused (exit 44) and the Job fails",
                runtime_keys=frozenset({WITNESS_KEY}) if config.backup.auth.record_position else frozenset(),
            )
        )
    return found
