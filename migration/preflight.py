"""Refuse a SQLite database that would not arrive intact, before anything touches PostgreSQL.

pgloader drops whole batches over one value PostgreSQL rejects, and does so with exit code 0, so every value
is checked here against the type it will land in. The file is opened read-only.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from migration.errors import MigrationError
from migration.source import like_selected_tables, open_readonly, table_columns
from migration.values import fit_problem
from migration.versions import HeadscaleSchema, Table, schema_for

_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.\d+.*")


@dataclass(frozen=True)
class PreflightReport:
    """What the source holds: rows per table, migration ids, the Headscale version that last opened it."""

    version: str
    row_counts: dict[str, int]
    migrations: tuple[str, ...]
    extra_migrations: tuple[str, ...]  # ids of older releases the pinned version no longer lists: harmless
    database_version: str | None  # database_versions.version (0.29+), None when absent


def preflight(sqlite_path: Path, *, version: str, max_problems: int = 30) -> PreflightReport:
    """Check integrity, schema, migrations, foreign keys and every value of ``sqlite_path`` for ``version``.

    A damaged file or a foreign schema stops at once; everything else is collected, so one run lists every
    row an operator has to fix.
    """
    schema = schema_for(version)
    conn = open_readonly(sqlite_path)
    problems: list[str] = []
    try:
        _integrity(conn)
        _tables(conn, schema)
        migrations = _migrations(conn, schema, problems)
        database_version = _database_version(conn, schema, problems)
        _foreign_keys(conn, problems)
        counts = {table.name: _check_values(conn, table, problems) for table in schema.tables}
    except sqlite3.DatabaseError as error:
        raise MigrationError("preflight", f"cannot read {sqlite_path}: {error}") from error
    finally:
        conn.close()
    if problems:
        more = f"\n  ... and {len(problems) - max_problems} more" if len(problems) > max_problems else ""
        raise MigrationError(
            "preflight",
            f"{len(problems)} problem(s) would keep the data from arriving intact in PostgreSQL:\n  "
            + "\n  ".join(problems[:max_problems])
            + more,
        )
    expected = set(schema.migration_ids)
    return PreflightReport(
        version=schema.version,
        row_counts=counts,
        migrations=tuple(migrations),
        extra_migrations=tuple(m for m in migrations if m not in expected),
        database_version=database_version,
    )


def _integrity(conn: sqlite3.Connection) -> None:
    rows = [_text(row[0]) for row in conn.execute("PRAGMA integrity_check").fetchall()]
    if rows != ["ok"]:
        raise MigrationError("preflight", "PRAGMA integrity_check failed:\n  " + "\n  ".join(rows[:10]))


def _foreign_keys(conn: sqlite3.Connection, problems: list[str]) -> None:
    """PRAGMA foreign_key_check, explained per row (pgloader would drop the constraint and report success)."""
    for table, rowid, parent, fk_id in conn.execute("PRAGMA foreign_key_check").fetchall():
        table, parent = _text(table), _text(parent)
        column = next(
            (_text(fk[3]) for fk in conn.execute(f'PRAGMA foreign_key_list("{table}")') if fk[0] == fk_id), "?"
        )
        value = conn.execute(f'SELECT "{column}" FROM "{table}" WHERE rowid = ?', (rowid,)).fetchone()
        shown = _text(value[0]) if value else "?"
        problems.append(
            f"{table} id={rowid}: {column}={shown} has no row in {parent} (a broken foreign key: PostgreSQL"
            " would refuse the constraint)"
        )


def _tables(conn: sqlite3.Connection, schema: HeadscaleSchema) -> None:
    """Every table present with exactly the pinned version's columns, and pgloader's LIKE picking only them."""
    problems = []
    for table in schema.tables:
        have = table_columns(conn, table.name)
        if not have:
            problems.append(f"table {table.name} is missing")
            continue
        want = [column.name for column in table.columns]
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        if missing:
            problems.append(f"table {table.name} lacks columns {missing}")
        if extra:
            problems.append(f"table {table.name} has columns Headscale {schema.version} does not create: {extra}")
    picked = like_selected_tables(conn, schema.table_names)
    stray = sorted(picked - set(schema.table_names))
    if stray:
        problems.append(f"pgloader's LIKE patterns would also pick tables {stray}")
    if problems:
        raise MigrationError(
            "preflight",
            f"the SQLite schema is not Headscale {schema.version}'s (run the pinned version on SQLite first):\n  "
            + "\n  ".join(problems),
        )


def _migrations(conn: sqlite3.Connection, schema: HeadscaleSchema, problems: list[str]) -> list[str]:
    present = [_text(row[0]) for row in conn.execute("SELECT id FROM migrations ORDER BY id").fetchall()]
    missing = [migration_id for migration_id in schema.migration_ids if migration_id not in set(present)]
    if missing:
        problems.append(
            f"migrations: the SQLite database lacks {len(missing)} migration(s) Headscale {schema.version} runs:"
            f" {missing}; start Headscale {schema.version} on SQLite first, then migrate"
        )
    return present


def _database_version(conn: sqlite3.Connection, schema: HeadscaleSchema, problems: list[str]) -> str | None:
    """0.29+: the version that last opened the file must be the pinned minor (Headscale refuses otherwise)."""
    if "database_versions" not in schema.table_names:
        return None
    row = conn.execute("SELECT version FROM database_versions ORDER BY id DESC LIMIT 1").fetchone()
    if row is None or row[0] is None:
        return None
    found = _text(row[0])
    match = _SEMVER.fullmatch(found)
    if match and f"{match[1]}.{match[2]}" != schema.minor:
        problems.append(
            f"database_versions: the SQLite database was last opened by Headscale {found}, the pinned version"
            f" is {schema.version}"
        )
    return found


def _check_values(conn: sqlite3.Connection, table: Table, problems: list[str]) -> int:
    """Check every value of ``table`` against its PostgreSQL type; returns the row count."""
    selected = ", ".join(f'"{column.name}", typeof("{column.name}")' for column in table.columns)
    pk = f'"{table.primary_key}"'
    count = 0
    for row in conn.execute(f'SELECT {pk}, {selected} FROM "{table.name}" ORDER BY {pk}'):
        count += 1
        for index, column in enumerate(table.columns):
            value, sqlite_type = row[1 + 2 * index], _text(row[2 + 2 * index])
            problem = fit_problem(column, value, sqlite_type)
            if problem is not None:
                problems.append(f"{table.name}.{column.name} {table.primary_key}={_text(row[0])}: {problem}")
    return count


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
