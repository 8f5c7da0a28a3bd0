"""Authenticated backups, run for real: the signer (components/scripts/litestream-manifest.sh) beside a real
``litestream replicate``, and the restore script refusing what this tailnet's writers did not sign.

The HMAC is built from sha256sum in shell; the first tests prove it equals `openssl dgst -sha256 -hmac`. A signed
backup is produced once per module (Litestream and the signer running, polled until the manifest covers the replica's
newest transaction), with a copy of an older signed state for the rollback tests and a second tailnet's backup for the
planted and swapped ones; each test works on its own copy.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.litestream_lab import (
    MANIFEST_SCRIPT,
    SIGN_SCRIPT,
    App,
    ScriptResult,
    insert_rows,
    litestream_bin,
    manifest_env,
    manifest_txid,
    newest_txid,
    read_rows,
    replica_row_count,
    replicating,
    run_manifest_script,
    run_rehearsal_script,
    run_restore_script,
    signing,
    wait_until,
    write_backup_key,
)
from tests.support.ltx_attack import replica_files, write_signed_manifest
from tests.support.script_checks import SHELLS, SHELLS_ONLY, SYNTAX_CHECKERS, assert_passes, exit_codes, shell_for

LITESTREAM = litestream_bin()
EXIT = {"ok": 0, "usage": 2, "unsigned": 40, "forged": 41, "malformed": 42, "tampered": 43, "stale": 44}
EXIT |= {"key": 45, "io": 46, "not_regular": 47}
#: The restore's own codes these tests expect besides the manifest script's.
RESTORE_EXIT = {**EXIT, "marker": 13}
FIRST_ROWS, ROWS = 50, 75


@dataclass(frozen=True)
class Tailnet:
    """One tailnet's signed backup: its key, its fingerprint, the backup root and the rows it holds."""

    root: Path
    key: Path
    fingerprint: str
    rows: int
    older: Path | None  # a copy of the backup directory at an older signed state (FIRST_ROWS rows)


def _signed_backup(root: Path, *, rows: int, older_copy: bool) -> Tailnet:
    assert LITESTREAM is not None
    app = App(root).create()
    key = write_backup_key(root / "backup.key")
    fingerprint = secrets.token_hex(32)
    app.backup_dir.mkdir(parents=True)
    (app.backup_dir / "identity.sha256").write_text(fingerprint + "\n")
    env = manifest_env(app, key, SIGN_INTERVAL_SECONDS="1", HEARTBEAT_SECONDS="1")
    older = None

    def signed(count: int) -> bool:
        return (
            replica_row_count(LITESTREAM, app, root) == count
            and manifest_txid(app) == newest_txid(LITESTREAM, app.replica_dir) > 0
        )

    insert_rows(app.db_path, FIRST_ROWS)
    with signing(["sh"], env, root / "sign.log"), replicating(LITESTREAM, app, root / "replicate.log"):
        assert wait_until(lambda: signed(FIRST_ROWS), timeout=20), (root / "sign.log").read_text()
        if older_copy:
            older = root / "older"
            shutil.copytree(app.backup_dir, older)
        insert_rows(app.db_path, rows - FIRST_ROWS)
        assert wait_until(lambda: signed(rows), timeout=20)
        time.sleep(1.5)
    return Tailnet(root, key, fingerprint, rows, older)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Tailnet:
    return _signed_backup(tmp_path_factory.mktemp("ours"), rows=ROWS, older_copy=True)


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> Tailnet:
    """Another tailnet (another key) with a backup of the same shape: its files have the same names as ours."""
    return _signed_backup(tmp_path_factory.mktemp("theirs"), rows=ROWS, older_copy=False)


@pytest.fixture
def restore_app(tmp_path: Path) -> Callable[[Tailnet], App]:
    """This test's copy of a tailnet's backup directory, with no local database (a lost or disposable volume)."""

    def make(tailnet: Tailnet) -> App:
        app = App(tmp_path / "app").create()
        shutil.copytree(App(tailnet.root).backup_dir, app.backup_dir)
        return app

    return make


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return request.param


