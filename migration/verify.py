"""Prove the target holds what the source holds, independently of anything pgloader said.

Compared per table: row counts, every column's checksum (values normalised so equal data gives equal text on
both sides: booleans as 0/1, times as epoch microseconds, blobs as hex, text as md5 of its bytes), the
``migrations`` ids, foreign keys present and validated with no orphan rows, and each id sequence handing out
no less than the id SQLite would hand out next (past max(id) and past the AUTOINCREMENT mark in
``sqlite_sequence``, so no id of a deleted row comes back; the load sets exactly that id, a sequence further on
only skips ids). NULL is compared as NULL for every type.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from migration.catalog import foreign_key_problems, row_counts, schema_problems
from migration.errors import MigrationError, step_errors
from migration.preflight import autoincrement_marks, next_ids_of
from migration.psql import PsqlConnection
from migration.source import open_readonly
from migration.values import canonical, pg_canonical_sql
from migration.versions import HeadscaleSchema, Table, schema_for


@dataclass(frozen=True)
class VerifyReport:
    """What was proven equal."""

    row_counts: dict[str, int]
    checksums: dict[str, str]  # "table.column" -> md5 over the column's canonical values in id order
    foreign_keys: tuple[str, ...]
    sequences: dict[str, int]  # table -> the id the sequence hands out next
    migrations: int


@dataclass
class _SourceTable:
    """One table of the source, canonicalised: primary keys and per-column canonical values in key order."""

    keys: list[str]
    values: dict[str, list[str]]

    def checksum(self, column: str) -> str:
        return hashlib.md5("\n".join(self.values[column]).encode()).hexdigest()


def verify(sqlite_path: Path, pg: PsqlConnection, *, version: str, max_rows_shown: int = 5) -> VerifyReport:
    """Compare ``sqlite_path`` with the target for Headscale ``version``; any difference raises, naming it."""
    schema = schema_for(version)
    with step_errors("verify"):
        problems = schema_problems(pg, schema)
        if problems:
            raise MigrationError("verify", "the target schema changed:\n  " + "\n  ".join(problems))
        source, expected_next = _read_source(sqlite_path, schema)
        counts = row_counts(pg, schema.table_names)
        for table in schema.table_names:
            if counts[table] != len(source[table].keys):
                problems.append(f"{table}: {counts[table]} rows in PostgreSQL, {len(source[table].keys)} in SQLite")
        checksums = _compare_checksums(pg, schema, source, counts, problems, max_rows_shown)
        problems.extend(foreign_key_problems(pg, schema))
        problems.extend(_orphans(pg, schema))
        sequences = _sequences(pg, schema, expected_next, problems)
        migrations = _compare_migrations(pg, source["migrations"], problems)
    if problems:
        raise MigrationError("verify", "the target differs from the source:\n  " + "\n  ".join(problems))
    return VerifyReport(
        row_counts=counts,
        checksums=checksums,
        foreign_keys=tuple(fk.name for fk in schema.foreign_keys),
        sequences=sequences,
        migrations=migrations,
    )


def _read_source(sqlite_path: Path, schema: HeadscaleSchema) -> tuple[dict[str, _SourceTable], dict[str, int]]:
    """Every table canonicalised, and the id SQLite would hand out next per serial table."""
    conn = open_readonly(sqlite_path, step="verify")
    try:
        tables = {table.name: _read_table(conn, table) for table in schema.tables}
        problems: list[str] = []
        next_ids = next_ids_of(conn, schema, autoincrement_marks(conn, schema, problems))
        if problems:
            raise MigrationError("verify", "the source's sqlite_sequence is unusable:\n  " + "\n  ".join(problems))
        return tables, next_ids
    except sqlite3.DatabaseError as error:
        raise MigrationError("verify", f"cannot read {sqlite_path}: {error}") from error
    finally:
        conn.close()


def _read_table(conn: sqlite3.Connection, table: Table) -> _SourceTable:
    selected = ", ".join(f'"{column.name}", typeof("{column.name}")' for column in table.columns)
    pk_index = [column.name for column in table.columns].index(table.primary_key)
    result = _SourceTable(keys=[], values={column.name: [] for column in table.columns})
    for row in conn.execute(f'SELECT {selected} FROM "{table.name}" ORDER BY "{table.primary_key}"'):
        for index, column in enumerate(table.columns):
            value, sqlite_type = row[2 * index], row[2 * index + 1]
            sqlite_type = sqlite_type.decode() if isinstance(sqlite_type, bytes) else sqlite_type
            result.values[column.name].append(canonical(column, value, sqlite_type))
        key = row[2 * pk_index]
        result.keys.append(key.decode("utf-8", errors="replace") if isinstance(key, bytes) else str(key))
    return result


def _order_by(table: Table) -> str:
    """Key order identical to SQLite's BINARY collation: bytewise ("C") for text keys."""
    pk = table.column(table.primary_key)
    return f'"{pk.name}"' + ("" if pk.pg_type == "bigint" else ' COLLATE "C"')


