"""The database stage as types: what each stage needs is a required field of its type.

The stage decides what exists (a CloudNativePG cluster, the migration Job, Headscale's Litestream backup) and what
each needs: SQLite needs the NFS target of its backup, the migrating stage that and the WAL archive with its
credentials and the migration image, PostgreSQL the WAL archive. ``database_stage`` is the one place that checks it:
the config's rules across keys report its problems (program/config_rules.py) and the mapping to the components'
args (program/args.py) builds from its value, so no args of a stage can be built without what the stage needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import SecretStr

from headscale_ha.components.settings import BackupSettings, DatabaseSettings, DatabaseStage, Nfs, ObjectStore
from headscale_ha.program.config_problems import GONE, problem

#: The config keys of the WAL archive's S3 credentials (secrets).
CREDENTIAL_KEYS = ("objectStoreAccessKeyId", "objectStoreSecretAccessKey")


@dataclass(frozen=True, kw_only=True)
class WalArchive:
    """Where the CloudNativePG cluster archives its WAL and base backups, and the S3 credentials to do it."""

    store: ObjectStore
    access_key_id: SecretStr
    secret_access_key: SecretStr


@dataclass(frozen=True, kw_only=True)
class OnSqlite:
    """Headscale serves from SQLite; Litestream's replica on the NFS target is its only backup."""

    backup_target: Nfs


@dataclass(frozen=True, kw_only=True)
class Migrating:
    """The migration Job copies the SQLite backup into the CloudNativePG cluster while Headscale runs 0 replicas;
    SQLite and its backup stay the rollback point."""

    backup_target: Nfs
    archive: WalArchive
    migration_image: str


@dataclass(frozen=True, kw_only=True)
class OnPostgres:
    """Headscale serves from the CloudNativePG cluster; WAL archiving is its backup."""

    archive: WalArchive


DatabaseStagePlan = OnSqlite | Migrating | OnPostgres
_T = TypeVar("_T")


class DatabaseStageError(ValueError):
    """The stage lacks what it needs; each problem names the key, as every config problem does."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


def _stage_problems(
    stage: DatabaseStage, database: DatabaseSettings, backup: BackupSettings, credentials: dict[str, object]
) -> list[str]:
    """What ``stage`` needs and the config lacks, one problem per key."""
    problems = []
    sqlite_backed, on_postgres = stage is not DatabaseStage.POSTGRES, stage is not DatabaseStage.SQLITE
    if sqlite_backed and backup.nfs is None:
        what = f"is required in the {stage} stage: Litestream is the only backup of the SQLite database"
        problems.append(problem("backup.nfs", what, GONE))
    for key in CREDENTIAL_KEYS if on_postgres else ():
        if not credentials.get(key):
            problems.append(
                problem(
                    key,
                    f"is required in the {stage} stage (database.stage): S3 credentials of the WAL archive "
                    f"(database.postgres.objectStore); pulumi config set --secret {key} ...",
                    GONE,
                )
            )
    if stage is DatabaseStage.MIGRATING and database.migration.image is None:
        what = "is required in the migrating stage: build images/migrate/Dockerfile, push it, pin it here"
        problems.append(problem("database.migration.image", what, GONE))
    if on_postgres and database.postgres.object_store is None:
        what = f"is required in the {stage} stage: WAL archiving is the backup of the PostgreSQL cluster"
        problems.append(problem("database.postgres.objectStore", what, GONE))
    return problems


def database_stage(
    database: DatabaseSettings,
    backup: BackupSettings,
    *,
    access_key_id: SecretStr | None,
    secret_access_key: SecretStr | None,
) -> DatabaseStagePlan:
    """The stage ``database.stage`` names, with everything it needs; raises DatabaseStageError naming each key it
    lacks (the credentials are the `objectStoreAccessKeyId` and `objectStoreSecretAccessKey` keys)."""
    stage = database.stage
    credentials = dict(zip(CREDENTIAL_KEYS, (access_key_id, secret_access_key), strict=True))
    problems = _stage_problems(stage, database, backup, credentials)
    if problems:
        raise DatabaseStageError(problems)
    if stage is DatabaseStage.SQLITE:
        return OnSqlite(backup_target=_checked(backup.nfs))
    archive = WalArchive(
        store=_checked(database.postgres.object_store),
        access_key_id=_checked(access_key_id),
        secret_access_key=_checked(secret_access_key),
    )
    if stage is DatabaseStage.MIGRATING:
        return Migrating(
            backup_target=_checked(backup.nfs), archive=archive, migration_image=_checked(database.migration.image)
        )
    return OnPostgres(archive=archive)


def _checked(value: _T | None) -> _T:
    """A value ``_stage_problems`` found present (the types cannot say so of the settings' optional fields)."""
    assert value is not None
    return value
