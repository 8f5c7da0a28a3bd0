"""The load step: id sequences continue where SQLite's AUTOINCREMENT would, so no id is ever handed out twice.

A node's id is its stable id for clients; Headscale's SQLite tables never hand out the id of a deleted row again
(``sqlite_sequence``). pgloader's ``reset sequences`` only goes past max(id), which would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from migration import PsqlConnection
from tests.migration.helpers import cli, load, run_args
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"


def _next(pg: PsqlConnection, table: str) -> int:
    return int(pg.scalar(f"SELECT nextval(pg_get_serial_sequence('public.{table}', 'id'))"))


def test_pgloader_alone_would_hand_out_deleted_ids_again(tmp_path: Path, new_db: NewDb) -> None:
    sqlite = sample_db.with_deleted_newest(sample_db.build(tmp_path / "hs.sqlite", VERSION))
    pg = new_db(VERSION)
    load(sqlite, pg, VERSION, tmp_path / "work")
    assert [_next(pg, table) for table in ("users", "pre_auth_keys", "nodes")] == [4, 5, 5]


def test_the_migration_continues_every_sequence_past_the_autoincrement_mark(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite = sample_db.with_deleted_newest(sample_db.build(tmp_path / "hs.sqlite", VERSION))
    pg = new_db(VERSION)
    result = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert result.returncode == 0, result.stderr
    assert "sequences continue at" in result.stdout
    # What SQLite would hand out next: past the mark (users, keys, nodes), past max(id) (api_keys, policies, ...).
    assert {table: _next(pg, table) for table in ("users", "pre_auth_keys", "nodes", "api_keys", "policies")} == {
        "users": 11,
        "pre_auth_keys": 21,
        "nodes": 51,
        "api_keys": 3,
        "policies": 2,
    }
    assert _next(pg, "database_versions") == 2  # no AUTOINCREMENT: max(id) + 1, as in SQLite


def test_empty_tables_start_at_one(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    sqlite = sample_db.build_large(tmp_path / "hs.sqlite", VERSION, nodes=3, keys=0)
    pg = new_db(VERSION)
    result = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert result.returncode == 0, result.stderr
    assert (_next(pg, "pre_auth_keys"), _next(pg, "api_keys"), _next(pg, "nodes")) == (1, 1, 4)
