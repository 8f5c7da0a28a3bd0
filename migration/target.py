"""The target database: Headscale's empty schema, never a database that already holds a tailnet.

Headscale creates its PostgreSQL schema (and fills ``migrations``) when it first opens an empty database; the
migration only loads rows into that schema. Loading over existing data would silently replace it (pgloader
truncates), so a target with rows is refused unless the operator says ``force``.

A run marks the target before it writes anything (a comment on the ``migrations`` table, which Headscale never
reads): ``headscale-migration: unverified ...`` until verify has passed, ``headscale-migration: verified ...``
after. A run that failed, was interrupted (SIGTERM, SIGINT) or killed leaves the ``unverified`` mark, and the
next run refuses such a target, even one that looks empty, unless ``force``: then it is wiped and loaded again
from the start (pgloader cannot resume a load, and nothing written by an unverified run is trusted).
``psql -c '\\dt+ migrations'`` shows the mark.

A target marked ``verified`` is not loaded again: the Job is recreated whenever its spec changes (an image
bump) or after a failure, and such a rerun only verifies the target again against its own snapshot of the
source (``reverify``): it succeeds without writing anything, or refuses naming what differs, the mark left
as it was. Only ``force`` wipes and reloads it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from migration.catalog import foreign_key_problems, foreign_keys, row_counts, schema_problems
from migration.errors import MigrationError, PsqlError, step_errors
from migration.psql import PsqlConnection
from migration.verify import VerifyReport, verify
from migration.versions import HeadscaleSchema


@dataclass(frozen=True)
class TargetReport:
    """Row counts found in the target before loading (bookkeeping tables included)."""

    row_counts: dict[str, int]  # empty when ``verified`` (nothing counted: the target is re-verified instead)
    forced: bool = False  # data or a damaged schema was found and the caller chose to reset it
    mark: str = ""  # the mark an earlier run left ("" when none)
    verified: bool = False  # marked verified by an earlier run: the caller re-verifies (reverify), never loads


MARK_PREFIX = "headscale-migration:"
UNVERIFIED = f"{MARK_PREFIX} unverified"
VERIFIED = f"{MARK_PREFIX} verified"


def read_mark(pg: PsqlConnection) -> str:
    """The migration's mark on the target ("" when none, also when there is no ``migrations`` table)."""
    row = pg.scalar("SELECT '>' || coalesce(obj_description(to_regclass('public.migrations'), 'pg_class'), '')")
    text = row[1:]
    return text if text.startswith(MARK_PREFIX) else ""


def write_mark(pg: PsqlConnection, state: str, detail: str) -> str:
    """Set the mark to ``state`` (UNVERIFIED or VERIFIED) with a UTC time and ``detail``; returns it."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = f"{state} since {now}: {detail}"
    pg.execute(f"COMMENT ON TABLE public.migrations IS {_literal(text)};")
    return text


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def check_target(
    pg: PsqlConnection, schema: HeadscaleSchema, *, force: bool = False, accept_verified: bool = False
) -> TargetReport:
    """Refuse a target that is not the empty database Headscale leaves behind (unless ``force``).

    No schema at all is always refused (the migration never creates tables). Rows in a data table, or foreign
    keys an interrupted pgloader left dropped, are refused unless ``force``: the caller then runs reset_target.
    With ``accept_verified`` (and no ``force``), a target marked verified is returned as it is, ``verified``
    set, whatever it holds: the caller must then run ``reverify`` instead of loading.
    """
    with step_errors("target"):
        mark = read_mark(pg)
        if accept_verified and not force and mark.startswith(VERIFIED):
            return TargetReport({}, mark=mark, verified=True)
        problems = schema_problems(pg, schema)
        if problems:
            raise MigrationError(
                "target",
                f"{pg.url()} does not hold the schema Headscale {schema.version} creates (start Headscale"
                " once on the empty database; the migration never creates tables):\n  " + "\n  ".join(problems),
            )
        counts = row_counts(pg, schema.table_names)
        damaged = foreign_key_problems(pg, schema)
    busy = {table: counts[table] for table in schema.data_tables if counts[table]}
    unverified = mark.startswith(UNVERIFIED)
    if (busy or damaged or unverified) and not force:
        reasons = [f"already holds data ({', '.join(f'{t}={n}' for t, n in busy.items())})"] if busy else []
        if unverified:
            reasons.insert(0, f"an earlier migration run stopped before verification passed ({mark})")
        raise MigrationError(
            "target",
            f"{pg.url()} is not the empty database Headscale leaves; refusing to load over it:\n  "
            + "\n  ".join(reasons + damaged)
            + "\nIf this is a failed or interrupted earlier run, rerun with --force: the target is wiped, its"
            " foreign keys restored, and loaded again from the start.",
        )
    return TargetReport(counts, forced=bool(busy or damaged or unverified), mark=mark)


def reset_target(pg: PsqlConnection, schema: HeadscaleSchema) -> None:
    """Bring a target back to what Headscale leaves on an empty database, for a rerun after a failed load.

    Empties the data tables (sequences restart), re-creates foreign keys an interrupted pgloader left dropped
    (pgloader re-creates only those it found, so a plain rerun would never bring them back), and refills an
    emptied ``migrations`` table with the version's ids.
    """
    statements = [
        "TRUNCATE " + ", ".join(f'public."{table}"' for table in schema.data_tables) + " RESTART IDENTITY CASCADE;"
    ]
    with step_errors("reset"):
        present = foreign_keys(pg)
        for expected in schema.foreign_keys:
            have = present.get(expected.name)
            if have is not None and (have.definition != expected or not have.validated):
                statements.append(f'ALTER TABLE public."{have.definition.table}" DROP CONSTRAINT "{expected.name}";')
                have = None
            if have is None:
                statements.append(expected.ddl() + ";")
        if row_counts(pg, ("migrations",))["migrations"] == 0:
            values = ", ".join(f"('{migration_id}')" for migration_id in schema.migration_ids)
            statements.append(f"INSERT INTO public.migrations (id) VALUES {values};")
        pg.execute("\n".join(statements))
        problems = foreign_key_problems(pg, schema)
    if problems:
        raise MigrationError("reset", "foreign keys still wrong after reset:\n  " + "\n  ".join(problems))


def reverify(copy: Path, pg: PsqlConnection, schema: HeadscaleSchema, mark: str) -> VerifyReport:
    """Verify a target marked verified again against this run's snapshot ``copy``; read-only either way.

    Passing proves the target still is a faithful copy of this source, so the mark stays as it is. On any
    difference it refuses, naming what differs, and still leaves the mark alone rather than flipping it to
    unverified: nothing is known to be half-loaded, and the difference may be newer data the operator must not
    lose (Headscale ran on this PostgreSQL, or on SQLite again after a rollback). An unverified mark would read
    as a broken load and invite ``force``; only the operator decides to wipe it.
    """
    try:
        return verify(copy, pg, version=schema.version)
    except MigrationError as error:
        if isinstance(error.__cause__, PsqlError):
            raise  # not a difference: the target could not be read
        raise MigrationError(
            "verify",
            f"{pg.url()} is marked verified by an earlier run ({mark}), but {error.message}\n"
            "Nothing was loaded and the mark is left as it was. Either the SQLite source changed since that run"
            " or the target was modified since: investigate which (never reload silently over data that may be"
            " newer). To discard the target and load it again from this source, set"
            " database.migration.force: true (--force).",
        ) from error
