"""SQLite → PostgreSQL migration of Headscale's database, run by the migration Job and by the tests.

Steps: ``preflight`` (the source is sound and every value fits), ``check_target`` (Headscale's empty schema,
no data), ``run_pgloader`` (data only, never trusted alone), ``verify`` (counts, checksums, foreign keys,
sequences, migrations). Imports nothing from ``components``: the Job image carries only this package.
"""

from migration.errors import MigrationError
from migration.load import LoadReport, render_pgloader, run_pgloader
from migration.preflight import PreflightReport, preflight
from migration.psql import PsqlConnection
from migration.target import TargetReport, check_target, reset_target
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
    "preflight",
    "render_pgloader",
    "reset_target",
    "run_pgloader",
    "schema_for",
    "verify",
]
