"""Preflight refuses, before anything touches the target, every value the real load would refuse.

Each case is shown twice: real pgloader into a fresh Headscale database fails the table (with exit code 0), and
``python -m migration run`` stops at ``[preflight]`` naming table, column, row id and the reason, the target
exactly as it was. The edge values just inside every bound load and verify, so the bounds are exact.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from migration import MigrationError, PsqlConnection, preflight, run_pgloader, schema_for
from tests.migration.helpers import cli, mutate, run_args, target_state
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"


def _random_text(length: int, seed: int = 1) -> str:
    """Text pglz cannot shrink, so its index row is as long as its bytes."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


@dataclass(frozen=True)
class Refusal:
    id: str
    statements: tuple[str | tuple[str, tuple[object, ...]], ...]
    messages: tuple[str, ...]  # each must appear in the preflight failure
    table: str  # the table the real load fails


P62 = 2**62
REFUSALS = [
    Refusal(
        "fk-2^62",
        (f"INSERT INTO users (id, name) VALUES ({P62}, 'big')", f"UPDATE nodes SET user_id = {P62} WHERE id = 1"),
        ("nodes.user_id id=1: integer outside -2^62 .. 2^62-1",),
        "nodes",
    ),
    Refusal(
        "fk-minus-2^62-1",
        (
            f"INSERT INTO pre_auth_keys (id, prefix) VALUES ({-P62 - 1}, 'neg')",
            f"UPDATE nodes SET auth_key_id = {-P62 - 1} WHERE id = 2",
        ),
        ("nodes.auth_key_id id=2: integer outside -2^62 .. 2^62-1",),
        "nodes",
    ),
    Refusal(
        "id-without-autoincrement",  # database_versions.id is a plain INTEGER PRIMARY KEY
        (f"UPDATE database_versions SET id = {P62}",),
        (f"database_versions.id id={P62}: integer outside -2^62 .. 2^62-1",),
        "database_versions",
    ),
    Refusal(
        "id-not-in-sqlite_sequence",  # pgloader's sign of AUTOINCREMENT is the table's row in sqlite_sequence
        (
            f"INSERT INTO policies (id, data) VALUES ({P62}, '{{}}')",
            "DELETE FROM sqlite_sequence WHERE name = 'policies'",
        ),
        (f"policies.id id={P62}: integer outside -2^62 .. 2^62-1",),
        "policies",
    ),
    Refusal(
        "offset+16:00",
        ("UPDATE users SET created_at = '2026-03-01 10:00:00+16:00' WHERE id = 1",),
        ("users.created_at id=1: unparseable timestamp: time zone offset +16:00 is beyond",),
        "users",
    ),
    Refusal(
        "offset-16",
        ("UPDATE nodes SET last_seen = '2026-03-01 10:00:00-16' WHERE id = 3",),
        ("nodes.last_seen id=3: unparseable timestamp: time zone offset -16 is beyond",),
        "nodes",
    ),
    Refusal(
        "offset+05:99",
        ("UPDATE pre_auth_keys SET expiration = '2026-03-01 10:00:00+05:99' WHERE id = 2",),
        ("pre_auth_keys.expiration id=2: unparseable timestamp: time zone offset +05:99 is beyond",),
        "pre_auth_keys",
    ),
    Refusal(
        "provider_identifier-3024",
        (("UPDATE users SET provider_identifier = ? WHERE id = 2", (_random_text(3024),)),),
        (
            "users.provider_identifier id=2: index idx_provider_identifier would need a 3040-byte row, PostgreSQL's"
            " btree holds at most 2704 bytes",
            "users.name+provider_identifier id=2: index idx_name_provider_identifier would need a 3048-byte row",
        ),
        "users",
    ),
    Refusal(
        "name+provider_identifier-2705",  # 10-byte name + 2589 bytes: each alone fits, the pair does not
        (("UPDATE users SET name = ?, provider_identifier = ? WHERE id = 2", (_random_text(100), _random_text(2589))),),
        ("users.name+provider_identifier id=2: index idx_name_provider_identifier would need a 2712-byte row",),
        "users",
    ),
    Refusal(
        "local-name-3000",
        (("UPDATE users SET name = ? WHERE id = 1", (_random_text(3000),)),),
        (
            "users.name id=1: index idx_name_no_provider_identifier would need a 3016-byte row",
            "users.name+provider_identifier id=1: index idx_name_provider_identifier would need a 3024-byte row",
        ),
        "users",
    ),
    Refusal(
        "api-prefix-2693",
        (("UPDATE api_keys SET prefix = ? WHERE id = 2", (_random_text(2693),)),),
        ("api_keys.prefix id=2: index idx_api_keys_prefix would need a 2712-byte row",),
        "api_keys",
    ),
    Refusal(
        "duplicate-api-prefix",  # the SQLite file lost its unique index; PostgreSQL's refuses the copy
        ("DROP INDEX idx_api_keys_prefix", "UPDATE api_keys SET prefix = 'same'"),
        ("api_keys.prefix id=2: the same key as id=1 under unique index idx_api_keys_prefix",),
        "api_keys",
    ),
    Refusal(
        "duplicate-local-name",
        ("DROP INDEX idx_name_no_provider_identifier", "UPDATE users SET name = 'alice' WHERE id = 3"),
        ("users.name id=3: the same key as id=1 under unique index idx_name_no_provider_identifier",),
        "users",
    ),
    Refusal(
        "duplicate-pre-auth-prefix",
        ("DROP INDEX idx_pre_auth_keys_prefix", "UPDATE pre_auth_keys SET prefix = 'same' WHERE id IN (2, 3)"),
        ("pre_auth_keys.prefix id=3: the same key as id=2 under unique index idx_pre_auth_keys_prefix",),
        "pre_auth_keys",
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[case.id for case in REFUSALS])
def test_preflight_refuses_before_the_target_is_touched_what_the_load_would_refuse(
    case: Refusal, tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    sqlite = mutate(sample_db.build(tmp_path / "hs.sqlite", VERSION), *case.statements)

    # The real tools: pgloader alone fails the table (and exits 0).
    probe = new_db(VERSION)
    report = run_pgloader(sqlite, probe, schema_for(VERSION).table_names, workdir=tmp_path / "probe", check=False)
    line = report.summary[case.table]
    assert (line.errors, report.returncode) >= (1, 0), f"pgloader loaded {case.table} after all: {line}"
    assert line.rows < line.read

    # The migration: refused in preflight, the target exactly as Headscale left it.
    pg = new_db(VERSION)
    before = target_state(pg)
    result = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[preflight] FAILED" in result.stderr, result.stdout + result.stderr
    for message in case.messages:
        assert message in result.stderr
    assert "[target]" not in result.stdout
    assert target_state(pg) == before


def test_edge_values_inside_every_bound_load_and_verify(tmp_path: Path, new_db: NewDb, pg_server: PgServer) -> None:
    top, bottom = P62 - 1, -P62
    sqlite = mutate(
        sample_db.build(tmp_path / "hs.sqlite", VERSION),
        f"INSERT INTO users (id, name) VALUES ({top}, 'top')",  # an AUTOINCREMENT id: all of int64 is carried
        f"INSERT INTO users (id, name) VALUES ({2**63 - 1}, 'max')",
        f"UPDATE nodes SET user_id = {top} WHERE id = 1",
        f"INSERT INTO pre_auth_keys (id, prefix) VALUES ({bottom}, 'bottom')",
        f"UPDATE nodes SET auth_key_id = {bottom} WHERE id = 2",
        f"UPDATE database_versions SET id = {top}",
        "UPDATE users SET created_at = '2026-03-01 10:00:00+15:59',"
        " updated_at = '2026-03-01 10:00:00-1559' WHERE id = 1",
        "UPDATE nodes SET last_seen = '0001-01-01 00:00:00+15:00' WHERE id = 1",  # 1 BC in UTC: PostgreSQL holds it
        ("UPDATE api_keys SET prefix = ? WHERE id = 2", (_random_text(2692),)),  # a 2704-byte index row
        ("UPDATE users SET name = NULL, provider_identifier = ? WHERE id = 2", (_random_text(2684, seed=2),)),
        ("UPDATE users SET name = ?, provider_identifier = ? WHERE id = 3", (_random_text(100), _random_text(2588))),
        ("UPDATE nodes SET host_info = ? WHERE id = 4", ('{"x":"' + _random_text(1_000_000) + '"}',)),  # not indexed
    )
    pg = new_db(VERSION)
    result = cli(*run_args(sqlite, pg), password=pg_server.app_password)
    assert result.returncode == 0, result.stderr
    assert pg.scalar(f"SELECT count(*) FROM users WHERE id IN ({top}, {2**63 - 1})") == "2"
    assert pg.scalar("SELECT user_id FROM nodes WHERE id = 1") == str(top)


def test_a_bad_secret_is_located_but_never_shown(tmp_path: Path) -> None:
    secret = "6e7f" * 12
    sqlite = mutate(
        sample_db.build(tmp_path / "hs.sqlite", VERSION),
        f"UPDATE pre_auth_keys SET key = '{secret}' || char(0) || 'tail' WHERE id = 1",
        "UPDATE api_keys SET hash = 'JDJhJDEwJE45cW84dUxPaWNrZ3gy' WHERE id = 1",
    )
    with pytest.raises(MigrationError) as caught:
        preflight(sqlite, version=VERSION)
    message = caught.value.message
    assert "pre_auth_keys.key id=1: text contains a NUL byte" in message
    assert "api_keys.hash id=1: text value where bytea needs a blob" in message
    assert secret[:8] not in message
    assert "JDJh" not in message
    spec = schema_for(VERSION)
    assert {f"{t.name}.{c.name}" for t in spec.tables for c in t.columns if c.secret} == {
        "pre_auth_keys.key",
        "pre_auth_keys.hash",
        "api_keys.hash",
    }


def test_a_non_integer_autoincrement_mark_is_refused(tmp_path: Path) -> None:
    sqlite = mutate(
        sample_db.build(tmp_path / "hs.sqlite", VERSION), "UPDATE sqlite_sequence SET seq = 'x' WHERE name = 'nodes'"
    )
    with pytest.raises(MigrationError, match=r"sqlite_sequence\.seq name=nodes: text value"):
        preflight(sqlite, version=VERSION)


@pytest.mark.parametrize("version", sample_db.VERSIONS)
def test_index_spec_is_the_derived_schemas(version: str, new_db: NewDb) -> None:
    """Each index of the spec, created under another name, reads back from the catalog exactly like the real one."""
    pg = new_db(version)
    catalog = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT LIKE '%_pkey'"
    real = dict(pg.query(catalog))
    spec = schema_for(version).indexes
    assert set(real) == {index.name for index in spec}
    pg.execute(";\n".join(index.ddl(f"spec_{index.name}") for index in spec) + ";")
    created = {
        name.removeprefix("spec_"): definition for name, definition in pg.query(catalog) if name.startswith("spec_")
    }
    assert {name: definition.replace("spec_", "", 1) for name, definition in created.items()} == real
