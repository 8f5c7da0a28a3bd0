"""``python -m migration run``: the migration Job's entry point (snapshot, preflight, target, load, verify).

Each step prints one line; the first failure prints the step and why, and exits 1. The SQLite file is only
ever opened read-only; everything after the snapshot reads a private copy in the work directory, which is
deleted at the end (it and pgloader's reject files hold key material).

The target URL must not carry a password on the command line (``ps`` shows it): give the password in
PGPASSWORD or ``--password-file``, or pass the whole URL in the MIGRATION_PG_URL environment variable.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from migration.errors import MigrationError
from migration.load import run_pgloader
from migration.preflight import PreflightReport, preflight
from migration.psql import PsqlConnection
from migration.source import snapshot
from migration.target import check_target, reset_target
from migration.verify import verify
from migration.versions import schema_for

T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m migration", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="preflight, check the target, load with pgloader, verify")
    check = commands.add_parser("preflight", help="only check the SQLite database")
    for sub in (run, check):
        sub.add_argument("--sqlite", type=Path, required=True, help="Headscale's SQLite database (read-only)")
        sub.add_argument("--version", required=True, help="pinned Headscale version, e.g. 0.29.2")
    run.add_argument("--pg-url", help="postgresql://user@host:port/db (default: $MIGRATION_PG_URL)")
    run.add_argument("--password-file", type=Path, help="file holding the PostgreSQL password")
    run.add_argument("--force", action="store_true", help="reset a target left non-empty (e.g. by a failed run)")
    run.add_argument("--workdir", type=Path, help="parent of the private work directory (default: $TMPDIR)")
    run.add_argument("--keep-workdir", action="store_true", help="do not delete the work directory")
    run.add_argument("--pgloader", default="pgloader", help="pgloader binary")
    run.add_argument("--psql", default="psql", help="psql binary")
    return parser


def _step(name: str, action: Callable[[], T], describe: Callable[[T], str]) -> T:
    """Run one step, print ``[name] ok (seconds): what``; a MigrationError propagates with its own step."""
    started = time.monotonic()
    result = action()
    print(f"[{name}] ok ({time.monotonic() - started:.2f} s): {describe(result)}", flush=True)
    return result


def _describe_preflight(report: PreflightReport) -> str:
    counts = " ".join(f"{table}={rows}" for table, rows in report.row_counts.items())
    older = f" (+{len(report.extra_migrations)} from older releases)" if report.extra_migrations else ""
    return f"Headscale {report.version}: {counts}; {len(report.migrations)} migration ids{older}"


def _connection(args: argparse.Namespace) -> PsqlConnection:
    url = args.pg_url
    if url is not None and urlsplit(url).password is not None:
        raise MigrationError(
            "target", "--pg-url must not contain the password (use PGPASSWORD, --password-file or MIGRATION_PG_URL)"
        )
    url = url or os.environ.get("MIGRATION_PG_URL")
    if not url:
        raise MigrationError("target", "no target: give --pg-url or set MIGRATION_PG_URL")
    password = args.password_file.read_text().strip() if args.password_file else os.environ.get("PGPASSWORD")
    return PsqlConnection.from_url(url, password=password, psql=args.psql)


def run(args: argparse.Namespace) -> None:
    """The whole migration; raises MigrationError at the first step that fails."""
    schema = schema_for(args.version)
    pg = _connection(args)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="headscale-migration-", dir=args.workdir))  # 0700, ours to delete
    started = time.monotonic()
    try:
        copy = _step(
            "snapshot", lambda: snapshot(args.sqlite, workdir / "headscale.sqlite"), lambda p: f"{args.sqlite} -> {p}"
        )
        report = _step("preflight", lambda: preflight(copy, version=schema.version), _describe_preflight)
        target = _step(
            "target",
            lambda: check_target(pg, schema, force=args.force),
            lambda t: (
                f"{pg.url()} has Headscale's schema"
                + (", not empty: --force given, resetting it" if t.forced else ", empty")
            ),
        )
        if target.forced:
            _step("reset", lambda: reset_target(pg, schema), lambda _: "data tables emptied, foreign keys in place")
        _step(
            "load",
            lambda: run_pgloader(
                copy,
                pg,
                schema.table_names,
                workdir=workdir,
                expected_rows=report.row_counts,
                pgloader=args.pgloader,
            ),
            lambda r: f"pgloader exit {r.returncode}, {sum(filter(None, map(r.table_rows, schema.table_names)))} rows",
        )
        _step(
            "verify",
            lambda: verify(copy, pg, version=schema.version),
            lambda v: (
                f"{sum(v.row_counts.values())} rows, {len(v.checksums)} column checksums,"
                f" {len(v.foreign_keys)} foreign keys, {len(v.sequences)} sequences, {v.migrations} migration ids"
            ),
        )
    finally:
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"migration complete in {time.monotonic() - started:.2f} s", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: 0 on success, 1 when a step fails (step and reason on stderr), 2 on usage errors."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "preflight":
            _step("preflight", lambda: preflight(args.sqlite, version=args.version), _describe_preflight)
        else:
            run(args)
    except MigrationError as error:
        print(f"[{error.step}] FAILED: {error.message}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