def _restore(shell: list[str], app: App, tailnet: Tailnet, **env: str) -> ScriptResult:
    assert LITESTREAM is not None
    return run_restore_script(
        shell,
        LITESTREAM,
        app,
        backup_key=tailnet.key,
        extra_env={"IDENTITY_FINGERPRINT": tailnet.fingerprint, **env},
    )


def _assert_exit(result: ScriptResult, code: str, *phrases: str, key: Path | None = None) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == RESTORE_EXIT[code], output
    for phrase in phrases:
        assert phrase in output, f"{phrase!r} missing from: {output}"
    if key is not None:
        assert key.read_text().strip() not in output
        assert key.read_text().strip()[:16] not in output


def _assert_nothing_restored(app: App) -> None:
    assert not app.db_path.exists()
    assert not Path(f"{app.db_path}.verified").exists()
    assert not Path(f"{app.db_path}.restoring").exists()


def _manifest_field(app: App, name: str) -> str:
    return next(line.split()[1] for line in app.manifest.read_text().splitlines() if line.startswith(f"{name} "))


# --- the HMAC is standard HMAC-SHA256 ------------------------------------------------------------------------


@pytest.mark.real_tool("openssl")
@pytest.mark.parametrize("argv", SHELLS_ONLY)
@pytest.mark.parametrize("message", [b"", b"hello\n", bytes(range(256)) * 40, b"\x00" * 100])
def test_hmac_equals_openssl(argv: list[str], message: bytes, tmp_path: Path) -> None:
    key = write_backup_key(tmp_path / "key")
    (tmp_path / "message").write_bytes(message)
    ours = subprocess.run(
        [*argv, str(MANIFEST_SCRIPT), "hmac"],
        input=message,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "KEY_FILE": str(key), "TMPDIR": str(tmp_path)},
        timeout=30,
        check=True,
    ).stdout.decode()
    openssl = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", key.read_text().strip(), "-r", str(tmp_path / "message")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()[0]
    assert ours.strip() == openssl


