"""verify compares NULL as NULL for every type, and refuses a sequence that would hand out a deleted row's id.

``loaded`` and ``loaded_with_nulls`` are correctly migrated databases (the second's source has NULL booleans:
``reusable``, ``ephemeral``, ``used`` of pre-auth key 2; both have NULLs of every other type). Each test first
verifies a pristine copy, then changes another copy to or from NULL and expects verification to fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from migration import MigrationError, PsqlConnection, schema_for, verify
from tests.migration.helpers import cli, load, mutate, run_args
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"
NULL_BOOLEANS = "UPDATE pre_auth_keys SET reusable = NULL, ephemeral = NULL, used = NULL WHERE id = 2"


def test_null_booleans_that_loaded_exactly_verify(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    sqlite = mutate(sample_db.build(tmp_path / "hs.sqlite", VERSION), NULL_BOOLEANS)
    pg = new_db(VERSION)
    result = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert result.returncode == 0, result.stderr
    assert pg.query("SELECT reusable IS NULL, ephemeral IS NULL, used IS NULL FROM pre_auth_keys WHERE id = 2") == [
        ["t", "t", "t"]
    ]


def _loaded(pg_server: PgServer, tmp: Path, name: str, *statements: str) -> tuple[Path, str]:
    """A correctly migrated database to copy from (TEMPLATE), and its SQLite source."""
    sqlite = mutate(sample_db.build(tmp / "hs.sqlite", VERSION), *statements)
    pg = pg_server.headscale_database(name, VERSION)
    load(sqlite, pg, VERSION, tmp / "work")
    return sqlite, name


@pytest.fixture(scope="module")
def loaded(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _loaded(pg_server, tmp_path_factory.mktemp("plain"), "loaded_plain")


@pytest.fixture(scope="module")
def loaded_with_nulls(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _loaded(pg_server, tmp_path_factory.mktemp("nulls"), "loaded_nulls", NULL_BOOLEANS)


# Each PostgreSQL type of the schema: a value changed to NULL, and a NULL changed to a value.
TO_NULL = [
    ("UPDATE pre_auth_keys SET used = NULL WHERE id = 4", "pre_auth_keys.used: values differ (id 4)"),  # was false
    ("UPDATE pre_auth_keys SET ephemeral = NULL", "pre_auth_keys.ephemeral: values differ (id 1, 2, 3, 4)"),
    ("UPDATE pre_auth_keys SET reusable = NULL WHERE id = 1", "pre_auth_keys.reusable: values differ (id 1)"),
    ("UPDATE nodes SET user_id = NULL WHERE id = 1", "nodes.user_id: values differ (id 1)"),
    ("UPDATE nodes SET hostname = NULL WHERE id = 1", "nodes.hostname: values differ (id 1)"),
    ("UPDATE nodes SET given_name = NULL WHERE id = 4", "nodes.given_name: values differ (id 4)"),
    ("UPDATE api_keys SET hash = NULL WHERE id = 2", "api_keys.hash: values differ (id 2)"),
    ("UPDATE nodes SET last_seen = NULL WHERE id = 1", "nodes.last_seen: values differ (id 1)"),
    ("UPDATE users SET email = NULL WHERE id = 3", "users.email: values differ (id 3)"),  # '' -> NULL
    ("UPDATE database_versions SET updated_at = NULL", "database_versions.updated_at: values differ (id 1)"),
]
FROM_NULL = [
    ("UPDATE pre_auth_keys SET ephemeral = false WHERE id = 2", "pre_auth_keys.ephemeral: values differ (id 2)"),
    ("UPDATE pre_auth_keys SET used = true WHERE id = 2", "pre_auth_keys.used: values differ (id 2)"),
    ("UPDATE pre_auth_keys SET reusable = false WHERE id = 2", "pre_auth_keys.reusable: values differ (id 2)"),
    ("UPDATE nodes SET user_id = 1 WHERE id = 2", "nodes.user_id: values differ (id 2)"),
    ("UPDATE nodes SET auth_key_id = 1 WHERE id = 3", "nodes.auth_key_id: values differ (id 3)"),
    ("UPDATE nodes SET ipv6 = '' WHERE id = 3", "nodes.ipv6: values differ (id 3)"),
    ("UPDATE pre_auth_keys SET hash = '' WHERE id = 1", "pre_auth_keys.hash: values differ (id 1)"),
    ("UPDATE nodes SET expiry = 'epoch' WHERE id = 1", "nodes.expiry: values differ (id 1)"),
    ("UPDATE users SET provider = '' WHERE id = 1", "users.provider: values differ (id 1)"),
]


def _changed_copy_fails(loaded: tuple[Path, str], new_db: NewDb, statement: str, message: str) -> None:
    sqlite, template = loaded
    pristine = new_db(template=template)
    verify(sqlite, pristine, version=VERSION)  # exactly as loaded: verifies
    pg = new_db(template=template)
    pg.execute(statement)
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version=VERSION)
    assert caught.value.step == "verify"
    assert message in caught.value.message


@pytest.mark.parametrize(("statement", "message"), TO_NULL, ids=[s.split(" SET ")[1][:28] for s, _ in TO_NULL])
def test_verify_sees_a_value_changed_to_null(
    statement: str, message: str, loaded: tuple[Path, str], new_db: NewDb
) -> None:
    _changed_copy_fails(loaded, new_db, statement, message)


@pytest.mark.parametrize(("statement", "message"), FROM_NULL, ids=[s.split(" SET ")[1][:28] for s, _ in FROM_NULL])
def test_verify_sees_a_null_changed_to_a_value(
    statement: str, message: str, loaded_with_nulls: tuple[Path, str], new_db: NewDb
) -> None:
    _changed_copy_fails(loaded_with_nulls, new_db, statement, message)


def test_verify_refuses_a_sequence_that_would_reuse_a_deleted_rows_id(tmp_path: Path, new_db: NewDb) -> None:
    from migration.load import continue_sequences  # new in this change: the rest of the module runs without it

    sqlite = sample_db.with_deleted_newest(sample_db.build(tmp_path / "hs.sqlite", VERSION))
    schema = schema_for(VERSION)
    pg = new_db(VERSION)
    load(sqlite, pg, VERSION, tmp_path / "work")  # pgloader's sequences: max(id) + 1
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version=VERSION)
    assert [line.strip() for line in caught.value.message.splitlines()[1:]] == [
        f"{table}: the id sequence hands out {got} next, SQLite would hand out {want} (past its AUTOINCREMENT mark:"
        " ids of deleted rows are never handed out again)"
        for table, got, want in (("users", 4, 11), ("pre_auth_keys", 5, 21), ("nodes", 5, 51))
    ]
    assert continue_sequences(pg, schema, {"users": 11, "pre_auth_keys": 21, "nodes": 51})["nodes"] == 51
    assert verify(sqlite, pg, version=VERSION).sequences["nodes"] == 51