def _compare_checksums(
    pg: PsqlConnection,
    schema: HeadscaleSchema,
    source: dict[str, _SourceTable],
    counts: dict[str, int],
    problems: list[str],
    max_rows_shown: int,
) -> dict[str, str]:
    """One scan per table in PostgreSQL computes every column's checksum; mismatches are located by key."""
    selects = []
    for table in schema.tables:
        sums = ", ".join(
            f"md5(coalesce(string_agg({pg_canonical_sql(c.name, c.pg_type)}, E'\\n' ORDER BY {_order_by(table)}), ''))"
            for c in table.columns
        )
        selects.append(f"SELECT '{table.name}', concat_ws(',', {sums}) FROM public.\"{table.name}\"")
    found = {name: joined.split(",") for name, joined in pg.query(" UNION ALL ".join(selects))}
    checksums = {}
    for table in schema.tables:
        if counts[table.name] != len(source[table.name].keys):
            continue  # the count mismatch is the message; every checksum would differ too
        for column, pg_sum in zip(table.columns, found[table.name], strict=True):
            sqlite_sum = source[table.name].checksum(column.name)
            checksums[f"{table.name}.{column.name}"] = pg_sum
            if pg_sum != sqlite_sum:
                rows = _differing_rows(pg, table, column.name, source[table.name], max_rows_shown)
                problems.append(f"{table.name}.{column.name}: values differ ({table.primary_key} {rows})")
    return checksums


def _differing_rows(pg: PsqlConnection, table: Table, column: str, source: _SourceTable, limit: int) -> str:
    """The first keys whose value differs (values themselves are not shown: they may be keys or hashes)."""
    expr = pg_canonical_sql(column, table.column(column).pg_type)
    rows = pg.query(
        f'SELECT "{table.primary_key}"::text, {expr} FROM public."{table.name}" ORDER BY {_order_by(table)}'
    )
    target = dict((key, value) for key, value in rows)
    differing = [key for key, value in zip(source.keys, source.values[column], strict=True) if target.get(key) != value]
    shown = ", ".join(differing[:limit])
    return f"{shown}, ... {len(differing)} in all" if len(differing) > limit else shown


def _orphans(pg: PsqlConnection, schema: HeadscaleSchema) -> list[str]:
    """Child rows whose parent is missing: a constraint can be present yet NOT VALID or added after the fact."""
    selects = [
        f'SELECT \'{fk.name}\', count(*) FROM public."{fk.table}" c WHERE c."{fk.column}" IS NOT NULL'
        f' AND NOT EXISTS (SELECT 1 FROM public."{fk.ref_table}" p WHERE p."{fk.ref_column}" = c."{fk.column}")'
        for fk in schema.foreign_keys
    ]
    return [
        f"foreign key {name}: {count} row(s) reference a missing parent"
        for name, count in pg.query(" UNION ALL ".join(selects))
        if int(count)
    ]


def _sequences(
    pg: PsqlConnection, schema: HeadscaleSchema, expected: dict[str, int], problems: list[str]
) -> dict[str, int]:
    """Each id sequence must hand out what SQLite would next: lower collides or reuses a deleted row's id."""
    serial = [table.name for table in schema.tables if table.serial]
    owned = dict(
        pg.query(
            "SELECT t.relname, format('%I.%I', sn.nspname, s.relname) FROM pg_class s"
            " JOIN pg_namespace sn ON sn.oid = s.relnamespace"
            " JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid AND d.deptype IN ('a', 'i')"
            " JOIN pg_class t ON t.oid = d.refobjid JOIN pg_namespace tn ON tn.oid = t.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid"
            f" WHERE s.relkind = 'S' AND tn.nspname = 'public' AND a.attname = 'id'"
            f" AND t.relname IN ({', '.join(repr(name) for name in serial)})"
        )
    )
    missing = [name for name in serial if name not in owned]
    problems.extend(f"{name}: no sequence owns {name}.id" for name in missing)
    present = [name for name in serial if name in owned]
    if not present:
        return {}
    rows = pg.query(
        " UNION ALL ".join(
            f"SELECT '{name}', last_value, is_called::text, (SELECT coalesce(max(id), 0) FROM public.\"{name}\")"
            f" FROM {owned[name]}"
            for name in present
        )
    )
    next_ids = {}
    for name, last_value, is_called, max_id in rows:
        next_id = int(last_value) + 1 if is_called == "true" else int(last_value)
        next_ids[name] = next_id
        if next_id <= int(max_id):
            problems.append(f"{name}: the id sequence hands out {next_id} next, but max(id) is {max_id}")
        elif name in expected and next_id < expected[name]:
            problems.append(
                f"{name}: the id sequence hands out {next_id} next, SQLite would hand out {expected[name]}"
                " (past its AUTOINCREMENT mark: ids of deleted rows are never handed out again)"
            )
    return next_ids


def _compare_migrations(pg: PsqlConnection, source: _SourceTable, problems: list[str]) -> int:
    """The gormigrate ids decide which migrations Headscale runs on first start: they must be the source's."""
    target = Counter(row[0] for row in pg.query("SELECT id FROM public.migrations"))
    wanted = Counter(source.keys)
    if target != wanted:
        problems.append(
            f"migrations differ: missing in PostgreSQL {sorted((wanted - target).elements())},"
            f" extra in PostgreSQL {sorted((target - wanted).elements())}"
        )
    return sum(target.values())
