"""The pre-upgrade snapshot: components/upgrade.py and its script, run for real (POSIX shells, real Litestream).

The databases are real Headscale 0.28.0 databases built from upstream's schema (tests/support/headscale_samples.py)
in WAL mode, left as a crashed pod leaves them: the main file, a WAL holding transactions that are not checkpointed
(rows that exist only there), a stale -shm and Litestream's metadata directory, with a real Litestream replica on
the "backup volume" that lacks those newest transactions. One such layout is built per module and copied into each
test's own directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headscale_ha.components.upgrade import (
    CONTAINER_NAME,
    EXIT_CODES,
    MARKER_NAME,
    SNAPSHOT_DIR,
    SNAPSHOT_FILE,
    SNAPSHOT_SHA256_FILE,
    SOURCE_SHA256_FILE,
    UPGRADE_SCRIPT_KEY,
    parse_version,
    pre_upgrade_container,
    pre_upgrade_script,
    snapshot_dir,
)
from tests.support import headscale_samples as sample_db
from tests.support.litestream_lab import (
    MANIFEST_SCRIPT,
    POSIX_SHELLS,
    PRE_UPGRADE_SCRIPT,
    App,
    ScriptResult,
    litestream_bin,
    replicate_once,
    run_pre_upgrade_script,
    run_restore_script,
    run_script,
    tree_state,
    write_backup_key,
)
from tests.support.script_checks import SYNTAX_CHECKERS, shipped

LITESTREAM = litestream_bin()
SHELLS = [
    pytest.param(argv, id="-".join(argv), marks=pytest.mark.real_tool("litestream", *([tool] if tool else [])))
    for argv, tool in POSIX_SHELLS
]
needs_litestream = pytest.mark.real_tool("litestream")
FROM, TO = "0.28.0", "0.29.2"
#: Rows written after the replica's last sync, still only in the WAL (the main file does not have them).
WAL_ONLY_USER = "wal-only-user"
WAL_ONLY_KEY_PREFIX = "beefbeefbeef"
WAL_ONLY_GIVEN_NAME = "laptop-renamed-in-wal"


# --- layout ----------------------------------------------------------------------------------------------------


def _tables(db: Path, *, wal: Path | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Schema and every table's rows, read from a private copy (reading the original would change it)."""
    scratch = db.parent / f".read-{os.getpid()}-{db.name}"
    scratch.mkdir()
    try:
        copy = scratch / "db.sqlite"
        shutil.copyfile(db, copy)
        if wal is not None and wal.exists():
            shutil.copyfile(wal, scratch / "db.sqlite-wal")
        conn = sqlite3.connect(copy)
        try:
            schema = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
            tables = [row[1] for row in schema if row[0] == "table"]
            result: dict[str, list[tuple[Any, ...]]] = {"sqlite_master": schema}
            for table in tables:
                result[table] = sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            return result
        finally:
            conn.close()
    finally:
        shutil.rmtree(scratch)


