"""The SQLite side: opened read-only, copied once into a private snapshot that every later step reads.

pgloader cannot open SQLite read-only, and Headscale's file may be in WAL mode; loading from a snapshot taken
with SQLite's backup API leaves the original byte-for-byte untouched and gives preflight, load and verify the
very same data.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from migration.errors import MigrationError


def open_readonly(path: Path, *, step: str = "preflight") -> sqlite3.Connection:
    """Open ``path`` with ``mode=ro`` (never creates, never writes); text comes back as bytes, checked later."""
    path = Path(path).resolve()
    if not path.is_file():
        raise MigrationError(step, f"SQLite database {path} does not exist")
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        conn.text_factory = bytes
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as error:
        raise MigrationError(step, f"cannot read SQLite database {path}: {error}") from error
    return conn


def snapshot(source: Path, dest: Path) -> Path:
    """Consistent copy of ``source`` at ``dest`` (rollback-journal mode, so readers add no -wal files)."""
    src = open_readonly(source, step="snapshot")
    try:
        dest.unlink(missing_ok=True)
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")
        finally:
            out.close()
    except sqlite3.DatabaseError as error:
        raise MigrationError("snapshot", f"cannot copy {source}: {error}") from error
    finally:
        src.close()
    return dest


def like_selected_tables(conn: sqlite3.Connection, patterns: tuple[str, ...]) -> set[str]:
    """Tables pgloader's ``INCLUDING ONLY TABLE NAMES LIKE`` picks ('_' is a LIKE wildcard, case-insensitive)."""
    where = " OR ".join("tbl_name LIKE ?" for _ in patterns)
    rows = conn.execute(
        f"SELECT tbl_name FROM sqlite_master WHERE type = 'table' AND tbl_name <> 'sqlite_sequence' AND ({where})",
        patterns,
    ).fetchall()
    return {_text(row[0]) for row in rows}


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Column names of ``table`` in declaration order (empty when it does not exist)."""
    return [_text(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
