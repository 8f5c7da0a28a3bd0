"""What the target PostgreSQL database holds, read from its catalog (shared by target and verify)."""

from __future__ import annotations

from dataclasses import dataclass

from migration.psql import PsqlConnection
from migration.versions import ForeignKey, HeadscaleSchema

_ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


@dataclass(frozen=True)
class PgForeignKey:
    """A foreign key found in pg_constraint (single-column, as all of Headscale's are)."""

    definition: ForeignKey
    validated: bool


def _names(tables: tuple[str, ...]) -> str:
    return ", ".join(f"'{table}'" for table in tables)


def columns(pg: PsqlConnection, schema: HeadscaleSchema) -> dict[str, dict[str, str]]:
    """table -> column -> type (information_schema spelling, ``character varying(63)`` with its length)."""
    rows = pg.query(
        "SELECT table_name, column_name, CASE WHEN character_maximum_length IS NULL THEN data_type"
        " ELSE data_type || '(' || character_maximum_length || ')' END"
        " FROM information_schema.columns"
        f" WHERE table_schema = 'public' AND table_name IN ({_names(schema.table_names)})"
    )
    found: dict[str, dict[str, str]] = {}
    for table, column, pg_type in rows:
        found.setdefault(table, {})[column] = pg_type
    return found


def schema_problems(pg: PsqlConnection, schema: HeadscaleSchema) -> list[str]:
    """Differences between the target's tables and what Headscale ``schema.version`` creates."""
    found = columns(pg, schema)
    problems = []
    for table in schema.tables:
        have = found.get(table.name)
        if have is None:
            problems.append(f"table {table.name} is missing")
            continue
        for column in table.columns:
            if column.name not in have:
                problems.append(f"column {table.name}.{column.name} is missing")
            elif have[column.name] != column.pg_type:
                problems.append(
                    f"column {table.name}.{column.name} is {have[column.name]}, Headscale {schema.version}"
                    f" creates {column.pg_type}"
                )
        extra = sorted(set(have) - {column.name for column in table.columns})
        if extra:
            problems.append(f"table {table.name} has columns Headscale {schema.version} does not: {extra}")
    return problems


def row_counts(pg: PsqlConnection, tables: tuple[str, ...]) -> dict[str, int]:
    """Exact row count of each table (one round trip)."""
    sql = " UNION ALL ".join(f"SELECT '{table}', count(*) FROM public.\"{table}\"" for table in tables)
    return {table: int(count) for table, count in pg.query(sql)}


def foreign_keys(pg: PsqlConnection) -> dict[str, PgForeignKey]:
    """Every foreign key of the public schema, by constraint name."""
    rows = pg.query(
        "SELECT c.conname, t.relname, a.attname, rt.relname, ra.attname, c.confdeltype, c.convalidated::text"
        " FROM pg_constraint c"
        " JOIN pg_class t ON t.oid = c.conrelid"
        " JOIN pg_namespace n ON n.oid = t.relnamespace"
        " JOIN pg_class rt ON rt.oid = c.confrelid"
        " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
        " JOIN pg_attribute ra ON ra.attrelid = c.confrelid AND ra.attnum = c.confkey[1]"
        " WHERE c.contype = 'f' AND n.nspname = 'public'"
    )
    return {
        name: PgForeignKey(
            ForeignKey(name, table, column, ref_table, ref_column, _ON_DELETE.get(action, action)),
            validated == "true",
        )
        for name, table, column, ref_table, ref_column, action, validated in rows
    }


def foreign_key_problems(pg: PsqlConnection, schema: HeadscaleSchema) -> list[str]:
    """Foreign keys Headscale ``schema.version`` has that the target lacks, or holds differently."""
    found = foreign_keys(pg)
    problems = []
    for expected in schema.foreign_keys:
        have = found.get(expected.name)
        if have is None:
            problems.append(
                f"foreign key {expected.name} ({expected.table}.{expected.column} -> {expected.ref_table}) is missing"
            )
        elif have.definition != expected:
            problems.append(f"foreign key {expected.name} differs: {have.definition} instead of {expected}")
        elif not have.validated:
            problems.append(f"foreign key {expected.name} is NOT VALID (rows were never checked against it)")
    return problems