def _headscale_tables(tables: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """All but Litestream's counter, which Litestream bumps when it has to start a WAL in a database it syncs."""
    return {name: rows for name, rows in tables.items() if name != "_litestream_seq"}


def _integrity(db: Path, *, wal: Path | None = None) -> str:
    """SQLite's full integrity check, on a private copy (with ``wal`` when given)."""
    scratch = db.parent / f".check-{os.getpid()}"
    scratch.mkdir()
    try:
        shutil.copyfile(db, scratch / "db.sqlite")
        if wal is not None and wal.exists():
            shutil.copyfile(wal, scratch / "db.sqlite-wal")
        conn = sqlite3.connect(scratch / "db.sqlite")
        try:
            return "\n".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
        finally:
            conn.close()
    finally:
        shutil.rmtree(scratch)


def _shared_or_skip() -> None:
    if not (sample_db.SHARED_DIR / "reference" / "headscale").is_dir():
        if os.environ.get("REQUIRE_REAL_TOOLS") == "1":
            pytest.fail(f"{sample_db.SHARED_DIR} is absent and REQUIRE_REAL_TOOLS=1: the upstream schemas are needed")
        pytest.skip(f"{sample_db.SHARED_DIR} is absent: the upstream Headscale schemas are not on this machine")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A crashed 0.28.0 pod's layout: DB + uncheckpointed WAL + stale -shm + metadata, and a replica lacking the WAL."""
    _shared_or_skip()
    assert LITESTREAM is not None
    root = tmp_path_factory.mktemp("pre-upgrade-template")
    work = root / "work"
    work.mkdir()
    app = App(root / "app").create()
    src = sample_db.build(work / "src.sqlite", FROM)
    # What the sidecar had shipped before the pod died.
    replicate_once(LITESTREAM, src, app.replica_dir)
    conn = sqlite3.connect(src, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything so far in the main file
        conn.execute(
            "INSERT INTO users (id, name, display_name, email, created_at, updated_at) VALUES (10, ?, 'W', '', ?, ?)",
            (WAL_ONLY_USER, sample_db.ts(900), sample_db.ts(900)),
        )
        conn.execute(
            "INSERT INTO pre_auth_keys (id, key, prefix, hash, user_id, reusable, ephemeral, used, created_at)"
            " VALUES (10, '', ?, ?, 10, 0, 0, 0, ?)",
            (WAL_ONLY_KEY_PREFIX, b"\x00hash\xff", sample_db.ts(901)),
        )
        conn.execute("UPDATE nodes SET given_name = ? WHERE id = 1", (WAL_ONLY_GIVEN_NAME,))
        # The pod dies here: copy the files as they are while the connection is still open (no checkpoint).
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(f"{src}{suffix}", f"{app.db_path}{suffix}")
        shutil.copytree(work / ".src.sqlite-litestream", app.data_dir / f".{app.db_path.name}-litestream")
    finally:
        conn.close()
    shutil.rmtree(work)
    for marker in (app.backup_dir / ".backup-initialised", app.data_dir / ".backup-initialised"):
        marker.write_text("initialised\n")
    # The rows really are only in the WAL: the main file alone lacks them.
    assert Path(f"{app.db_path}-wal").stat().st_size > 0
    main_only = _tables(app.db_path)
    assert WAL_ONLY_USER not in {row[1] for row in main_only["users"]}
    with_wal = _tables(app.db_path, wal=Path(f"{app.db_path}-wal"))
    assert WAL_ONLY_USER in {row[1] for row in with_wal["users"]}
    return root / "app"


@pytest.fixture
def lab(tmp_path: Path, template: Path) -> Callable[..., App]:
    """``lab(marker=FROM)``: this test's copy of the template, with the version marker set (None: no marker)."""

    def make(*, marker: str | None = FROM) -> App:
        root = tmp_path / "app"
        shutil.copytree(template, root, symlinks=True)
        app = App(root).create()
        (root / "scratch").mkdir()
        if marker is not None:
            (app.backup_dir / MARKER_NAME).write_text(marker + "\n")
        return app

    return make


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return request.param


def _scratch(app: App) -> Path:
    return app.root / "scratch"


def _run(shell: list[str], app: App, to_version: str = TO, **kwargs: Any) -> ScriptResult:
    assert LITESTREAM is not None
    return run_pre_upgrade_script(shell, LITESTREAM, app, to_version=to_version, scratch_dir=_scratch(app), **kwargs)


def _assert_exit(result: ScriptResult, code: str, *phrases: str) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_CODES[code], output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} missing from: {output}"
    return output


def _marker(app: App) -> str:
    return (app.backup_dir / MARKER_NAME).read_text()


def _snap(app: App, from_version: str = FROM, to_version: str = TO) -> Path:
    return Path(snapshot_dir(str(app.backup_dir), from_version, to_version))


def _wal(app: App) -> Path:
    return Path(f"{app.db_path}-wal")


def _assert_snapshot(app: App, expected: dict[str, list[tuple[Any, ...]]], *, wal: bool = True) -> str:
    """The snapshot is complete, intact, equal to ``expected``; returns its sha256.

    ``wal=False``: the source had no WAL frames, so Litestream's counter is one higher in the snapshot.
    """
    snap = _snap(app)
    assert sorted(p.name for p in snap.iterdir()) == sorted([SNAPSHOT_FILE, SNAPSHOT_SHA256_FILE, SOURCE_SHA256_FILE])
    db = snap / SNAPSHOT_FILE
    assert db.read_bytes()[:16] == b"SQLite format 3\x00"
    assert _integrity(db) == "ok"
    if wal:
        assert _tables(db) == expected, "the snapshot holds every table's rows, WAL-only rows included"
    else:
        assert _headscale_tables(_tables(db)) == _headscale_tables(expected)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    assert (snap / SNAPSHOT_SHA256_FILE).read_text() == f"{digest}  {SNAPSHOT_FILE}\n"
    return digest


# --- static checks and the Python side -------------------------------------------------------------------------


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_script_is_clean_posix_sh(checker: list[str]) -> None:
    result = subprocess.run(
        [*checker, str(PRE_UPGRADE_SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_documented_exit_codes_match_the_script_and_the_module() -> None:
    text = PRE_UPGRADE_SCRIPT.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert "\nset -eu\n" in text
    documented = {int(code) for code in re.findall(r"^#\s{2,}(\d+)\s{2}\S", text, flags=re.MULTILINE)}
    defined = [int(code) for code in re.findall(r"^EX_[A-Z_]+=(\d+)$", text, flags=re.MULTILINE)]
    assert len(defined) == len(set(defined)), "exit codes must be distinct"
    assert documented == {*defined, 0} == set(EXIT_CODES.values())
    assert f'MARKER="$BACKUP_DIR/{MARKER_NAME}"' in text
    assert f'PRE_DIR="$BACKUP_DIR/{SNAPSHOT_DIR}"' in text
    assert f"SNAPSHOT_FILE={SNAPSHOT_FILE}\n" in text


def test_the_script_ships_as_package_data() -> None:
    assert pre_upgrade_script() == shipped(PRE_UPGRADE_SCRIPT)


def test_snapshot_dir_layout() -> None:
    assert snapshot_dir("/backup/headscale", FROM, TO) == "/backup/headscale/pre-upgrade/0.28.0-0.29.2"
    assert snapshot_dir("/backup/headscale/", "0.28.1", "0.28.10") == "/backup/headscale/pre-upgrade/0.28.1-0.28.10"
    with pytest.raises(ValueError, match=r"from_version: 'v0\.28\.0'"):
        snapshot_dir("/backup/headscale", "v0.28.0", TO)
    with pytest.raises(ValueError, match="backup_dir: 'backup'"):
        snapshot_dir("backup", FROM, TO)


MOUNTS = [
    {"name": "data", "mountPath": "/var/lib/headscale"},
    {"name": "backup", "mountPath": "/backup/headscale", "subPath": "headscale"},
    {"name": "litestream-config", "mountPath": "/etc/litestream", "readOnly": True},
]
SCRATCH = {"name": "litestream-tmp", "mountPath": "/tmp"}


def _container(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "image": "litestream/litestream:0.5.17",
        "to_version": TO,
        "db_path": "/var/lib/headscale/db.sqlite",
        "backup_dir": "/backup/headscale",
        "script_file": f"/etc/litestream/{UPGRADE_SCRIPT_KEY}",
        "mounts": MOUNTS,
        "scratch_mount": SCRATCH,
        "resources": {"requests": {"cpu": "10m"}},
        "security": {"readOnlyRootFilesystem": True},
    }
    return pre_upgrade_container(**(args | overrides))


def test_the_init_container() -> None:
    container = _container()
    assert container == {
        "name": CONTAINER_NAME,
        "image": "litestream/litestream:0.5.17",
        "command": ["/bin/sh", "/etc/litestream/pre-upgrade.sh"],
        "env": [
            {"name": "DB_PATH", "value": "/var/lib/headscale/db.sqlite"},
            {"name": "BACKUP_DIR", "value": "/backup/headscale"},
            {"name": "TO_VERSION", "value": TO},
            {"name": "SCRATCH_DIR", "value": "/tmp"},
        ],
        "volumeMounts": [*MOUNTS, SCRATCH],
        "resources": {"requests": {"cpu": "10m"}},
        "securityContext": {"readOnlyRootFilesystem": True},
    }
    # The scratch volume already mounted (the Litestream containers mount /tmp): not repeated.
    assert _container(mounts=[*MOUNTS, SCRATCH])["volumeMounts"] == [*MOUNTS, SCRATCH]
    # Signed backups: the key and the manifest script, so each snapshot gets its MAC.
    key_mount = {"name": "backup-key", "mountPath": "/etc/litestream-key", "readOnly": True}
    signed = _container(
        key_mount=key_mount, key_file="/etc/litestream-key/backup.key", manifest_script_file="/etc/litestream/m.sh"
    )
    assert signed["volumeMounts"] == [*MOUNTS, SCRATCH, key_mount]
    assert signed["env"][4:] == [
        {"name": "BACKUP_KEY_FILE", "value": "/etc/litestream-key/backup.key"},
        {"name": "MANIFEST_SCRIPT", "value": "/etc/litestream/m.sh"},
    ]
    with pytest.raises(ValueError, match="all three"):
        _container(key_mount=key_mount)
    assert container["volumeMounts"] is not MOUNTS
    assert container["volumeMounts"][0] is not MOUNTS[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"to_version": "v0.29.2"}, r"to_version: 'v0\.29\.2' is not a Headscale version X\.Y\.Z"),
        ({"to_version": "0.29"}, r"to_version: '0\.29'"),
        ({"to_version": "0.29.2-beta.1"}, r"to_version: '0\.29\.2-beta\.1'"),
        ({"db_path": "db.sqlite"}, "db_path: 'db.sqlite' must be an absolute path"),
        ({"backup_dir": "/"}, "backup_dir: '/' must be an absolute path"),
        ({"scratch_mount": {"name": "t", "mountPath": "/scratch dir"}}, "mountPath '/scratch dir'"),
        ({"scratch_mount": {"name": "t", "mountPath": "/tmp", "readOnly": True}}, "must be writable"),
        ({"mounts": [*MOUNTS, {"name": "other", "mountPath": "/tmp"}]}, "already the mount path"),
    ],
)
def test_the_init_container_refuses_bad_arguments(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _container(**overrides)


VERSIONS = ["0.29.2", "0.0.0", "1.10.100", "999999999.0.1"]
NOT_VERSIONS = ["", "0.29", "v0.29.2", "0.29.02", "00.1.2", "0.29.2-beta.1", "1.2.3.4", "0.29.2\n0.1.0", "0..2",
                "1234567890.0.0", " 0.29.2", "0.29.x"]  # fmt: skip


@pytest.mark.parametrize("value", VERSIONS)
def test_versions_both_sides_accept(value: str) -> None:
    assert parse_version(value) == tuple(int(part) for part in value.split("."))


@needs_litestream
def test_versions_both_sides_refuse(tmp_path: Path) -> None:
    """The script (exit 2, before touching anything) and parse_version refuse the same TO_VERSION values."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    for value in NOT_VERSIONS:
        with pytest.raises(ValueError, match="to_version"):
            parse_version(value)
        result = run_pre_upgrade_script(["sh"], LITESTREAM, app, to_version=value, scratch_dir=tmp_path)
        _assert_exit(result, "usage", "TO_VERSION must be a Headscale version X.Y.Z")
    assert not app.backup_dir.exists()


# --- the upgrade ----------------------------------------------------------------------------------------------


def test_upgrade_takes_a_verified_snapshot_and_leaves_the_database_alone(shell, lab) -> None:
    app = lab()
    expected = _tables(app.db_path, wal=_wal(app))
    local_before, replica_before = tree_state(app.data_dir), tree_state(app.replica_dir)
    backup_before = tree_state(app.backup_dir)
    assert {f"{app.db_path.name}-wal", f"{app.db_path.name}-shm"} <= set(local_before)

    result = _run(shell, app)
    output = _assert_exit(result, "ok")
    digest = _assert_snapshot(app, expected)
    snap = _snap(app)
    size = (snap / SNAPSHOT_FILE).stat().st_size
    assert f"pre-upgrade snapshot ok: {FROM} -> {TO} path={snap} bytes={size} sha256={digest[:12]}\n" in output
    assert WAL_ONLY_USER in {row[1] for row in _tables(snap / SNAPSHOT_FILE)["users"]}
    # source.sha256 names the local files it was taken from (db + WAL, never the -shm), checkable in place.
    source = (snap / SOURCE_SHA256_FILE).read_text()
    assert source == "".join(
        f"{local_before[name]}  {name}\n" for name in (app.db_path.name, f"{app.db_path.name}-wal")
    )
    assert _marker(app) == f"{TO}\n"
    # The local database, its directory and the live replica are untouched; the backup directory only gained the
    # snapshot and the new marker; the scratch directory is empty again.
    assert tree_state(app.data_dir) == local_before
    assert tree_state(app.replica_dir) == replica_before
    backup_after = tree_state(app.backup_dir)
    changed = {
        key for key in backup_before.keys() | backup_after.keys() if backup_before.get(key) != backup_after.get(key)
    }
    snapshot_entries = {str(Path(SNAPSHOT_DIR, snap.name, name)) for name in (SNAPSHOT_FILE, SNAPSHOT_SHA256_FILE)}
    snapshot_entries |= {
        SNAPSHOT_DIR,
        str(Path(SNAPSHOT_DIR, snap.name)),
        str(Path(SNAPSHOT_DIR, snap.name, SOURCE_SHA256_FILE)),
    }
    assert changed == {MARKER_NAME, *snapshot_entries}
    assert list(_scratch(app).iterdir()) == []
    assert result.seconds < 10

    # Running it again is a no-op: same version now, nothing printed, nothing written.
    again = _run(shell, app)
    assert _assert_exit(again, "ok") == ""
    assert tree_state(app.backup_dir) == backup_after
    assert tree_state(app.data_dir) == local_before


@needs_litestream
def test_a_cleanly_stopped_database_without_wal(lab) -> None:
    """No WAL frames to copy: Litestream starts a WAL in the scratch copy by bumping its own counter, so the
    snapshot equals the source in every Headscale table and holds that counter one higher."""
    app = lab()
    conn = sqlite3.connect(app.db_path, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()  # the last connection: SQLite checkpoints and removes the WAL
    Path(f"{app.db_path}-shm").unlink(missing_ok=True)
    assert not _wal(app).exists()
    expected = _tables(app.db_path)
    local_before = tree_state(app.data_dir)
    _assert_exit(_run(["sh"], app), "ok", "pre-upgrade snapshot ok")
    snapshot = _tables(_snap(app) / SNAPSHOT_FILE)
    assert _headscale_tables(snapshot) == _headscale_tables(expected)
    assert snapshot["_litestream_seq"] == [(1, expected["_litestream_seq"][0][1] + 1)]
    assert (_snap(app) / SOURCE_SHA256_FILE).read_text() == f"{local_before[app.db_path.name]}  {app.db_path.name}\n"
    assert tree_state(app.data_dir) == local_before


def test_same_version_is_quiet(shell, lab) -> None:
    app = lab(marker=f"  {TO}\r\n")  # surrounding whitespace is not part of the version
    backup_before, local_before = tree_state(app.backup_dir), tree_state(app.data_dir)
    assert _assert_exit(_run(shell, app), "ok") == ""
    assert (tree_state(app.backup_dir), tree_state(app.data_dir)) == (backup_before, local_before)


def test_no_marker_records_the_version_without_a_snapshot(shell, lab) -> None:
    app = lab(marker=None)
    _assert_exit(
        _run(shell, app), "ok", f"recorded {TO}", "No pre-upgrade snapshot was taken because no earlier version"
    )
    assert _marker(app) == f"{TO}\n"
    assert not (app.backup_dir / SNAPSHOT_DIR).exists()
    assert oct((app.backup_dir / MARKER_NAME).stat().st_mode & 0o777) == "0o644"


def test_no_local_database_records_the_version(shell, lab) -> None:
    app = lab(marker=None)
    app.remove_local_db()
    _assert_exit(_run(shell, app), "ok", "no local database", f"recorded version {TO}")
    assert _marker(app) == f"{TO}\n"
    assert not (app.backup_dir / SNAPSHOT_DIR).exists()


def test_downgrade_is_refused_naming_both_versions_and_the_snapshot(shell, lab) -> None:
    app = lab()
    _assert_exit(_run(shell, app), "ok")
    backup_before, local_before = tree_state(app.backup_dir), tree_state(app.data_dir)
    result = _run(shell, app, FROM)
    output = _assert_exit(
        result,
        "downgrade",
        f"Headscale {FROM} is about to start, but {TO} last ran on this database",
        "migrations are one-way",
        f"'{_snap(app) / SNAPSHOT_FILE}'",
        f"Set headscale.version back to {TO}",
        '"Upgrading Headscale"',
    )
    assert output.count("\n") == 1, "one paragraph"
    assert (tree_state(app.backup_dir), tree_state(app.data_dir)) == (backup_before, local_before), "nothing written"
    assert list(_scratch(app).iterdir()) == []


@needs_litestream
def test_downgrade_without_a_snapshot_says_so(lab) -> None:
    app = lab(marker="0.29.3")
    backup_before = tree_state(app.backup_dir)
    _assert_exit(
        _run(["sh"], app, "0.29.2"),
        "downgrade",
        "Headscale 0.29.2 is about to start, but 0.29.3 last ran",
        f"There is no snapshot of the upgrade from 0.29.2 to 0.29.3 ('{_snap(app, '0.29.2', '0.29.3')}/' does not",
    )
    assert tree_state(app.backup_dir) == backup_before
    # Numeric, not textual: 0.29.10 is newer than 0.29.9.
    (app.backup_dir / MARKER_NAME).write_text("0.29.10\n")
    _assert_exit(_run(["sh"], app, "0.29.9"), "downgrade", "Headscale 0.29.9 is about to start, but 0.29.10")


@needs_litestream
def test_the_printed_way_back_restores_the_snapshot(lab, tmp_path: Path) -> None:
    """Follow the refusal's steps: the restore container then restores the pre-upgrade database, and the old
    version starts."""
    assert LITESTREAM is not None
    app = lab()
    expected = _tables(app.db_path, wal=_wal(app))
    _assert_exit(_run(["sh"], app), "ok")
    snapshot = _snap(app) / SNAPSHOT_FILE
    output = _assert_exit(_run(["sh"], app, FROM), "downgrade")
    restore_copy = tmp_path / "restore.sqlite"
    assert (
        f"cp '{snapshot}' /tmp/restore.sqlite && litestream replicate -once /tmp/restore.sqlite "
        f"'file://{app.replica_dir}'" in output
    )
    # 2. move the replica aside; 3. seed a new one from a copy of the snapshot; 4. move the local database aside
    # (a persistent volume); 5. record the old version.
    app.replica_dir.rename(app.backup_dir / "replica.aside")
    shutil.copyfile(snapshot, restore_copy)
    replicate_once(LITESTREAM, restore_copy, app.replica_dir)
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream")
    (app.backup_dir / MARKER_NAME).write_text(f"{FROM}\n")
    # 6. the pod starts: restore, then pre-upgrade.
    restored = run_restore_script(["sh"], LITESTREAM, app)
    assert restored.returncode == 0, restored.stderr
    assert "restored" in restored.stderr
    assert _headscale_tables(_tables(app.db_path, wal=_wal(app))) == _headscale_tables(expected)
    assert _assert_exit(_run(["sh"], app, FROM), "ok") == ""


# --- refusals ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ["v0.28.0\n", "0.28\n", "privkey:" + "ab" * 32 + "\n", "0.28.0\n0.29.2\n", "", "0.28.00\n", "0.2 8.0\n"],
    ids=["v-prefix", "two-parts", "junk", "two-lines", "empty", "leading-zero", "inner-blank"],
)
def test_malformed_marker_is_refused_without_showing_it(shell, lab, content: str) -> None:
    app = lab()
    (app.backup_dir / MARKER_NAME).write_text(content)
    backup_before = tree_state(app.backup_dir)
    output = _assert_exit(_run(shell, app), "marker_untrusted", "does not hold a Headscale version X.Y.Z")
    if content.strip():
        assert content.strip().splitlines()[0] not in output.replace(TO, "")
    assert tree_state(app.backup_dir) == backup_before


def test_symlinked_marker_is_refused(shell, lab) -> None:
    app = lab(marker=None)
    elsewhere = app.root / "elsewhere"
    elsewhere.write_text(f"{FROM}\n")
    (app.backup_dir / MARKER_NAME).symlink_to(elsewhere)
    backup_before = tree_state(app.backup_dir)
    _assert_exit(_run(shell, app), "marker_untrusted", "is a symbolic link")
    assert tree_state(app.backup_dir) == backup_before
    assert elsewhere.read_text() == f"{FROM}\n"


@needs_litestream
@pytest.mark.parametrize("planted", [SNAPSHOT_DIR, f"{SNAPSHOT_DIR}/{FROM}-{TO}"])
def test_symlinked_snapshot_directories_are_refused(lab, planted: str) -> None:
    app = lab()
    (app.backup_dir / planted).parent.mkdir(exist_ok=True)
    target = app.root / "planted"
    target.mkdir()
    (app.backup_dir / planted).symlink_to(target)
    _assert_exit(_run(["sh"], app), "marker_untrusted", "is a symbolic link")
    assert list(target.iterdir()) == []
    assert _marker(app) == f"{FROM}\n"


@needs_litestream
@pytest.mark.parametrize(
    ("env", "code", "phrase"),
    [
        ({"DB_PATH": None}, "usage", "DB_PATH must be an absolute path"),
        ({"BACKUP_DIR": "backup"}, "usage", "BACKUP_DIR must be an absolute path"),
        ({"SCRATCH_DIR": "/tmp/scratch dir"}, "usage", "SCRATCH_DIR may only hold"),
        ({"SCRATCH_DIR": "/nonexistent/scratch"}, "usage", "does not exist"),
        ({"LITESTREAM_BIN": "/nonexistent/litestream"}, "usage", "was not found"),
        ({"BACKUP_DIR": "/nonexistent/backup"}, "backup_dir_unavailable", "is missing or unreadable"),
    ],
)
def test_bad_environment_is_refused(lab, env: dict[str, str | None], code: str, phrase: str) -> None:
    app = lab()
    backup_before = tree_state(app.backup_dir)
    _assert_exit(_run(["sh"], app, extra_env=env), code, phrase)
    assert tree_state(app.backup_dir) == backup_before


# --- failures and retries ---------------------------------------------------------------------------------------


def _corrupt_page(db: Path, table: str) -> None:
    """Flip the cell pointers of ``table``'s root page in the main file (a page the WAL does not hold)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        (root_page,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    data = bytearray(db.read_bytes())
    offset = (root_page - 1) * page_size
    for index in range(8, 40):
        data[offset + index] ^= 0xFF
    db.write_bytes(bytes(data))


def test_a_damaged_database_fails_verification_and_changes_nothing(shell, lab) -> None:
    app = lab()
    _corrupt_page(app.db_path, "api_keys")
    assert _integrity(app.db_path, wal=_wal(app)) != "ok"
    local_before, backup_before = tree_state(app.data_dir), tree_state(app.backup_dir)
    _assert_exit(_run(shell, app), "snapshot_invalid", "failed verification", "integrity check", "damaged")
    assert _marker(app) == f"{FROM}\n", "the marker is unchanged: the next start retries"
    assert tree_state(app.backup_dir) == backup_before, "no snapshot, not even a partial one"
    assert tree_state(app.data_dir) == local_before
    assert list(_scratch(app).iterdir()) == []


@needs_litestream
def test_a_file_that_is_not_sqlite_is_refused(lab) -> None:
    app = lab()
    app.db_path.write_bytes(b"not a database" * 100)
    _assert_exit(_run(["sh"], app), "snapshot_invalid", "is not an SQLite database")
    assert _marker(app) == f"{FROM}\n"
    assert not (app.backup_dir / SNAPSHOT_DIR).exists()


def test_a_rerun_after_an_interrupted_attempt_recovers(shell, lab) -> None:
    app = lab()
    expected = _tables(app.db_path, wal=_wal(app))
    snap = _snap(app)
    snap.mkdir(parents=True)
    (snap / f"{SNAPSHOT_FILE}.tmp").write_bytes(b"SQLite format 3\x00 half")  # litestream's own temp name
    staging = snap.parent / f".{FROM}-{TO}.partial"
    staging.mkdir()
    (staging / SNAPSHOT_FILE).write_bytes(b"SQLite format 3\x00 half")
    (_scratch(app) / "pre-upgrade.work" / "db").mkdir(parents=True)  # the emptyDir survives a container restart
    output = _assert_exit(_run(shell, app), "ok", "removed the incomplete snapshot directory", "snapshot ok")
    _assert_snapshot(app, expected)
    assert sorted(p.name for p in snap.parent.iterdir()) == [snap.name], output
    assert _marker(app) == f"{TO}\n"
    assert list(_scratch(app).iterdir()) == []


@needs_litestream
def test_a_snapshot_of_an_earlier_attempt_is_verified_and_reused(lab) -> None:
    app = lab()
    _assert_exit(_run(["sh"], app), "ok")
    snap = _snap(app)
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snap.iterdir()}
    (app.backup_dir / MARKER_NAME).write_text(f"{FROM}\n")  # the marker write failed last time
    output = _assert_exit(_run(["sh"], app), "ok", "reusing the verified snapshot", "pre-upgrade snapshot ok")
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snap.iterdir()} == files
    assert _marker(app) == f"{TO}\n", output


