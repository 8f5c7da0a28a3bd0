"""The database stage as one type: each stage's value holds exactly the Args of its database components, and a
config that lacks what the stage needs is refused with the problems the config check reports (one rule, two users)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from headscale_ha.components.settings import BackupSettings, DatabaseSettings, Nfs, ObjectStore
from headscale_ha.program import args
from headscale_ha.program.config import ConfigError, StackConfig
from headscale_ha.program.config_rules import database_stage_problems
from headscale_ha.program.database_stage import (
    Migrating,
    OnPostgres,
    OnSqlite,
    database_stage_args,
    postgres_database_args,
    sqlite_to_postgres_args,
)
from tests.support.config_samples import STORE, STORE_KEYS, parse

NFS = Nfs(server="nfs.example.org", path="/export")
KEYS = {"objectStoreAccessKeyId": SecretStr("AKIA"), "objectStoreSecretAccessKey": SecretStr("s3cr3t")}
NO_KEYS = dict.fromkeys(KEYS)
KEYS_SECRET = "objectStoreSecretAccessKey"
IMAGE = "registry.example.com/headscale-ha/migrate:1.0.0"


WAL_STORE = ObjectStore(destination_path="s3://wal/hydra")


def _database(stage: str, *, store: ObjectStore | None = WAL_STORE, image: str | None = IMAGE) -> DatabaseSettings:
    return DatabaseSettings.model_validate(
        {"stage": stage, "postgres": {"objectStore": store}, "migration": {"image": image}}
    )


def _stack(stage: str) -> StackConfig:
    database = {"stage": stage, "postgres": {"objectStore": STORE}, "migration": {"image": IMAGE}}
    if stage == "sqlite":
        return parse("hydra", database={"stage": stage})
    return parse("hydra", secret_keys=tuple(STORE_KEYS), database=database, **STORE_KEYS)


def test_each_stage_holds_exactly_its_components_args() -> None:
    sqlite, migrating, postgres = (_stack(stage) for stage in ("sqlite", "migrating", "postgres"))
    policy = args.render_stack_policy(migrating)
    assert database_stage_args(sqlite, args.render_stack_policy(sqlite)) == OnSqlite()
    assert database_stage_args(migrating, policy) == Migrating(
        cluster=postgres_database_args(migrating), migration=sqlite_to_postgres_args(migrating, policy)
    )
    assert database_stage_args(postgres, args.render_stack_policy(postgres)) == OnPostgres(
        cluster=postgres_database_args(postgres)
    )


def test_a_hand_built_config_without_what_the_stage_needs_is_refused_before_any_args() -> None:
    config = _stack("migrating")
    migration = config.database.migration.model_copy(update={"image": None})
    database = config.database.model_copy(update={"migration": migration})
    lacking = config.model_copy(update={"database": database, "object_store_secret_access_key": None})
    with pytest.raises(ConfigError) as caught:
        database_stage_args(lacking, args.render_stack_policy(config))
    assert {problem.split(":")[1] for problem in caught.value.problems} == {KEYS_SECRET, "database.migration.image"}


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
        (
            "postgres",
            {},
            BackupSettings(),
            {**KEYS, "objectStoreSecretAccessKey": None},
            ["objectStoreSecretAccessKey"],
        ),
    ],
)
def test_a_stage_without_what_it_needs_names_every_key(
    stage: str, database: dict, backup: BackupSettings, keys: dict, missing: list[str]
) -> None:
    found = database_stage_problems(_database(stage, **database), backup, keys)
    assert [problem.split(":")[1] for problem in found] == missing
    assert all(problem.endswith("got nothing") for problem in found)
