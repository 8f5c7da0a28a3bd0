"""The restore-before-serve script as its tests run it: the shells, the documented exit codes, the Noise identity
files and the real backups it is run against, and how a test runs it and checks its answer without the key showing.

For tests/components/test_litestream_restore.py and test_litestream_restore_witness.py; their fixtures are thin
wrappers over :func:`build_backup_template`, :func:`app_maker` and :func:`new_identity`.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.litestream_lab import (
    POSIX_SHELLS,
    App,
    ScriptResult,
    insert_rows,
    litestream_bin,
    read_rows,
    replica_row_count,
    replicating,
    run_restore_script,
    wait_until,
)

LITESTREAM = litestream_bin()
# Real tools (tests/real_tools.py): every script run needs its shell and Litestream; a missing one skips the test,
# naming the package. sh is always there; dash and busybox are the tools of the same name.
SHELLS = [
    pytest.param(argv, id="-".join(argv), marks=pytest.mark.real_tool("litestream", *([tool] if tool else [])))
    for argv, tool in POSIX_SHELLS
]

EXIT = {
    "ok": 0,
    "usage": 2,
    "identity_unavailable": 10,
    "identity_mismatch": 11,
    "identity_unrecorded": 12,
    "marker_untrusted": 13,
    "fingerprint_form": 14,
    "backup_dir_unavailable": 20,
    "replica_missing": 21,
    "replica_unreadable": 22,
    "backup_required": 23,
    "served_no_backup": 24,
    "restore_failed": 30,
    "local_state": 31,
    "unsigned": 40,
    "forged": 41,
    "manifest_malformed": 42,
    "tampered": 43,
    "stale": 44,
    "backup_key": 45,
    "verify_io": 46,
    "not_regular": 47,
}
BACKUP_ROWS = 75


@dataclass(frozen=True)
class Identity:
    """A Noise key file as the Secret mounts it (with surrounding whitespace) and its expected fingerprint."""

    path: Path
    key: str
    fingerprint: str


def new_identity(path: Path) -> Identity:
    key = "privkey:" + secrets.token_hex(32)
    path.write_text(f"  {key}\n\n")
    return Identity(path, key, hashlib.sha256(key.encode()).hexdigest())


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def local_state(app: App) -> dict[str, str | None]:
    return {suffix: digest(Path(f"{app.db_path}{suffix}")) for suffix in ("", "-wal", "-shm")}


def build_backup_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, float]]]:
    """A real backup of BACKUP_ROWS rows written in two transactions while ``litestream replicate`` ran."""
    assert LITESTREAM is not None
    root = tmp_path_factory.mktemp("template")
    app = App(root).create()
    insert_rows(app.db_path, 50)
    with replicating(LITESTREAM, app, root / "replicate.log"):
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, root) == 50, timeout=15)
        insert_rows(app.db_path, BACKUP_ROWS - 50)
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, root) == BACKUP_ROWS, timeout=15)
    (root / "replicate.log").unlink()
    return root, read_rows(app.db_path)


def app_maker(tmp_path: Path) -> Callable[..., App]:
    """``new_app(with_backup=True)``: this test's copy of the template (local DB and replica), config re-rendered."""

    def make(*, with_backup: bool = False, with_local_db: bool = False, template: Path | None = None) -> App:
        root = tmp_path / "app"
        if template is not None:
            shutil.copytree(template, root)
        app = App(root).create()
        if not with_backup:
            shutil.rmtree(app.backup_dir, ignore_errors=True)
        if not with_local_db:
            app.remove_local_db()
            shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
        return app

    return make


def run_script(shell: list[str], app: App, **kwargs: Any) -> ScriptResult:
    """The restore script for ``app`` under ``shell``, with the real Litestream (``run_restore_script``'s options)."""
    assert LITESTREAM is not None
    return run_restore_script(shell, LITESTREAM, app, **kwargs)


def assert_exit(result: ScriptResult, code: str, *phrases: str, key: Identity | None = None) -> None:
    """The script ended with ``EXIT[code]`` and said every phrase; with ``key``, it showed no part of the key."""
    output = result.stdout + result.stderr
    assert result.returncode == EXIT[code], output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} missing from: {output}"
    if key is not None:
        hex_part = key.key.removeprefix("privkey:")
        assert hex_part not in output
        assert hex_part[:16] not in output
        assert key.key not in output


def record_fingerprint(app: App, value: str) -> None:
    app.backup_dir.mkdir(parents=True, exist_ok=True)
    (app.backup_dir / "identity.sha256").write_text(value + "\n")