@pytest.mark.parametrize("content", ["", "abc", "A" * 64, "0" * 63, "privkey:" + "0" * 64])
def test_a_malformed_key_is_refused_without_showing_it(content: str, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(content)
    result = run_manifest_script(["sh"], "hmac", {"PATH": "/usr/bin:/bin", "KEY_FILE": str(key)}, input="x")
    assert result.returncode == EXIT["key"], result.stderr
    if content:
        assert content not in result.stderr


# --- static checks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", [MANIFEST_SCRIPT, SIGN_SCRIPT], ids=["manifest", "sign"])
@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_manifest_and_sign_scripts_are_clean_posix_sh(checker: list[str], script: Path) -> None:
    assert_passes(checker, script)


def test_manifest_exit_codes_are_documented() -> None:
    documented, defined = exit_codes(MANIFEST_SCRIPT)
    assert documented == {*defined, 0} == set(EXIT.values())


# --- a good replica restores ---------------------------------------------------------------------------------


def test_a_signed_replica_restores_as_before(shell, restore_app, ours) -> None:
    app = restore_app(ours)
    result = _restore(shell, app, ours)
    _assert_exit(result, "ok", "manifest verified", "signed position", key=ours.key)
    assert len(read_rows(app.db_path)) == ours.rows
    assert not Path(f"{app.db_path}.verified").exists()
    assert (app.data_dir / ".backup-position").read_text().strip() == _manifest_field(app, "txid")


def test_without_a_key_the_restore_is_unchanged(shell, restore_app, theirs) -> None:
    """Another program's pods (no BACKUP_KEY_FILE) restore as before signing existed."""
    assert LITESTREAM is not None
    app = restore_app(theirs)
    app.manifest.unlink()
    result = run_restore_script(shell, LITESTREAM, app, extra_env={"IDENTITY_FINGERPRINT": theirs.fingerprint})
    _assert_exit(result, "ok")
    assert len(read_rows(app.db_path)) == theirs.rows


# --- refused: planted, swapped, truncated ----------------------------------------------------------------------


def test_a_planted_replica_without_a_manifest_is_refused(shell, restore_app, ours, theirs) -> None:
    """Someone without the key copies a replica (and the public fingerprint) onto the export."""
    app = restore_app(theirs)
    app.manifest.unlink()
    (app.backup_dir / "identity.sha256").write_text(ours.fingerprint + "\n")
    result = _restore(shell, app, ours)
    _assert_exit(result, "unsigned", "has no manifest", "backup.auth.allowUnsigned", key=ours.key)
    _assert_nothing_restored(app)


def test_a_replica_signed_with_another_key_is_refused(shell, restore_app, ours, theirs) -> None:
    app = restore_app(theirs)
    (app.backup_dir / "identity.sha256").write_text(ours.fingerprint + "\n")
    result = _restore(shell, app, ours)
    _assert_exit(result, "forged", "does not carry this tailnet's signature", key=ours.key)
    _assert_nothing_restored(app)


def test_a_file_swapped_with_another_tailnets_is_refused(shell, restore_app, ours, theirs) -> None:
    app = restore_app(ours)
    theirs_app = App(theirs.root)
    swapped = sorted((app.replica_dir / "ltx" / "0").glob("*.ltx"))[-1]
    foreign = theirs_app.replica_dir / "ltx" / "0" / swapped.name
    assert foreign.is_file()
    assert foreign.read_bytes() != swapped.read_bytes()
    shutil.copyfile(foreign, swapped)
    result = _restore(shell, app, ours)
    _assert_exit(result, "tampered", swapped.name, "not the file this tailnet's writer signed", key=ours.key)
    _assert_nothing_restored(app)


@pytest.mark.parametrize("cut", ["mac line", "mid mac", "final newline", "mid file line", "empty"])
def test_a_truncated_manifest_is_refused(shell, restore_app, ours, cut) -> None:
    app = restore_app(ours)
    text = app.manifest.read_text()
    truncated = {
        "mac line": text[: text.index("\nhmac ") + 1],
        "mid mac": text[:-10],
        "final newline": text[:-1],
        "mid file line": text[: text.index("\nf ") + 30],
        "empty": "",
    }[cut]
    app.manifest.write_text(truncated)
    result = _restore(shell, app, ours)
    _assert_exit(result, "malformed", "truncated or malformed", key=ours.key)
    _assert_nothing_restored(app)


def test_an_edited_manifest_is_refused(shell, restore_app, ours) -> None:
    """Dropping a file line (to hide a planted file, or to roll back) breaks the MAC."""
    app = restore_app(ours)
    lines = app.manifest.read_text().splitlines(keepends=True)
    app.manifest.write_text("".join(line for i, line in enumerate(lines) if i != 5))
    _assert_exit(_restore(shell, app, ours), "forged")
    _assert_nothing_restored(app)


def test_another_applications_signed_replica_is_refused(restore_app, ours, tmp_path) -> None:
    app = restore_app(ours)
    write_signed_manifest(app, ours.key, name="headplane")
    _assert_exit(_restore(["sh"], app, ours), "tampered", "signed for the application 'headplane'")


def test_a_manifest_link_is_never_followed(restore_app, ours) -> None:
    app = restore_app(ours)
    real = app.backup_dir / "real.manifest"
    app.manifest.rename(real)
    app.manifest.symlink_to(real)
    _assert_exit(_restore(["sh"], app, ours), "malformed", "never followed")


def test_a_missing_key_is_refused(restore_app, ours, tmp_path) -> None:
    app = restore_app(ours)
    gone = Tailnet(ours.root, tmp_path / "no-such.key", ours.fingerprint, ours.rows, None)
    _assert_exit(_restore(["sh"], app, gone), "key", "missing, unreadable or empty")
    _assert_nothing_restored(app)


def test_the_unsigned_override_restores_only_today_and_says_so(restore_app, ours, theirs) -> None:
    app = restore_app(ours)
    app.manifest.unlink()
    _assert_exit(_restore(["sh"], app, ours, ALLOW_UNSIGNED_RESTORE="2000-01-01"), "unsigned")
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    result = _restore(["sh"], app, ours, ALLOW_UNSIGNED_RESTORE=today)
    _assert_exit(result, "ok", "WITHOUT a valid signature")
    assert len(read_rows(app.db_path)) == ours.rows
    assert not (app.data_dir / ".backup-position").exists()


def test_the_unsigned_override_never_covers_a_swapped_file(restore_app, ours, theirs) -> None:
    app = restore_app(ours)
    swapped = sorted((app.replica_dir / "ltx" / "0").glob("*.ltx"))[-1]
    shutil.copyfile(App(theirs.root).replica_dir / "ltx" / "0" / swapped.name, swapped)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    _assert_exit(_restore(["sh"], app, ours, ALLOW_UNSIGNED_RESTORE=today), "tampered")


# --- the signed position: the unsigned tail, compaction, rollback ----------------------------------------------


def test_the_unsigned_tail_is_not_restored(restore_app, ours) -> None:
    """Files written after the last signature (the signer lagging, or died first) are left out: the restore stops
    at the signed position, and says so."""
    assert LITESTREAM is not None
    app = restore_app(ours)
    # The database with its WAL, as a copy of the volume holds it: the writer's last transactions may not be
    # checkpointed into the main file yet (copying the main file alone lost them, now and then).
    for suffix in ("", "-wal"):
        source = Path(f"{App(ours.root).db_path}{suffix}")
        if source.exists():
            shutil.copyfile(source, f"{app.db_path}{suffix}")
    assert len(read_rows(app.db_path)) == ours.rows
    insert_rows(app.db_path, 10)
    with replicating(LITESTREAM, app, app.root / "replicate.log"):
        # Generous: under a loaded CI machine Litestream's first sync of a copied database took over 20 s once.
        log = app.root / "replicate.log"
        shipped = wait_until(lambda: replica_row_count(LITESTREAM, app, app.root) == ours.rows + 10, timeout=90)
        assert shipped, log.read_text()
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    result = _restore(["sh"], app, ours)
    _assert_exit(result, "ok", "not in the manifest", "signed position")
    assert len(read_rows(app.db_path)) == ours.rows


def test_a_compacted_away_file_covered_by_a_signed_one_is_accepted(restore_app, ours) -> None:
    app = restore_app(ours)
    covered = sorted((app.replica_dir / "ltx" / "0").glob("*.ltx"))[0]
    assert any((app.replica_dir / "ltx").glob("[1-9]/*.ltx"))
    covered.unlink()
    _assert_exit(_restore(["sh"], app, ours), "ok")
    assert len(read_rows(app.db_path)) == ours.rows


def test_a_deleted_newest_file_is_refused(restore_app, ours) -> None:
    """Deleting the newest signed files would roll the restore back to an older state: refused."""
    app = restore_app(ours)
    txid = _manifest_field(app, "txid")
    newest = [path for path in (app.replica_dir / "ltx").glob("*/*.ltx") if path.stem.endswith(txid)]
    assert newest
    for path in newest:
        path.unlink()
    _assert_exit(_restore(["sh"], app, ours), "tampered", "is gone")
    _assert_nothing_restored(app)


def test_a_rolled_back_replica_is_refused_and_the_current_one_restores(shell, restore_app, ours, tmp_path) -> None:
    """A copy of an older state of the directory (an NFS snapshot rollback, an old copy) is refused by its age: the
    running writer re-signs at least every heartbeat, so the current manifest is always young."""
    assert ours.older is not None
    current = restore_app(ours)
    older = App(tmp_path / "older").create()
    shutil.copytree(ours.older, older.backup_dir)
    signed_older = int(_manifest_field(older, "signed_at"))
    assert wait_until(lambda: time.time() - signed_older >= 6, timeout=10)
    max_age = "3"
    # The writer's heartbeat, as the running signer does it.
    assert run_manifest_script(["sh"], "sign", manifest_env(current, ours.key)).returncode == 0
    _assert_exit(_restore(shell, current, ours, MAX_REPLICA_AGE_SECONDS=max_age), "ok")
    assert len(read_rows(current.db_path)) == ours.rows
    result = _restore(shell, older, ours, MAX_REPLICA_AGE_SECONDS=max_age)
    _assert_exit(result, "stale", "backup.auth.allowStale", "rollback", key=ours.key)
    _assert_nothing_restored(older)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    overridden = _restore(shell, older, ours, MAX_REPLICA_AGE_SECONDS=max_age, ALLOW_STALE_RESTORE=today)
    _assert_exit(overridden, "ok", "ALLOW_STALE")
    assert len(read_rows(older.db_path)) == FIRST_ROWS


def test_a_replica_below_the_local_position_record_is_refused(restore_app, ours) -> None:
    """After a restore the volume records the signed position; an older replica put back later is refused."""
    assert ours.older is not None
    app = restore_app(ours)
    _assert_exit(_restore(["sh"], app, ours), "ok")
    app.remove_local_db()
    shutil.rmtree(app.backup_dir)
    shutil.copytree(ours.older, app.backup_dir)
    _assert_exit(_restore(["sh"], app, ours), "stale", "rolled back")
    assert not app.db_path.exists()


def _witness(tmp_path: Path, app: App) -> Path:
    """The served witness's `position` key as the restore sees it (a file in the witness volume), holding the
    position of ``app``'s current manifest: what the recorder copied there while the writer ran. The kubelet writes
    a ConfigMap value as it is: without a final newline."""
    witness = tmp_path / "witness" / "position"
    witness.parent.mkdir(exist_ok=True)
    witness.write_text(f"{_manifest_field(app, 'txid')} {_manifest_field(app, 'signed_at')}")
    return witness


def test_a_young_rollback_is_refused_by_the_recorded_position(shell, restore_app, ours, tmp_path) -> None:
    """A snapshot rollback younger than maxAge passes the age check; the position the running pod recorded in the
    served witness (outside the export) refuses it. The current replica restores; the dated override restores the
    older one loudly."""
    assert ours.older is not None
    current = restore_app(ours)
    witness = _witness(tmp_path, current)
    older = App(tmp_path / "older").create()
    shutil.copytree(ours.older, older.backup_dir)
    assert int(_manifest_field(older, "txid"), 16) < int(_manifest_field(current, "txid"), 16)
    day = 24 * 3600
    refused = _restore(shell, older, ours, POSITION_WITNESS_FILE=str(witness), MAX_REPLICA_AGE_SECONDS=str(day))
    _assert_exit(refused, "stale", "rolled back", "served witness", "backup.auth.allowRollback", key=ours.key)
    _assert_nothing_restored(older)
    elsewhere = _restore(shell, older, ours, POSITION_WITNESS_FILE=str(witness), ALLOW_ROLLBACK_RESTORE="2001-01-01")
    _assert_exit(elsewhere, "stale", "no effect")
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    overridden = _restore(shell, older, ours, POSITION_WITNESS_FILE=str(witness), ALLOW_ROLLBACK_RESTORE=today)
    _assert_exit(overridden, "ok", "OVERRIDE", "BELOW")
    assert len(read_rows(older.db_path)) == FIRST_ROWS
    _assert_exit(_restore(shell, current, ours, POSITION_WITNESS_FILE=str(witness)), "ok")
    assert len(read_rows(current.db_path)) == ours.rows


def test_without_a_recorded_position_the_age_check_alone_decides(restore_app, ours, tmp_path) -> None:
    """Before the site's first ready rollout (not served yet) the key is absent: said, not refused."""
    app = restore_app(ours)
    absent = tmp_path / "witness" / "position"
    absent.parent.mkdir()
    _assert_exit(_restore(["sh"], app, ours, POSITION_WITNESS_FILE=str(absent)), "ok", "no position recorded")


def _restore_witnessed(app: App, tailnet: Tailnet, position: Path, served: str, **env: str) -> ScriptResult:
    """The restore of ``app`` with its served witness holding ``served`` and its recorded position at ``position``
    (absent: nothing recorded)."""
    assert LITESTREAM is not None
    app.witness(True, value=served)
    witness = {"SERVED_FILE": str(app.served_file), "POSITION_WITNESS_FILE": str(position)}
    extra = {"IDENTITY_FINGERPRINT": tailnet.fingerprint, **witness, **env}
    return run_restore_script(["sh"], LITESTREAM, app, backup_key=tailnet.key, extra_env=extra)


def test_a_served_site_without_a_recorded_position_is_refused_unless_overridden(restore_app, ours, tmp_path) -> None:
    """Served (the witness says so) but no position ever recorded: the recorder could not write it, or the key was
    removed, so a rollback could not be told apart. Refused (exit 44); the dated override restores with a warning."""
    app = restore_app(ours)
    absent = tmp_path / "witness" / "position"
    absent.parent.mkdir()
    _assert_exit(
        _restore_witnessed(app, ours, absent, "true"),
        "stale",
        "no replica position was ever recorded",
        "PositionNotRecorded",
    )
    _assert_nothing_restored(app)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    overridden = _restore_witnessed(app, ours, absent, "true", ALLOW_ROLLBACK_RESTORE=today)
    _assert_exit(overridden, "ok", "WARNING", "holds no recorded position")
    assert len(read_rows(app.db_path)) == ours.rows


def test_a_promoted_standby_restores_without_a_recorded_position(restore_app, ours, tmp_path) -> None:
    """A standby's witness says `standby`: the tailnet has served, this site never has, so no pod of its own ever
    recorded a position. Its first start after a promotion restores on the signature's age alone (the lab's real
    promotion met exactly this: tests/real/test_promotion.py), while a recorded position still holds it to it."""
    app = restore_app(ours)
    position = tmp_path / "witness" / "position"
    position.parent.mkdir()
    _assert_exit(
        _restore_witnessed(app, ours, position, "standby"), "ok", "no position recorded", "a standby's witness"
    )
    assert len(read_rows(app.db_path)) == ours.rows
    again = App(tmp_path / "again").create()
    shutil.copytree(App(ours.root).backup_dir, again.backup_dir)
    position.write_text(f"{int(_manifest_field(again, 'txid'), 16) + 1:016x} {_manifest_field(again, 'signed_at')}")
    _assert_exit(_restore_witnessed(again, ours, position, "standby"), "stale", "rolled back", "served witness")
    _assert_nothing_restored(again)


@pytest.mark.parametrize("value", ["", "123", "ABCDEF0123456789 1", "0123456789abcdef", "0123456789abcdef x"])
def test_a_damaged_recorded_position_is_refused_without_restoring(value: str, restore_app, ours, tmp_path) -> None:
    app = restore_app(ours)
    witness = tmp_path / "position"
    witness.write_text(value + "\n")
    _assert_exit(_restore(["sh"], app, ours, POSITION_WITNESS_FILE=str(witness)), "marker", "does not hold a position")
    _assert_nothing_restored(app)


#: A `sha256sum` that, while the file HOLD exists, holds each call that reads its standard input (the HMAC's, and
#: only the HMAC's: the signer's file digests name their files) until the test removes HOLD; HOLD.held says it is.
HOLDING_SHA256SUM = """#!/bin/sh
if [ "$#" -eq 0 ] && [ -e "$HOLD" ]; then
    : >"$HOLD.held"
    while [ -e "$HOLD" ]; do sleep 0.05; done
fi
exec "$REAL_SHA256SUM" "$@"
"""


def test_a_manifest_is_whole_when_the_export_is_replaced_under_the_pass(shell, tmp_path) -> None:
    """The export is replaced (a rollback) while a pass computes its HMAC. The signer made its manifest in a temp
    file on the export, header first, and appended the HMAC after: the replaced export got a manifest of one line
    (seen in CI as a manifest with no `signed_at`). Now the manifest is made whole in the pod's work directory and
    reaches the export in one write and a rename, so what the pass leaves is a manifest the verifier accepts."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    key = write_backup_key(tmp_path / "key")
    insert_rows(app.db_path, 20)
    with replicating(LITESTREAM, app, tmp_path / "replicate.log"):
        assert wait_until(lambda: newest_txid(LITESTREAM, app.replica_dir) > 0, timeout=20)
    snapshot = tmp_path / "snapshot"
    shutil.copytree(app.backup_dir, snapshot)
    shims, hold = tmp_path / "shims", tmp_path / "hold"
    shims.mkdir()
    (shims / "sha256sum").write_text(HOLDING_SHA256SUM)
    (shims / "sha256sum").chmod(0o755)
    hold.touch()
    real = shutil.which("sha256sum")
    assert real is not None
    env = manifest_env(app, key, HOLD=str(hold), REAL_SHA256SUM=real)
    env["PATH"] = f"{shims}:{env['PATH']}"
    with (tmp_path / "sign.log").open("wb") as log:
        signer = subprocess.Popen([*shell, str(SIGN_SCRIPT), "sign"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: Path(f"{hold}.held").exists(), timeout=60), (tmp_path / "sign.log").read_text()
        shutil.rmtree(app.backup_dir)
        shutil.copytree(snapshot, app.backup_dir)
        hold.unlink()
        assert signer.wait(timeout=60) == 0, (tmp_path / "sign.log").read_text()
    finally:
        if signer.poll() is None:
            signer.kill()
    lines = app.manifest.read_text().splitlines()
    assert lines[0] == "headscale-ha-replica-manifest 1", lines[:3]
    assert [line.split()[0] for line in lines[1:5]] == ["app", "signed_at", "txid", "files"]
    assert lines[-1].startswith("hmac ")
    verified = run_manifest_script(shell, "verify", manifest_env(app, key, COPY_DIR=str(tmp_path / "copy")))
    assert verified.returncode == 0, verified.stderr


def test_the_signer_hands_over_its_highest_position_and_never_lowers_it(shell, tmp_path) -> None:
    """The signer writes the position it signed for the recorder; when the export is rolled back under the running
    pod, it signs what is there but keeps handing over the higher position, so the rollback is never recorded as
    the writer's position, and a later restore refuses it."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    key = write_backup_key(tmp_path / "key")
    position = tmp_path / "run" / "position"
    position.parent.mkdir()
    insert_rows(app.db_path, 20)
    env = manifest_env(app, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1", POSITION_FILE=str(position))

    def handed_over() -> str:
        return position.read_text() if position.is_file() else ""

    with signing(shell, env, tmp_path / "sign.log"):
        with replicating(LITESTREAM, app, tmp_path / "replicate.log"):
            assert wait_until(lambda: manifest_txid(app) > 0 and handed_over(), timeout=20)
            snapshot = tmp_path / "snapshot"
            shutil.copytree(app.backup_dir, snapshot)
            # What the copy holds, not what the signer had signed when it was read: Litestream may have shipped a
            # file the signer signs a tick later, and the rollback brings that file back.
            before = newest_txid(LITESTREAM, snapshot / app.replica_dir.relative_to(app.backup_dir))
            insert_rows(app.db_path, 30)
            assert wait_until(
                lambda: manifest_txid(app) == newest_txid(LITESTREAM, app.replica_dir) > before, timeout=20
            )
        # Litestream stopped with its tail shipped; the signer signs it and hands it over.
        newest = newest_txid(LITESTREAM, app.replica_dir)
        assert wait_until(lambda: handed_over().split()[0] == f"{newest:016x}", timeout=10)
        recorded = handed_over()
        assert abs(int(recorded.split()[1]) - time.time()) < 60
        # The export rolled back under the running signer (nothing repairs it while Litestream is stopped).
        signed_at = int(_manifest_field(app, "signed_at"))
        shutil.rmtree(app.backup_dir)
        shutil.copytree(snapshot, app.backup_dir)

        # A pass that began before the rollback may still write its manifest after it (with a later signed_at): on
        # a loaded machine that took longer than the copy once. What the signer must do is sign what is there.
        def signs_what_is_there() -> bool:
            fresh = app.manifest.is_file() and int(_manifest_field(app, "signed_at")) > signed_at
            return fresh and manifest_txid(app) == before

        assert wait_until(signs_what_is_there, timeout=20), "it signs what is there"
        assert before < newest
        time.sleep(1)
        assert handed_over() == recorded, "the rolled-back position is never handed over as the writer's"
    witness = tmp_path / "witness"
    witness.write_text(recorded)
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    (app.backup_dir / "identity.sha256").write_text("0" * 64 + "\n")
    tailnet = Tailnet(tmp_path, key, "0" * 64, 20, None)
    _assert_exit(_restore(["sh"], app, tailnet, POSITION_WITNESS_FILE=str(witness)), "stale", "rolled back")


# --- the signer ----------------------------------------------------------------------------------------------


def test_the_signer_signs_the_tail_on_sigterm(shell, tmp_path) -> None:
    """A graceful stop: Litestream ships its tail on SIGTERM, the signer (stopped after it) signs it."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    key = write_backup_key(tmp_path / "key")
    insert_rows(app.db_path, 20)
    env = manifest_env(app, key, TERM_SETTLE_SECONDS="2")
    with signing(shell, env, tmp_path / "sign.log") as signer:
        with replicating(LITESTREAM, app, tmp_path / "replicate.log"):
            assert wait_until(lambda: manifest_txid(app) > 0, timeout=20)
            insert_rows(app.db_path, 30)
        # litestream stopped (TERM) with the rows shipped; now the signer, as the kubelet stops sidecars in reverse
        stopped: dict[str, Any] = {}
        signer.terminate()
        stopped["rc"] = signer.wait(timeout=30)
    assert stopped["rc"] == 0, (tmp_path / "sign.log").read_text()
    assert manifest_txid(app) == newest_txid(LITESTREAM, app.replica_dir)
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    (app.backup_dir / "identity.sha256").write_text("0" * 64 + "\n")
    tailnet = Tailnet(tmp_path, key, "0" * 64, 50, None)
    _assert_exit(_restore(["sh"], app, tailnet), "ok")
    assert len(read_rows(app.db_path)) == 50


def test_the_manifest_binds_every_file_it_lists(ours) -> None:
    app = App(ours.root)
    lines = [line.split() for line in app.manifest.read_text().splitlines() if line.startswith("f ")]
    assert lines
    for _, level, name, size, digest in lines:
        path = app.replica_dir / "ltx" / level / name
        if path.exists():
            assert int(size) == path.stat().st_size
            assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert app.manifest.read_text().splitlines()[-1].startswith("hmac ")


# --- the rehearsal verifies the same way -----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["good", "unsigned", "forged", "swapped"])
def test_the_rehearsal_verifies_like_the_restore(restore_app, ours, theirs, tmp_path, case) -> None:
    assert LITESTREAM is not None
    app = restore_app(theirs if case == "forged" else ours)
    if case == "unsigned":
        app.manifest.unlink()
    if case == "swapped":
        swapped = sorted((app.replica_dir / "ltx" / "0").glob("*.ltx"))[-1]
        shutil.copyfile(App(theirs.root).replica_dir / "ltx" / "0" / swapped.name, swapped)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = run_rehearsal_script(
        ["sh"],
        LITESTREAM,
        replica_dir=app.replica_dir,
        scratch_dir=scratch,
        max_age_seconds=86400,
        app="app",
        extra_env={"BACKUP_KEY_FILE": str(ours.key), "MANIFEST_SCRIPT": str(MANIFEST_SCRIPT)},
    )
    output = result.stdout + result.stderr
    if case == "good":
        assert result.returncode == 0, output
        assert "restore rehearsal ok" in result.stdout
        assert "manifest verified" in result.stderr
    else:
        code = {"unsigned": 40, "forged": 41, "swapped": 43}[case]
        assert result.returncode == 55, output
        assert f"refused it with exit {code}" in output
    assert list(scratch.iterdir()) == []


@pytest.mark.real_tool("busybox")
def test_signing_and_verifying_need_only_busybox(restore_app, ours, tmp_path) -> None:
    """The Litestream image has busybox applets only: sign and verify with nothing else on PATH."""
    app = restore_app(ours)
    bb = shell_for(["busybox", "sh"], tmp_path / "bin")
    assert bb.path is not None
    env = manifest_env(app, ours.key) | {"PATH": bb.path}
    signed = run_manifest_script(bb.argv, "sign", env)
    assert signed.returncode == 0, signed.stderr
    verified = run_manifest_script(bb.argv, "verify", env | {"COPY_DIR": str(tmp_path / "copy")})
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"txid={_manifest_field(app, 'txid')} ")
    # The copy holds what the restore needs: the newest snapshot and every file that ends after it.
    files = replica_files(app)
    snapshot = max(name for level, name in files if level == 9)
    needed = [(9, snapshot)] + [(level, name) for level, name in files if level < 9 and name[17:] > snapshot[17:]]
    copied = sorted((int(p.parent.name), p.name) for p in (tmp_path / "copy").rglob("*.ltx"))
    assert copied == sorted(needed)
    assert len(copied) < len(files), "older snapshots and what they supersede stay out"
