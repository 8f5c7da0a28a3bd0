"""What the migration tests share: the CLI as the Job runs it, SQLite edits, and looks at the target and at processes.

The checks read PostgreSQL and /proc directly (not through the package), so they say the same before and after a
change to the package.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from migration import LoadReport, reset_target, run_pgloader, schema_for
from migration.psql import PsqlConnection
from tests.support.pg_lab import PROJECT_DIR

MARK_SQL = "SELECT '>' || coalesce(obj_description('public.migrations'::regclass, 'pg_class'), '')"


def mutate(path: Path, *statements: str | tuple[str, Sequence[object]]) -> Path:
    """Run statements (plain SQL, or (SQL, parameters)) on a SQLite file and commit."""
    conn = sqlite3.connect(path)
    for statement in statements:
        if isinstance(statement, tuple):
            conn.execute(statement[0], statement[1])
        else:
            conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def cli_env(password: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"PGPASSWORD": password}


def cli(*args: str, password: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m migration ARGS`` from the repository, the password in PGPASSWORD only."""
    return subprocess.run(
        [sys.executable, "-m", "migration", *args],
        cwd=PROJECT_DIR,
        env=cli_env(password),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_args(sqlite: Path, pg: PsqlConnection, version: str = "0.29.2", *extra: str) -> list[str]:
    return ["run", "--sqlite", str(sqlite), "--pg-url", pg.url(), "--version", version, *extra]


def mark(pg: PsqlConnection) -> str:
    """The comment on public.migrations, where the migration keeps its verified/unverified mark."""
    return pg.scalar(MARK_SQL)[1:]


def target_state(pg: PsqlConnection) -> tuple[list[list[str]], list[list[str]], str]:
    """Row counts of every table, the foreign keys, the mark: what 'nothing touched the target' compares."""
    counts = pg.query("SELECT relname, n_live_tup + n_tup_ins + n_tup_del FROM pg_stat_user_tables ORDER BY relname")
    keys = pg.query("SELECT conname, convalidated::text FROM pg_constraint WHERE contype = 'f' ORDER BY conname")
    return counts, keys, mark(pg)


def directory_digest(directory: Path) -> dict[str, str]:
    """Every file beside the source, with its SHA-256: a read-only step changes neither list nor bytes."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def processes_mentioning(text: str, *, name: str = "pgloader") -> list[int]:
    """Live processes whose command line names ``name`` and contains ``text`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not argv or name.encode() not in Path(argv[0].decode(errors="replace")).name.encode():
            continue
        if any(text.encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


def load(sqlite: Path, pg: PsqlConnection, version: str, workdir: Path, *, check: bool = True) -> LoadReport:
    """pgloader into Headscale's schema, as the CLI runs it: after a crash of its monitor, reset and once more."""
    schema = schema_for(version)
    return run_pgloader(
        sqlite, pg, schema.table_names, workdir=workdir, check=check, reset=lambda: reset_target(pg, schema)
    )
