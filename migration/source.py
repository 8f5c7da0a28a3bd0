"""The SQLite side: copied once into a private snapshot that every later step reads; the source is never opened.

pgloader cannot open SQLite read-only, and Headscale's file is in WAL mode, where even a ``mode=ro`` open
creates ``-shm`` and ``-wal`` beside the file (and ``immutable=1`` would ignore the WAL's committed frames). So
the snapshot copies the file and its ``-wal`` (or hot ``-journal``) byte for byte into the private work
directory, opens that copy, where SQLite applies the WAL, and writes a rollback-mode snapshot with SQLite's
backup API. Nothing is ever created, opened for writing or changed beside the source.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from migration.errors import MigrationError

#: Files SQLite keeps beside a database whose content belongs to it (``-shm`` is only an index, rebuilt).
COMPANIONS = ("-wal", "-journal")


def open_readonly(path: Path, *, step: str = "preflight") -> sqlite3.Connection:
    """Open ``path`` with ``mode=ro``; text comes back as bytes, checked later.

    For snapshots only (rollback mode): on a WAL-mode file even ``mode=ro`` creates ``-shm`` and ``-wal`` beside
    it, which is why the CLI never opens the source itself (see ``snapshot``).
    """
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


def _state(files: list[Path]) -> list[tuple[str, int, int, int] | None]:
    """What tells whether a file changed: inode, size, modification time (None when absent)."""
    found: list[tuple[str, int, int, int] | None] = []
    for path in files:
        try:
            st = path.stat()
        except FileNotFoundError:
            found.append(None)
            continue
        found.append((path.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return found


def _copy_files(source: Path, scratch: Path, attempts: int = 3) -> Path:
    """Byte copies of ``source`` and its -wal/-journal in ``scratch``, taken while none of them changes."""
    files = [source, *(source.with_name(source.name + suffix) for suffix in COMPANIONS)]
    for _ in range(attempts):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(mode=0o700)
        before = _state(files)
        for path, state in zip(files, before, strict=True):
            if state is not None:
                with path.open("rb") as src, (scratch / path.name).open("xb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        if _state(files) == before:
            return scratch / source.name
    raise MigrationError(
        "snapshot",
        f"{source} changed while it was being copied ({attempts} tries): is Headscale still writing to it?"
        " Scale it to 0 first.",
    )


def snapshot(source: Path, dest: Path) -> Path:
    """Consistent copy of ``source`` at ``dest`` in rollback-journal mode, WAL frames applied.

    ``source`` and its -wal are copied into a scratch directory beside ``dest`` (the caller's private work
    directory), never opened where they are; the scratch copy is removed again.
    """
    source = Path(source).resolve()
    if not source.is_file():
        raise MigrationError("snapshot", f"SQLite database {source} does not exist")
    scratch = dest.parent / f".{dest.name}.source"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy = _copy_files(source, scratch)
        dest.unlink(missing_ok=True)
        src = sqlite3.connect(copy)  # read-write on our own copy: SQLite applies its WAL or hot journal
        try:
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()
            out = sqlite3.connect(dest)
            try:
                src.backup(out)
                out.execute("PRAGMA journal_mode=DELETE")
            finally:
                out.close()
        finally:
            src.close()
    except sqlite3.DatabaseError as error:
        raise MigrationError("snapshot", f"cannot copy {source}: {error}") from error
    except OSError as error:
        raise MigrationError("snapshot", f"cannot copy {source}: {error.strerror or error}") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    os.chmod(dest, 0o600)
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