@needs_litestream
@pytest.mark.parametrize("change", ["database", "snapshot"])
def test_a_stale_or_damaged_snapshot_is_moved_aside_and_retaken(lab, change: str) -> None:
    app = lab()
    _assert_exit(_run(["sh"], app), "ok")
    snap = _snap(app)
    old = tree_state(snap)
    (app.backup_dir / MARKER_NAME).write_text(f"{FROM}\n")
    if change == "database":
        # The old version ran again in between (a rollback before the upgrade was retried).
        conn = sqlite3.connect(app.db_path, isolation_level=None)
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("UPDATE users SET display_name = 'changed later' WHERE id = 1")
        conn.close()
        reason = "taken from a different state of the local database"
    else:
        with (snap / SNAPSHOT_FILE).open("r+b") as handle:
            handle.seek(5000)
            handle.write(b"\x00bitrot")
        reason = "does not match its recorded digest"
    expected = _tables(app.db_path, wal=_wal(app))
    output = _assert_exit(_run(["sh"], app), "ok", reason, "taking a new one", "pre-upgrade snapshot ok")
    _assert_snapshot(app, expected, wal=_wal(app).exists())
    (aside,) = [p for p in snap.parent.iterdir() if p.name.startswith(f"{snap.name}.replaced-")]
    if change == "database":
        assert tree_state(aside) == old, output
    assert _marker(app) == f"{TO}\n"


