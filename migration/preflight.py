"""Refuse a SQLite database that would not arrive intact, before anything touches PostgreSQL.

pgloader drops whole batches over one value PostgreSQL rejects, and does so with exit code 0, so every value
is checked here against the type it will land in, against what pgloader itself can carry (values.py has the
bounds), against the size limit and the uniqueness of every index of the target schema, so that no value is
refused only once the target has been truncated. Every problem names table, column, row id and the reason;
none shows the value of a secret column (keys, hashes). The file is opened read-only.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from migration.errors import MigrationError
from migration.source import like_selected_tables, open_readonly, table_columns
from migration.values import BTREE_MAX_ROW, fit_problem, index_row_size
from migration.versions import BYTEA, HeadscaleSchema, Index, Table, schema_for

_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.\d+.*")


@dataclass(frozen=True)
class PreflightReport:
    """What the source holds: rows per table, migration ids, the Headscale version that last opened it."""

    version: str
    row_counts: dict[str, int]
    migrations: tuple[str, ...]
    extra_migrations: tuple[str, ...]  # ids of older releases the pinned version no longer lists: harmless
    database_version: str | None  # database_versions.version (0.29+), None when absent
    next_ids: dict[str, int] = field(default_factory=dict)  # table -> the id SQLite would hand out next


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
        marks = autoincrement_marks(conn, schema, problems)
        counts = {
            table.name: _check_values(conn, table, problems, bigserial=table.name in marks) for table in schema.tables
        }
        for index in schema.indexes:
            index_problems(conn, schema.table(index.table), index, problems)
        next_ids = next_ids_of(conn, schema, marks)
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
        next_ids=next_ids,
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


def _check_values(conn: sqlite3.Connection, table: Table, problems: list[str], *, bigserial: bool) -> int:
    """Check every value of ``table`` against its PostgreSQL type; returns the row count.

    ``bigserial``: pgloader sees the table as AUTOINCREMENT, so its primary key carries the whole int64 range.
    """
    selected = ", ".join(f'"{column.name}", typeof("{column.name}")' for column in table.columns)
    pk = f'"{table.primary_key}"'
    count = 0
    for row in conn.execute(f'SELECT {pk}, {selected} FROM "{table.name}" ORDER BY {pk}'):
        count += 1
        for index, column in enumerate(table.columns):
            value, sqlite_type = row[1 + 2 * index], _text(row[2 + 2 * index])
            wide = bigserial and column.name == table.primary_key
            problem = fit_problem(column, value, sqlite_type, bigserial=wide)
            if problem is not None:
                problems.append(f"{table.name}.{column.name} {table.primary_key}={_row_id(row[0])}: {problem}")
    return count


def _row_id(value: object) -> str:
    """A row id for a message: the key as text, cut short (migrations' key is text of any length)."""
    text = _text(value)
    return text if len(text) <= 40 else text[:40] + "…"


def index_problems(conn: sqlite3.Connection, table: Table, index: Index, problems: list[str]) -> None:
    """Rows PostgreSQL would refuse under ``index``: a key above btree's row limit, or a duplicate of a unique key.

    Both fail the load's COPY of the whole table (54000 "index row size", 23505 "duplicate key"). Only rows the
    partial index covers count; rows with a NULL key column never collide (NULLs are distinct, as in SQLite).
    """
    pk = f'"{table.primary_key}"'
    columns = [table.column(name) for name in index.columns]
    where = f" AND ({index.where})" if index.where else ""
    label = f"{table.name}.{'+'.join(index.columns)}"
    # Only keys whose bytes come near the limit can exceed it (header, alignment and varlena headers < 128 bytes).
    total = " + ".join(f'coalesce(length(CAST("{column.name}" AS BLOB)), 0)' for column in columns)
    keys = ", ".join(
        f'"{column.name}"' if column.pg_type == BYTEA else f'CAST("{column.name}" AS BLOB)' for column in columns
    )
    query = f'SELECT {pk}, {keys} FROM "{table.name}" WHERE ({total}) > {BTREE_MAX_ROW - 128}{where} ORDER BY {pk}'
    for row in conn.execute(query):
        size = index_row_size([(column.pg_type, value) for column, value in zip(columns, row[1:], strict=True)])
        if size > BTREE_MAX_ROW:
            problems.append(
                f"{label} {table.primary_key}={_row_id(row[0])}: index {index.name} would need a {size}-byte row,"
                f" PostgreSQL's btree holds at most {BTREE_MAX_ROW} bytes (the load would fail; shorten the value)"
            )
    if not index.unique:
        return
    named = ", ".join(f'"{column.name}"' for column in columns)
    not_null = " AND ".join(f'"{column.name}" IS NOT NULL' for column in columns)
    groups = conn.execute(
        f'SELECT group_concat(k, char(10)) FROM (SELECT {pk} AS k, {named} FROM "{table.name}"'
        f" WHERE {not_null}{where} ORDER BY {pk}) GROUP BY {named} HAVING count(*) > 1"
    )
    for (ids,) in groups:
        first, *others = _text(ids).split("\n")
        for other in others:
            problems.append(
                f"{label} {table.primary_key}={_row_id(other)}: the same key as {table.primary_key}={_row_id(first)}"
                f" under unique index {index.name} (PostgreSQL refuses the duplicate and the load would fail)"
            )


def autoincrement_marks(conn: sqlite3.Connection, schema: HeadscaleSchema, problems: list[str]) -> dict[str, int]:
    """``sqlite_sequence``: the highest id each AUTOINCREMENT table ever handed out (deleted rows included)."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'").fetchone()
    if exists is None:
        return {}
    serial = {table.name for table in schema.tables if table.serial}
    marks: dict[str, int] = {}
    for name, seq, kind in conn.execute("SELECT name, seq, typeof(seq) FROM sqlite_sequence"):
        name = _text(name)
        if name not in serial:
            continue
        if _text(kind) != "integer":
            problems.append(
                f"sqlite_sequence.seq name={name}: {_text(kind)} value where {name}'s AUTOINCREMENT mark must be"
                " an integer (the next id cannot be known)"
            )
            continue
        marks[name] = seq
    return marks


def next_ids_of(conn: sqlite3.Connection, schema: HeadscaleSchema, marks: dict[str, int]) -> dict[str, int]:
    """The id SQLite hands out next: past max(id) and past the AUTOINCREMENT mark, so no id is ever reused."""
    next_ids = {}
    for table in schema.tables:
        if not table.serial:
            continue
        (max_id,) = conn.execute(f'SELECT max("{table.primary_key}") FROM "{table.name}"').fetchone()
        floor = max(0, max_id if isinstance(max_id, int) else 0, marks.get(table.name, 0))
        next_ids[table.name] = floor + 1
    return next_ids


def _text(value: object) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
