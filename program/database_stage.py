"""The database stage as one type: each stage's value holds the Args of the database components it has.

`database.stage` (``DatabaseStage``) is the config value. ``database_stage_args`` maps it, once the config holds
what the stage needs (``database_stage_problems`` in program/config_rules.py, the rule the config check reports),
to one of three values, and TailnetSite (program/site.py) builds exactly what the value holds:
- ``OnSqlite``: no database component; Headscale's SQLite and its Litestream backup belong to HeadscaleServer;
- ``Migrating``: the CloudNativePG cluster and the Job that copies SQLite's backup into it;
- ``OnPostgres``: the CloudNativePG cluster Headscale serves from.
So no stage has a component without its Args, and no Args are built for a stage that lacks what they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from headscale_ha.components.backup_volume import claim_name
from headscale_ha.components.postgres import PostgresDatabaseArgs, ReplicaOf
from headscale_ha.components.settings import DatabaseStage, ReplicaSource, Role
from headscale_ha.components.sqlite_to_postgres import SqliteToPostgresArgs
from headscale_ha.policy.render import RenderedPolicy
from headscale_ha.program.args import policy_file, postgres_storage
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.config_rules import CREDENTIAL_KEYS, database_stage_problems

_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True)
class OnSqlite:
    """The sqlite stage: Headscale serves from SQLite, whose Litestream replica on the NFS target is its only backup;
    no database component."""


@dataclass(frozen=True, kw_only=True)
class Migrating:
    """The migrating stage: the migration Job copies the SQLite backup into the CloudNativePG cluster while Headscale
    runs 0 replicas; SQLite and its backup stay the rollback point."""

    cluster: PostgresDatabaseArgs
    migration: SqliteToPostgresArgs


@dataclass(frozen=True, kw_only=True)
class OnPostgres:
    """The postgres stage: Headscale serves from the CloudNativePG cluster; WAL archiving is its backup."""

    cluster: PostgresDatabaseArgs


DatabaseStageArgs = OnSqlite | Migrating | OnPostgres


def database_stage_args(config: StackConfig, policy: RenderedPolicy) -> DatabaseStageArgs:
    """The database components of ``config``'s stage (in file mode the migration Job's `headscale configtest` loads
    the stack's rendered ``policy`` too). A config that lacks what the stage needs (one built by hand, not parsed)
    is refused with the problems the config check reports."""
    given = (config.object_store_access_key_id, config.object_store_secret_access_key)
    credentials: dict[str, object] = {key: value for key, value in zip(CREDENTIAL_KEYS, given, strict=True)}
    problems = database_stage_problems(config.database, config.backup, credentials)
    if problems:
        raise ConfigError(problems)
    stage = config.database.stage
    if stage is DatabaseStage.SQLITE:
        return OnSqlite()
    cluster = postgres_database_args(config)
    if stage is DatabaseStage.POSTGRES:
        return OnPostgres(cluster=cluster)
    return Migrating(cluster=cluster, migration=sqlite_to_postgres_args(config, policy))


def postgres_database_args(config: StackConfig) -> PostgresDatabaseArgs:
    """The CNPG cluster's Args: a standby runs a replica cluster of the active site's, streaming when configured."""
    postgres = config.database.postgres
    replica_of = None
    if config.role is Role.STANDBY:
        streaming = postgres.replica_source is ReplicaSource.STREAMING
        replica_of = ReplicaOf(streaming_host=str(postgres.streaming_host) if streaming else None)
    return PostgresDatabaseArgs(
        namespace=config.namespace,
        instances=postgres.instances,
        image=postgres.image,
        resources=postgres.resources,
        storage_size=postgres.storage_size,
        storage_class=config.cluster.storage_class,
        object_store=_present(postgres.object_store),
        object_store_access_key_id=_present(config.object_store_access_key_id).get_secret_value(),
        object_store_secret_access_key=_present(config.object_store_secret_access_key).get_secret_value(),
        backup_schedule=postgres.backup_schedule,
        replica_of=replica_of,
    )


def sqlite_to_postgres_args(config: StackConfig, policy: RenderedPolicy) -> SqliteToPostgresArgs:
    """The migration Job's Args: this stack's SQLite backup into its CNPG cluster."""
    backup = config.backup
    return SqliteToPostgresArgs(
        namespace=config.namespace,
        image=_present(config.database.migration.image),
        force=config.database.migration.force,
        deadline_seconds=config.database.migration.deadline_seconds,
        headscale_image=config.headscale.image,
        headscale_version=config.headscale.version,
        resources=config.headscale.resources,
        restore_image=backup.litestream.image,
        restore_resources=backup.litestream.resources,
        backup_claim=claim_name(_present(backup.nfs)),
        target=postgres_storage(config),
        oidc=config.headscale.oidc is not None,
        policy=policy_file(config, policy),
        cluster=config.cluster,
        authenticate=True,  # the migrating stage keeps Headscale's SQLite backup, and with it its key's Secret
        auth=backup.auth,
    )


def _present(value: _T | None) -> _T:
    """A value ``database_stage_problems`` found present (the settings' optional fields cannot say so)."""
    assert value is not None
    return value
