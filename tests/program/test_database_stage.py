"""The database stage as types: each stage's value holds what the stage needs, and a config that lacks it is refused
with the problems the config check reports (one rule, two users)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from headscale_ha.components.settings import BackupSettings, DatabaseSettings, Nfs, ObjectStore
from headscale_ha.program.database_stage import (
    DatabaseStageError,
    Migrating,
    OnPostgres,
    OnSqlite,
    WalArchive,
    database_stage,
)

NFS = Nfs(server="nfs.example.org", path="/export")
STORE = ObjectStore(destination_path="s3://wal/hydra")
KEYS = {"access_key_id": SecretStr("AKIA"), "secret_access_key": SecretStr("s3cr3t")}
NO_KEYS = {"access_key_id": None, "secret_access_key": None}
IMAGE = "registry.example.com/headscale-ha/migrate:1.0.0"


def _database(stage: str, *, store: ObjectStore | None = STORE, image: str | None = IMAGE) -> DatabaseSettings:
    return DatabaseSettings.model_validate(
        {"stage": stage, "postgres": {"objectStore": store}, "migration": {"image": image}}
    )


def test_each_stage_is_its_own_type_with_what_it_needs() -> None:
    archive = WalArchive(store=STORE, **KEYS)
    backup = BackupSettings(nfs=NFS)
    assert database_stage(_database("sqlite"), backup, **NO_KEYS) == OnSqlite(backup_target=NFS)
    migrating = database_stage(_database("migrating"), backup, **KEYS)
    assert migrating == Migrating(backup_target=NFS, archive=archive, migration_image=IMAGE)
    assert database_stage(_database("postgres"), BackupSettings(), **KEYS) == OnPostgres(archive=archive)


@pytest.mark.parametrize(
    ("stage", "database", "backup", "keys", "missing"),
    [
        ("sqlite", {}, BackupSettings(), NO_KEYS, ["backup.nfs"]),
        ("migrating", {"image": None}, BackupSettings(nfs=NFS), KEYS, ["database.migration.image"]),
        (
            "migrating",
            {"store": None},
            BackupSettings(),
            NO_KEYS,
            ["backup.nfs", "objectStoreAccessKeyId", "objectStoreSecretAccessKey", "database.postgres.objectStore"],
        ),
        ("postgres", {}, BackupSettings(), {**KEYS, "secret_access_key": None}, ["objectStoreSecretAccessKey"]),
    ],
)
def test_a_stage_without_what_it_needs_names_every_key(
    stage: str, database: dict, backup: BackupSettings, keys: dict, missing: list[str]
) -> None:
    with pytest.raises(DatabaseStageError) as caught:
        database_stage(_database(stage, **database), backup, **keys)
    named = [problem.split(":")[1] for problem in caught.value.problems]
    assert named == missing
    assert all(problem.endswith("got nothing") for problem in caught.value.problems)
