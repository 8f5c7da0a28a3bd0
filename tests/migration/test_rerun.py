"""A rerun of ``python -m migration run`` against a target an earlier run verified: the recreated Job.

Pulumi recreates the Job whenever its spec changes (an image bump, a digest pin) or after a failure, and the new
Job runs the whole migration again. Against a target marked verified that rerun loads nothing and writes nothing:
it verifies the target again against its own snapshot and exits 0, or, when source or target changed since,
exits 1 naming what differs, the target untouched and its mark still verified. ``--force`` reloads as always.

"Loads nothing" is shown three ways: the rerun is given a pgloader that does not exist (a load would fail), every
row keeps its xmin (no rewrite), and the table statistics count no new insert or delete.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from migration import MigrationError, PsqlConnection, check_target, schema_for
from tests.migration.helpers import cli, mark, mutate, run_args, target_state
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"
NO_PGLOADER = ("--pgloader", "/nonexistent/pgloader")  # any attempt to load fails with "pgloader not found"
TABLES = schema_for(VERSION).table_names
REMEDY = "set database.migration.force: true (--force)"


def _rows(pg: PsqlConnection) -> dict[str, list[list[str]]]:
    """Every row of every table with its xmin: a reload or any rewrite of a row changes it."""
    return {table: pg.query(f'SELECT xmin::text, t::text FROM public."{table}" t ORDER BY 2') for table in TABLES}


def _row_total(pg: PsqlConnection) -> int:
    return sum(int(pg.scalar(f'SELECT count(*) FROM public."{table}"')) for table in TABLES)


def _steps(stdout: str) -> list[str]:
    return [line.split("]")[0] + "]" for line in stdout.splitlines() if line.startswith("[")]


def _migrated(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> tuple[Path, PsqlConnection, str]:
    """A source and a target the CLI migrated and verified; the verified mark it left."""
    sqlite = sample_db.build(tmp_path / "hs.sqlite", VERSION)
    pg = new_db(VERSION)
    first = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert first.returncode == 0, first.stderr
    verified = mark(pg)
    assert verified.startswith("headscale-migration: verified since ")
    return sqlite, pg, verified


def _assert_refused_untouched(
    result_args: list[str], pg: PsqlConnection, pg_server: PgServer, verified: str, difference: str
) -> None:
    """The rerun fails naming ``difference`` and both ways forward; rows, statistics and mark stay as they were."""
    before = _rows(pg), target_state(pg)
    refused = cli(*result_args, *NO_PGLOADER, password=pg_server.app_password)
    assert refused.returncode == 1, refused.stdout
    assert _steps(refused.stdout) == ["[snapshot]", "[preflight]", "[target]"]
    assert f"[verify] FAILED: {pg.url()} is marked verified by an earlier run ({verified}), but" in refused.stderr
    assert difference in refused.stderr
    assert "Nothing was loaded and the mark is left as it was" in refused.stderr
    assert "investigate which" in refused.stderr
    assert REMEDY in refused.stderr
    assert "pgloader not found" not in refused.stderr
    assert (_rows(pg), target_state(pg)) == before
    assert mark(pg) == verified


def test_a_rerun_against_a_verified_target_verifies_again_and_loads_nothing(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite, pg, verified = _migrated(tmp_path, new_db, pg_server)
    before = _rows(pg), target_state(pg)

    again = cli(*run_args(sqlite, pg), *NO_PGLOADER, password=pg_server.app_password)
    assert again.returncode == 0, again.stderr
    assert _steps(again.stdout) == ["[snapshot]", "[preflight]", "[target]", "[verify]"]
    assert "is marked verified by an earlier run: verifying it again, nothing is loaded" in again.stdout
    closing = again.stdout.splitlines()[-1]
    assert closing.startswith(
        f"target already migrated and verified against this source: {_row_total(pg)} rows verified again,"
        " nothing loaded ("
    )
    assert "pgloader" not in again.stdout + again.stderr
    assert (_rows(pg), target_state(pg)) == before
    assert mark(pg) == verified


def test_a_rerun_after_the_source_changed_is_refused_and_the_target_stays_verified(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite, pg, verified = _migrated(tmp_path, new_db, pg_server)
    mutate(sqlite, ("INSERT INTO users (id, name, created_at) VALUES (4, 'dave', ?)", (sample_db.ts(40),)))
    _assert_refused_untouched(run_args(sqlite, pg), pg, pg_server, verified, "users: 3 rows in PostgreSQL, 4 in SQLite")


def test_a_rerun_after_the_target_changed_is_refused_and_the_target_stays_verified(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite, pg, verified = _migrated(tmp_path, new_db, pg_server)
    pg.execute("UPDATE users SET name = 'changed-after-migration' WHERE id = 1")
    _assert_refused_untouched(run_args(sqlite, pg), pg, pg_server, verified, "users.name: values differ (id 1)")
    assert pg.scalar("SELECT name FROM users WHERE id = 1") == "changed-after-migration"


def test_force_on_a_verified_target_wipes_and_loads_again(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    sqlite, pg, _ = _migrated(tmp_path, new_db, pg_server)
    pg.execute("UPDATE users SET name = 'changed-after-migration' WHERE id = 1")
    before = _rows(pg)

    forced = cli(*run_args(sqlite, pg, VERSION, "--force"), password=pg_server.app_password)
    assert forced.returncode == 0, forced.stderr
    assert _steps(forced.stdout) == ["[snapshot]", "[preflight]", "[target]", "[reset]", "[load]", "[verify]"]
    assert "--force given, resetting it" in forced.stdout
    assert forced.stdout.splitlines()[-1].startswith("migration complete in ")
    assert pg.scalar("SELECT name FROM users WHERE id = 1") == "alice"
    after = _rows(pg)
    assert all({xmin for xmin, _ in after[t]}.isdisjoint(xmin for xmin, _ in before[t]) for t in TABLES)  # reloaded
    assert mark(pg).startswith("headscale-migration: verified since ")


def test_check_target_refuses_a_verified_target_unless_the_caller_reverifies(
    tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    _, pg, verified = _migrated(tmp_path, new_db, pg_server)
    schema = schema_for(VERSION)
    with pytest.raises(MigrationError, match=r"already holds data \(users=3"):
        check_target(pg, schema)  # a library caller that would load is still refused
    accepted = check_target(pg, schema, accept_verified=True)
    assert (accepted.verified, accepted.forced, accepted.mark) == (True, False, verified)
    forced = check_target(pg, schema, force=True, accept_verified=True)
    assert (forced.verified, forced.forced) == (False, True)
