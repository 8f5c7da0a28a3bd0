"""SQLite → PostgreSQL migration against the real tools: PostgreSQL 15, psql and pgloader 3.6.

The target stands in for what Headscale creates on an empty database (postgres-schema.derived.sql). Every
failure case asserts that the migration stops, and where pgloader itself would have reported success (exit
code 0), shows that too.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from migration import (
    MigrationError,
    PsqlConnection,
    check_target,
    preflight,
    render_pgloader,
    reset_target,
    run_pgloader,
    schema_for,
    verify,
)
from migration.catalog import foreign_key_problems, foreign_keys, row_counts, schema_problems
from migration.values import parse_timestamp
from migration.versions import BIGINT, BOOLEAN, BYTEA, TIMESTAMPTZ, HeadscaleSchema
from tests.migration.helpers import load
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PROJECT_DIR, PgServer

VERSIONS = sample_db.VERSIONS
NewDb = Callable[..., PsqlConnection]


def _shared_or_skip() -> None:
    if not (sample_db.SHARED_DIR / "reference" / "headscale").is_dir():
        pytest.skip(f"{sample_db.SHARED_DIR} is absent: the upstream schemas are not on this machine")


@pytest.fixture(autouse=True)
def _shared() -> None:
    _shared_or_skip()


def _mutate(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def _digest(path: Path) -> tuple[str, list[str]]:
    """The file's hash and its directory listing: a read-only step changes neither (no -wal, no -journal)."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in path.parent.iterdir())


# --------------------------------------------------------------------------- the spec against the reference