def _signed_run(app: App, key: Path) -> ScriptResult:
    return _run(["sh"], app, extra_env={"BACKUP_KEY_FILE": str(key), "MANIFEST_SCRIPT": str(MANIFEST_SCRIPT)})


def _check_snapshot(app: App, key: Path) -> ScriptResult:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KEY_FILE": str(key), "APP": "headscale"}
    return run_script(["sh", str(MANIFEST_SCRIPT), "check-snapshot", str(_snap(app))], env=env, timeout=60)


@needs_litestream
def test_with_signed_backups_the_snapshot_carries_a_mac_the_downgrade_checks(lab, tmp_path: Path) -> None:
    """The pre-upgrade container writes the snapshot's MAC under Headscale's backup key; check-snapshot (step 3 of
    the downgrade in docs/upgrades.md) accepts it, and refuses a database swapped on the export with its digest
    file rewritten to match (what the digest alone cannot catch), a snapshot without a MAC, and another key."""
    app = lab()
    key = write_backup_key(tmp_path / "backup.key")
    expected = _tables(app.db_path, wal=_wal(app))
    _assert_exit(_signed_run(app, key), "ok", "pre-upgrade snapshot ok")
    snap = _snap(app)
    assert sorted(p.name for p in snap.iterdir()) == sorted(
        [SNAPSHOT_FILE, SNAPSHOT_SHA256_FILE, SOURCE_SHA256_FILE, f"{SNAPSHOT_FILE}.hmac"]
    )
    assert _tables(snap / SNAPSHOT_FILE) == expected
    checked = _check_snapshot(app, key)
    assert checked.returncode == 0, checked.stderr
    assert f"snapshot authenticated: {FROM} -> {TO}" in checked.stderr

    other_key = write_backup_key(tmp_path / "other.key")
    assert _check_snapshot(app, other_key).returncode == 43

    planted = sqlite3.connect(snap / SNAPSHOT_FILE)
    planted.execute("UPDATE users SET name = 'mallory' WHERE id = 1")
    planted.commit()
    planted.close()
    digest = hashlib.sha256((snap / SNAPSHOT_FILE).read_bytes()).hexdigest()
    (snap / SNAPSHOT_SHA256_FILE).write_text(f"{digest}  {SNAPSHOT_FILE}\n")
    swapped = _check_snapshot(app, key)
    assert swapped.returncode == 43, swapped.stderr
    assert "Do not seed from it" in swapped.stderr

    (snap / f"{SNAPSHOT_FILE}.hmac").unlink()
    assert _check_snapshot(app, key).returncode == 41


