"""SQLite → PostgreSQL migration of Headscale's database, run by the migration Job and by the tests.

Steps: ``snapshot`` (a private copy; the source is never opened), ``preflight`` (the source is sound and every
value fits: types, pgloader's integer range, PostgreSQL's time zones, index rows, unique keys),
``check_target`` (Headscale's empty schema, no data, no unverified mark), ``run_pgloader`` (data only, never
trusted alone) and ``continue_sequences`` (ids go on past SQLite's AUTOINCREMENT marks), ``verify`` (counts,
checksums with NULL as NULL, foreign keys, sequences, migrations). A target an earlier run verified is not
loaded again: ``reverify`` checks it against this run's source, read-only (a recreated Job is harmless).
Imports nothing from ``components``: the Job image carries only this package.
"""

from migration.errors import MigrationError
from migration.load import LoadReport, continue_sequences, render_pgloader, run_pgloader
from migration.preflight import PreflightReport, preflight
from migration.psql import PsqlConnection
from migration.source import snapshot
from migration.target import TargetReport, check_target, read_mark, reset_target, reverify
from migration.verify import VerifyReport, verify
from migration.versions import HeadscaleSchema, schema_for

__all__ = [
    "HeadscaleSchema",
    "LoadReport",
    "MigrationError",
    "PreflightReport",
    "PsqlConnection",
    "TargetReport",
    "VerifyReport",
    "check_target",
    "continue_sequences",
    "preflight",
    "read_mark",
    "render_pgloader",
    "reset_target",
    "reverify",
    "run_pgloader",
    "schema_for",
    "snapshot",
    "verify",
]