@pytest.mark.parametrize("version", VERSIONS)
def test_spec_has_exactly_the_columns_of_upstream_sqlite_schema(version: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript(sample_db.schema_sql(version))
    upstream = {
        name: {row[1] for row in conn.execute(f'PRAGMA table_info("{name}")')}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'sqlite_sequence'")
    }
    spec = schema_for(version)
    assert upstream == {table.name: {column.name for column in table.columns} for table in spec.tables}


@pytest.mark.parametrize("version", VERSIONS)
def test_spec_matches_derived_postgres_schema(version: str, new_db: NewDb) -> None:
    pg = new_db(version)
    spec = schema_for(version)
    assert schema_problems(pg, spec) == []
    assert foreign_key_problems(pg, spec) == []
    assert set(foreign_keys(pg)) == {fk.name for fk in spec.foreign_keys}
    assert sorted(row[0] for row in pg.query("SELECT id FROM migrations")) == sorted(spec.migration_ids)


def test_migration_package_imports_nothing_from_components() -> None:
    imported = set()
    for path in (PROJECT_DIR / "migration").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
    assert "migration.versions" in imported
    assert not {name for name in imported if name.split(".")[0] in ("components", "program", "tools", "tests")}


def test_unknown_version_is_refused() -> None:
    with pytest.raises(MigrationError, match=r"no migration spec for Headscale '0\.27\.1'"):
        schema_for("0.27.1")
    assert schema_for("v0.29.2").version == "0.29.2"


# --------------------------------------------------------------------------- pgloader command file, psql


def test_render_pgloader_command_file_exactly(tmp_path: Path) -> None:
    text = render_pgloader(
        tmp_path / "hs.sqlite", "postgresql://headscale:s3cret@db.example:5432/headscale?sslmode=require", ["a", "b_c"]
    )
    assert text == (
        "LOAD DATABASE\n"
        f"  FROM sqlite://{tmp_path}/hs.sqlite\n"
        "  INTO postgresql://headscale@db.example:5432/headscale?sslmode=require\n"
        "\n"
        "WITH data only, truncate, reset sequences\n"
        "\n"
        "SET PostgreSQL PARAMETERS timezone to 'UTC'\n"
        "\n"
        "INCLUDING ONLY TABLE NAMES LIKE 'a', 'b_c';\n"
    )


@pytest.mark.parametrize(
    ("path", "tables"), [("/tmp/it's here.db", ["users"]), ("/tmp/hs.db", ["users; DROP"]), ("/tmp/hs.db", [])]
)
def test_render_pgloader_refuses_what_it_cannot_quote(path: str, tables: list[str]) -> None:
    with pytest.raises(MigrationError, match="load"):
        render_pgloader(Path(path), "postgresql://u@h:5432/d", tables)


def test_password_stays_out_of_argv_url_and_repr() -> None:
    pg = PsqlConnection.from_url("postgresql://headscale:s3cr%40t@db:6543/hs?sslmode=require")
    assert (pg.host, pg.port, pg.user, pg.dbname, pg.sslmode) == ("db", 6543, "headscale", "hs", "require")
    assert pg.env()["PGPASSWORD"] == "s3cr@t"
    assert pg.env()["PGSSLMODE"] == "require"
    for shown in (" ".join(pg.argv()), pg.url(), repr(pg)):
        assert "s3cr" not in shown
    assert PsqlConnection.from_url("postgresql://u:inurl@h/d", password="given").password == "given"


# --------------------------------------------------------------------------- preflight (SQLite only)


@pytest.mark.parametrize("version", VERSIONS)
def test_preflight_records_counts_and_migrations_without_touching_the_file(version: str, tmp_path: Path) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", version)
    before = _digest(sqlite)
    report = preflight(sqlite, version=version)
    assert _digest(sqlite) == before
    assert report.row_counts["nodes"] == 4
    assert report.row_counts["pre_auth_keys"] == 4
    assert report.row_counts["users"] == 3
    assert set(report.extra_migrations) == set(sample_db.OLDER_MIGRATION_IDS)
    assert set(schema_for(version).migration_ids) <= set(report.migrations)
    assert report.database_version == ("v0.29.2" if version == "0.29.2" else None)


BAD_VALUES = [
    ("UPDATE nodes SET user_id = 'abc' WHERE id = 2", "nodes.user_id id=2: text value where bigint needs an integer"),
    ("UPDATE nodes SET auth_key_id = 1.5 WHERE id = 1", "nodes.auth_key_id id=1: real value"),
    ("UPDATE pre_auth_keys SET reusable = 2 WHERE id = 1", "pre_auth_keys.reusable id=1: integer value where boolean"),
    ("UPDATE pre_auth_keys SET used = 'true' WHERE id = 2", "pre_auth_keys.used id=2: text value where boolean"),
    ("UPDATE users SET created_at = 'yesterday' WHERE id = 1", "users.created_at id=1: unparseable timestamp"),
    ("UPDATE users SET created_at = 1700000000 WHERE id = 2", "users.created_at id=2: integer value where timestamp"),
    ("UPDATE users SET updated_at = '10000-01-01 00:00:00+00:00' WHERE id = 3", "users.updated_at id=3: unparseable"),
    (
        "UPDATE nodes SET host_info = '{\"a\":\"x' || char(0) || 'y\"}' WHERE id = 1",
        "nodes.host_info id=1: text contains a NUL",
    ),
    ("UPDATE nodes SET hostname = CAST(x'c328' AS TEXT) WHERE id = 3", "nodes.hostname id=3: text is not valid UTF-8"),
    ("UPDATE nodes SET endpoints = '[\"1.2.3.4:5\",' WHERE id = 1", "nodes.endpoints id=1: not valid JSON"),
    ("UPDATE pre_auth_keys SET tags = '[tag:x]' WHERE id = 3", "pre_auth_keys.tags id=3: not valid JSON"),
    ("UPDATE api_keys SET hash = 'JDJhJDEw' WHERE id = 1", "api_keys.hash id=1: text value where bytea needs a blob"),
    (
        "UPDATE nodes SET given_name = substr(hex(zeroblob(32)), 1, 64) WHERE id = 1",
        "nodes.given_name id=1: 64 characters do not fit",
    ),
    ("UPDATE users SET name = x'00ff' WHERE id = 1", "users.name id=1: blob value where text needs text"),
    ("INSERT INTO migrations (id) VALUES (NULL)", "migrations.id id=None: NULL in a NOT NULL column"),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "message"), BAD_VALUES, ids=[m.split(":")[0] for _, m in BAD_VALUES])