@needs_litestream
def test_with_signed_backups_an_earlier_snapshot_without_a_mac_is_retaken(lab, tmp_path: Path) -> None:
    """An earlier attempt's snapshot is reused only when its MAC verifies: one without (planted beside a digest
    that matches, or taken before signing) is moved aside and taken again."""
    app = lab()
    key = write_backup_key(tmp_path / "backup.key")
    _assert_exit(_run(["sh"], app), "ok")
    (app.backup_dir / MARKER_NAME).write_text(f"{FROM}\n")
    output = _assert_exit(_signed_run(app, key), "ok", "its MAC is missing or does not verify", "taking a new one")
    assert (_snap(app) / f"{SNAPSHOT_FILE}.hmac").is_file(), output
    assert _check_snapshot(app, key).returncode == 0


# --- the image's toolbox ------------------------------------------------------------------------------------------


@pytest.mark.real_tool("litestream", "busybox")
def test_runs_with_busybox_tools_only(lab, tmp_path: Path) -> None:
    """The Litestream image has busybox and litestream only: no GNU tool may be needed."""
    busybox = shutil.which("busybox")
    assert busybox is not None
    bin_dir = tmp_path / "busybox-bin"
    bin_dir.mkdir()
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, timeout=10, check=True).stdout
    for applet in applets.split():
        (bin_dir / applet).symlink_to(busybox)
    app = lab()
    expected = _tables(app.db_path, wal=_wal(app))
    _assert_exit(_run([busybox, "sh"], app, path=str(bin_dir)), "ok", "pre-upgrade snapshot ok")
    _assert_snapshot(app, expected)
    assert _marker(app) == f"{TO}\n"