def test_preflight_refuses_values_postgres_would_not_hold(statement: str, message: str, tmp_path: Path) -> None:
    sqlite = _mutate(sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), statement)
    with pytest.raises(MigrationError) as caught:
        preflight(sqlite, version="0.29.2")
    assert caught.value.step == "preflight"
    assert message in caught.value.message


def test_preflight_accepts_empty_json_null_and_go_zero_time(tmp_path: Path) -> None:
    sqlite = _mutate(
        sample_db.build(tmp_path / "hs.sqlite", "0.29.2"),
        "UPDATE nodes SET endpoints = '', tags = 'null', expiry = '0001-01-01 00:00:00+00:00' WHERE id = 1",
        "UPDATE users SET created_at = '2026-01-01T00:00:00Z', updated_at = '2026-01-01 00:00:00' WHERE id = 1",
    )
    assert preflight(sqlite, version="0.29.2").row_counts["nodes"] == 4


def test_preflight_refuses_a_dangling_foreign_key(tmp_path: Path) -> None:
    sqlite = _mutate(sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), "UPDATE nodes SET user_id = 99 WHERE id = 3")
    with pytest.raises(MigrationError, match=r"nodes id=3: user_id=99 has no row in users") as caught:
        preflight(sqlite, version="0.29.2")
    assert caught.value.step == "preflight"


def test_preflight_refuses_a_database_the_pinned_version_has_not_migrated(tmp_path: Path) -> None:
    sqlite = _mutate(
        sample_db.build(tmp_path / "hs.sqlite", "0.28.0"),
        "CREATE TABLE database_versions (id integer PRIMARY KEY, version text NOT NULL, updated_at datetime)",
    )
    with pytest.raises(MigrationError, match=r"lacks 3 migration\(s\).*202602201200-clear-tagged-node-user-id"):
        preflight(sqlite, version="0.29.2")


def test_preflight_refuses_a_database_last_opened_by_another_minor(tmp_path: Path) -> None:
    sqlite = _mutate(
        sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), "UPDATE database_versions SET version = 'v0.30.0'"
    )
    with pytest.raises(MigrationError, match=r"last opened by Headscale v0\.30\.0, the pinned version is 0\.29\.2"):
        preflight(sqlite, version="0.29.2")


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("ALTER TABLE nodes ADD COLUMN forced_tags text", "nodes has columns Headscale 0.29.2 does not create"),
        ("DROP TABLE policies", "table policies is missing"),
        ("CREATE TABLE preXauthXkeys (id integer)", "LIKE patterns would also pick tables ['preXauthXkeys']"),
    ],
)
def test_preflight_refuses_a_schema_that_is_not_the_pinned_versions(
    statement: str, message: str, tmp_path: Path
) -> None:
    sqlite = _mutate(sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), statement)
    with pytest.raises(MigrationError, match=r"SQLite schema is not Headscale 0\.29\.2's") as caught:
        preflight(sqlite, version="0.29.2")
    assert message in caught.value.message


def test_preflight_refuses_a_corrupt_file(tmp_path: Path) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", "0.29.2")
    data = bytearray(sqlite.read_bytes())
    page = 4096
    data[3 * page + 8 : 4 * page] = b"\xa5" * (page - 8)  # clobber a b-tree page
    sqlite.write_bytes(bytes(data))
    with pytest.raises(MigrationError) as caught:
        preflight(sqlite, version="0.29.2")
    assert caught.value.step == "preflight"


# --------------------------------------------------------------------------- timestamps vs PostgreSQL


def test_timestamp_normalisation_agrees_with_postgres(new_db: NewDb) -> None:
    rng = random.Random(7)
    samples = ["0001-01-01 00:00:00+00:00", "2026-03-01 10:00:20.9999995+00:00", "2026-03-01 23:59:59.9999999-05:00"]
    for _ in range(300):
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 9)))
        zone = rng.choice(["", "Z", "+00:00", "+02:00", "-05:30", "+0530", "+09"])
        samples.append(
            f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            f"{rng.choice(' T')}{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            f"{'.' + fraction if fraction else ''}{zone}"
        )
    values = ", ".join(f"('{text}')" for text in samples)
    rows = new_db().query(
        f"SELECT (extract(epoch FROM v::timestamptz) * 1000000)::bigint FROM (VALUES {values}) AS t(v)"
    )
    assert [parse_timestamp(text) for text in samples] == [int(row[0]) for row in rows]


# --------------------------------------------------------------------------- the whole migration


def _pg_rows(pg: PsqlConnection, table: str) -> list[dict[str, object]]:
    text = pg.query(f'SELECT row_to_json(t)::text FROM public."{table}" t ORDER BY id')
    return [json.loads(row[0]) for row in text]


def _epoch_ns(text: str) -> int:
    """Nanoseconds since the epoch of a Go or PostgreSQL time string, without the code under test."""
    match = re.fullmatch(r"(.{19})(?:\.(\d+))?(.*)", text.replace("T", " ").replace("Z", "+00:00"))
    assert match is not None, text
    moment = dt.datetime.fromisoformat(match[1] + (match[3] or "+00:00"))
    seconds = (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(seconds=1)
    return seconds * 1_000_000_000 + int((match[2] or "").ljust(9, "0"))


def _assert_same_values(sqlite: Path, pg: PsqlConnection, schema: HeadscaleSchema) -> None:
    conn = sqlite3.connect(f"{sqlite.as_uri()}?mode=ro", uri=True)
    for table in schema.tables:
        if table.name == "migrations":
            continue  # no id order to speak of; compared as a set below
        source = conn.execute(f'SELECT * FROM "{table.name}" ORDER BY id').fetchall()
        names = [d[1] for d in conn.execute(f'PRAGMA table_info("{table.name}")')]
        target = _pg_rows(pg, table.name)
        assert len(target) == len(source), table.name
        for row, got in zip(source, target, strict=True):
            for name, value in zip(names, row, strict=True):
                kind = table.column(name).pg_type
                have = got[name]
                where = f"{table.name}.{name} id={row[0]}"
                if value is None:
                    assert have is None, where
                elif kind == TIMESTAMPTZ:
                    assert abs(_epoch_ns(have) - _epoch_ns(value)) <= 500, where  # microseconds, rounded
                elif kind == BOOLEAN:
                    assert have is bool(value), where
                elif kind == BYTEA:
                    assert have == "\\x" + value.hex(), where
                elif kind == BIGINT:
                    assert have == value, where
                else:
                    assert have == value, where
    ids = sorted(row[0] for row in conn.execute("SELECT id FROM migrations"))
    assert sorted(row[0] for row in pg.query("SELECT id FROM migrations")) == ids
    conn.close()


def _cli(*args: str, password: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"PGPASSWORD": password}
    return subprocess.run(
        [sys.executable, "-m", "migration", *args],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_migrates_every_value(version: str, tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", version)
    before = _digest(sqlite)
    pg = new_db(version)
    result = _cli(
        "run", "--sqlite", str(sqlite), "--pg-url", pg.url(), "--version", version, password=pg_server.app_password
    )
    assert result.returncode == 0, result.stderr
    steps = [line.split("]")[0] + "]" for line in result.stdout.splitlines() if line.startswith("[")]
    assert steps == ["[snapshot]", "[preflight]", "[target]", "[load]", "[verify]"]
    assert pg_server.app_password not in result.stdout + result.stderr
    assert _digest(sqlite) == before
    _assert_same_values(sqlite, pg, schema_for(version))
    assert int(pg.scalar("SELECT nextval('nodes_id_seq')")) == 5


def test_cli_refuses_a_password_on_the_command_line(tmp_path: Path) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", "0.29.2")
    result = _cli(
        "run", "--sqlite", str(sqlite), "--pg-url", "postgresql://u:hunter2@127.0.0.1:1/d", "--version", "0.29.2",
        password="",
    )  # fmt: skip
    assert result.returncode == 1
    assert "[target] FAILED: --pg-url must not contain the password" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr


def test_non_empty_target_is_refused_unless_forced(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    sqlite = sample_db.build(tmp_path / "hs.sqlite", "0.29.2")
    pg = new_db("0.29.2")
    schema = schema_for("0.29.2")
    load(sqlite, pg, "0.29.2", tmp_path / "work")
    pg.execute("UPDATE users SET name = 'changed-after-migration' WHERE id = 1")
    with pytest.raises(MigrationError, match=r"already holds data \(users=3, pre_auth_keys=4") as caught:
        check_target(pg, schema)
    assert caught.value.step == "target"

    args = ["run", "--sqlite", str(sqlite), "--pg-url", pg.url(), "--version", "0.29.2"]
    refused = _cli(*args, password=pg_server.app_password)
    assert refused.returncode == 1
    assert "[target] FAILED" in refused.stderr
    assert "--force" in refused.stderr
    assert pg.scalar("SELECT name FROM users WHERE id = 1") == "changed-after-migration"

    forced = _cli(*args, "--force", password=pg_server.app_password)
    assert forced.returncode == 0, forced.stderr
    assert "[reset] ok" in forced.stdout
    assert pg.scalar("SELECT name FROM users WHERE id = 1") == "alice"


def test_target_without_headscale_schema_is_refused(new_db: NewDb) -> None:
    with pytest.raises(
        MigrationError, match=r"(?s)does not hold the schema Headscale 0\.29\.2 creates.*table users is missing"
    ):
        check_target(new_db(), schema_for("0.29.2"))


# --------------------------------------------------------------------------- what pgloader lets through


def test_one_bad_value_empties_the_table_with_exit_0_and_verify_catches_it(tmp_path: Path, new_db: NewDb) -> None:
    sqlite = _mutate(
        sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), "UPDATE pre_auth_keys SET reusable = 2 WHERE id = 4"
    )
    with pytest.raises(MigrationError, match=r"pre_auth_keys\.reusable id=4"):
        preflight(sqlite, version="0.29.2")  # the guard that normally stops this before pgloader runs

    pg = new_db("0.29.2")
    report = load(sqlite, pg, "0.29.2", tmp_path / "unchecked", check=False)
    assert report.returncode == 0  # pgloader's verdict
    assert report.table_rows("pre_auth_keys") == 0
    assert row_counts(pg, ("pre_auth_keys", "nodes")) == {"pre_auth_keys": 0, "nodes": 4}
    assert "fk_nodes_auth_key" not in foreign_keys(pg)  # could not be re-created over the orphaned nodes

    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version="0.29.2")
    assert caught.value.step == "verify"
    assert "pre_auth_keys: 0 rows in PostgreSQL, 4 in SQLite" in caught.value.message
    assert "foreign key fk_nodes_auth_key (nodes.auth_key_id -> pre_auth_keys) is missing" in caught.value.message
    assert "foreign key fk_nodes_auth_key: 3 row(s) reference a missing parent" in caught.value.message

    with pytest.raises(MigrationError, match=r"pgloader counted 1 error\(s\) in 'pre_auth_keys'") as checked:
        load(sqlite, new_db("0.29.2"), "0.29.2", tmp_path / "checked")
    assert checked.value.step == "load"


def test_nul_byte_is_cut_silently_and_only_the_checksum_catches_it(tmp_path: Path, new_db: NewDb) -> None:
    sqlite = _mutate(
        sample_db.build(tmp_path / "hs.sqlite", "0.29.2"),
        "UPDATE nodes SET host_info = '{\"Hostname\":\"db-1' || char(0) || 'x\"}' WHERE id = 2",
    )
    pg = new_db("0.29.2")
    report = load(sqlite, pg, "0.29.2", tmp_path / "work")  # checked: pgloader reports nothing wrong at all
    assert report.returncode == 0
    assert report.errors == []
    assert pg.scalar("SELECT host_info FROM nodes WHERE id = 2") == '{"Hostname":"db-1'
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version="0.29.2")
    assert caught.value.message.splitlines()[1:] == ["  nodes.host_info: values differ (id 2)"]


def test_dangling_foreign_key_drops_the_constraint_with_exit_0_and_is_caught(tmp_path: Path, new_db: NewDb) -> None:
    sqlite = _mutate(sample_db.build(tmp_path / "hs.sqlite", "0.29.2"), "UPDATE nodes SET user_id = 99 WHERE id = 3")
    with pytest.raises(MigrationError, match="nodes id=3: user_id=99 has no row in users"):
        preflight(sqlite, version="0.29.2")

    pg = new_db("0.29.2")
    report = load(sqlite, pg, "0.29.2", tmp_path / "unchecked", check=False)
    assert report.returncode == 0
    assert "fk_nodes_user" not in foreign_keys(pg)
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version="0.29.2")
    assert "foreign key fk_nodes_user (nodes.user_id -> users) is missing" in caught.value.message
    assert "foreign key fk_nodes_user: 1 row(s) reference a missing parent" in caught.value.message


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_killed_run_reruns_cleanly_only_after_reset(tmp_path: Path, new_db: NewDb) -> None:
    version = "0.29.2"
    schema = schema_for(version)
    sqlite = sample_db.build_large(tmp_path / "hs.sqlite", version, nodes=500, keys=500)
    pg = new_db(version)
    # Deterministic "mid-load": a trigger makes pgloader's COPY into nodes wait on a lock this test holds.
    pg.execute(
        "CREATE FUNCTION wait_for_test() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$;"
        " CREATE TRIGGER wait_for_test BEFORE INSERT ON nodes FOR EACH ROW EXECUTE FUNCTION wait_for_test();"
    )
    holder = subprocess.Popen(
        pg.argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=pg.env(), text=True
    )
    assert holder.stdin is not None
    holder.stdin.write("SELECT pg_advisory_lock(4242);\n")
    holder.stdin.flush()

    def advisory(granted: bool) -> bool:
        flag = "" if granted else "NOT "
        return (
            pg.scalar(f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND {flag}granted")
            != "0"
        )

    def kill_mid_load(proc: subprocess.Popen[bytes]) -> None:
        _wait_for(lambda: advisory(granted=False), "pgloader to block inside the nodes COPY")
        proc.kill()

    try:
        _wait_for(lambda: advisory(granted=True), "the test's advisory lock")
        with pytest.raises(MigrationError, match="pgloader was killed by signal SIGKILL") as killed:
            run_pgloader(sqlite, pg, schema.table_names, workdir=tmp_path / "killed", on_start=kill_mid_load)
        assert killed.value.step == "load"
    finally:
        holder.stdin.write("SELECT pg_advisory_unlock(4242);\n")
        holder.stdin.close()
        holder.wait(timeout=30)
    others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    _wait_for(lambda: pg.scalar(others) == "0", "the killed pgloader's sessions to end")
    pg.execute("DROP TRIGGER wait_for_test ON nodes; DROP FUNCTION wait_for_test();")

    # What the kill left: the foreign keys pgloader dropped before copying, and a partial load.
    assert row_counts(pg, ("nodes",)) == {"nodes": 0}
    assert foreign_keys(pg) == {}
    with pytest.raises(MigrationError, match="--force") as refused:
        check_target(pg, schema)
    assert "foreign key fk_nodes_user (nodes.user_id -> users) is missing" in refused.value.message
    with pytest.raises(MigrationError, match="nodes: 0 rows in PostgreSQL, 500 in SQLite"):
        verify(sqlite, pg, version=version)

    # A plain rerun "succeeds" (exit 0, no errors, every row) yet never brings the dropped foreign keys back.
    rerun = run_pgloader(sqlite, pg, schema.table_names, workdir=tmp_path / "rerun")
    assert rerun.returncode == 0
    assert rerun.table_rows("nodes") == 500
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version=version)
    assert [line.strip() for line in caught.value.message.splitlines()[1:]] == [
        "foreign key fk_pre_auth_keys_user (pre_auth_keys.user_id -> users) is missing",
        "foreign key fk_nodes_user (nodes.user_id -> users) is missing",
        "foreign key fk_nodes_auth_key (nodes.auth_key_id -> pre_auth_keys) is missing",
    ]

    # reset_target restores Headscale's empty schema, constraints included; then the rerun verifies.
    reset_target(pg, schema)
    assert row_counts(pg, schema.data_tables) == dict.fromkeys(schema.data_tables, 0)
    check_target(pg, schema)
    run_pgloader(sqlite, pg, schema.table_names, workdir=tmp_path / "after-reset")
    report = verify(sqlite, pg, version=version)
    assert report.row_counts["nodes"] == 500
    assert set(report.foreign_keys) == {fk.name for fk in schema.foreign_keys}


# --------------------------------------------------------------------------- verify on its own


@pytest.fixture(scope="module")
def loaded(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A correctly migrated 0.29.2 database to copy from (TEMPLATE), and its SQLite source."""
    tmp = tmp_path_factory.mktemp("loaded")
    sqlite = sample_db.build(tmp / "hs.sqlite", "0.29.2")
    pg = pg_server.headscale_database("loaded_0_29_2", "0.29.2")
    load(sqlite, pg, "0.29.2", tmp / "work")
    verify(sqlite, pg, version="0.29.2")
    return sqlite, "loaded_0_29_2"


TAMPERING = [
    ("SELECT setval('nodes_id_seq', 2)", "nodes: the id sequence hands out 3 next, but max(id) is 4"),
    ("DELETE FROM migrations WHERE id = 'SCHEMA_INIT'", "migrations: 22 rows in PostgreSQL, 23 in SQLite"),
    ("UPDATE migrations SET id = 'SCHEMA_INIT2' WHERE id = 'SCHEMA_INIT'", "extra in PostgreSQL ['SCHEMA_INIT2']"),
    (
        "UPDATE nodes SET last_seen = last_seen + interval '1 microsecond' WHERE id = 1",
        "nodes.last_seen: values differ (id 1)",
    ),
    ("UPDATE pre_auth_keys SET used = NOT used WHERE id IN (2, 4)", "pre_auth_keys.used: values differ (id 2, 4)"),
    ("UPDATE api_keys SET hash = hash || '\\x00'::bytea WHERE id = 2", "api_keys.hash: values differ (id 2)"),
    ("UPDATE policies SET data = data || ' ' WHERE id = 1", "policies.data: values differ (id 1)"),
    ("UPDATE users SET deleted_at = NULL WHERE id = 3", "users.deleted_at: values differ (id 3)"),
    ("UPDATE database_versions SET version = 'v0.29.1'", "database_versions.version: values differ (id 1)"),
    (
        "ALTER TABLE nodes DROP CONSTRAINT fk_nodes_user",
        "foreign key fk_nodes_user (nodes.user_id -> users) is missing",
    ),
    (
        "ALTER TABLE nodes DROP CONSTRAINT fk_nodes_user; ALTER TABLE nodes ADD CONSTRAINT fk_nodes_user"
        " FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE NOT VALID",
        "foreign key fk_nodes_user is NOT VALID",
    ),
    (
        "ALTER TABLE nodes DROP CONSTRAINT fk_nodes_user; ALTER TABLE nodes ADD CONSTRAINT fk_nodes_user"
        " FOREIGN KEY (user_id) REFERENCES users (id)",
        "foreign key fk_nodes_user differs",
    ),
    ("ALTER TABLE nodes ADD COLUMN extra text", "table nodes has columns Headscale 0.29.2 does not: ['extra']"),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "message"), TAMPERING, ids=[m.split(":")[0][:40] for _, m in TAMPERING])
def test_verify_names_what_differs(statement: str, message: str, loaded: tuple[Path, str], new_db: NewDb) -> None:
    sqlite, template = loaded
    pg = new_db(template=template)  # a copy of a database that verified (see ``loaded``)
    pg.execute(statement)
    with pytest.raises(MigrationError) as caught:
        verify(sqlite, pg, version="0.29.2")
    assert caught.value.step == "verify"
    assert message in caught.value.message


def test_verify_report_covers_every_column(new_db: NewDb, loaded: tuple[Path, str]) -> None:
    sqlite, template = loaded
    report = verify(sqlite, new_db(template=template), version="0.29.2")
    schema = schema_for("0.29.2")
    assert set(report.checksums) == {f"{t.name}.{c.name}" for t in schema.tables for c in t.columns}
    assert report.sequences["nodes"] == 5
    assert report.migrations == 23
