"""The script bugs of issue 37 (item 6), each against the real scripts and a replica the real Litestream wrote:
TXIDs compared as unsigned 64-bit numbers, a signature from the future, what is not a regular file at a signed or
an LTX name, and the write gate that must count only the writer's own shipped file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.litestream_lab import (
    App,
    insert_rows,
    litestream_bin,
    manifest_env,
    position_check,
    replicate_app_once,
    run_manifest_script,
    run_restore_script,
    write_backup_key,
)
from tests.support.ltx_attack import ltx_name, manifest_files, plant, replica_files, write_signed_manifest
from tests.support.script_checks import SHELLS, shell_for

LITESTREAM = litestream_bin()
#: Above 2^63: a negative number in shell arithmetic.
HIGH = "8000000000000000"

pytestmark = pytest.mark.real_tool("litestream")


@pytest.fixture
def signed(tmp_path: Path) -> tuple[App, Path]:
    """A replica of a small database written by the real Litestream, signed by a holder of the key."""
    assert LITESTREAM is not None
    app = App(tmp_path / "pod").create()
    insert_rows(app.db_path, 5)
    replicate_app_once(LITESTREAM, app)
    key = write_backup_key(tmp_path / "backup.key")
    write_signed_manifest(app, key)
    return app, key


def _verify(
    app: App, key: Path, tmp_path: Path, shell: list[str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    copy = tmp_path / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    argv, variables = ["sh"], manifest_env(app, key, COPY_DIR=str(copy), **env)
    if shell is not None:
        chosen = shell_for(shell, tmp_path / "bin")
        argv = chosen.argv
        variables |= {"PATH": chosen.path} if chosen.path else {}
    result = run_manifest_script(argv, "verify", variables, timeout=30)
    return subprocess.CompletedProcess([], result.returncode, result.stdout, result.stderr)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("minimum", "signed_at"),
    [
        # busybox ash wraps 0x8000000000000000 to a negative number: a small position passed the minimum.
        (HIGH, None),
        # dash saturates both to 2^63 - 1: a position above 2^63 passed a higher minimum as "equal".
        ("ffffffffffffffff", "8000000000000001"),
    ],
)
def test_positions_above_2_63_are_compared_unsigned(signed, tmp_path, shell, minimum, signed_at) -> None:
    """A recorded position above the signed one is a rollback, whatever the shell's arithmetic does with it."""
    app, key = signed
    if signed_at is not None:
        # A holder of the key signs files at that position (copies at the high name; the position is checked before
        # any file is read).
        source = app.replica_dir / "ltx" / "0" / replica_files(app)[0][1]
        txid = int(signed_at, 16)
        plant(source, app, 0, ltx_name(txid, txid))
        write_signed_manifest(app, key)
    refused = _verify(app, key, tmp_path, shell, MIN_TXID=minimum)
    assert refused.returncode == 44, refused.stderr
    assert f"below the position {minimum}" in refused.stderr
    below = _verify(app, key, tmp_path, shell, MIN_TXID="0000000000000001")
    # Past the position check; the copies at the high name are then refused for their headers.
    assert below.returncode == (0 if signed_at is None else 43), below.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_a_witness_position_above_2_63_refuses_the_restore(signed, tmp_path, shell) -> None:
    """The served witness's recorded position is compared the same way by the restore."""
    assert LITESTREAM is not None
    app, key = signed
    shutil.move(app.db_path, tmp_path / "old.sqlite")
    witness = tmp_path / "witness" / "position"
    witness.parent.mkdir()
    witness.write_text(f"{HIGH} {int(time.time())}")
    # A lower local record too: the restore picks the higher of the two, which is where the sign went wrong.
    (app.data_dir / ".backup-position").write_text("0000000000000001\n")
    env = {"POSITION_WITNESS_FILE": str(witness)}
    result = run_restore_script(shell, LITESTREAM, app, backup_key=key, extra_env=env)
    assert result.returncode == 44, result.stderr
    assert "served witness" in result.stderr


@pytest.mark.parametrize(("ahead", "code"), [(3600, 44), (60, 0)])
def test_a_signature_from_the_future_is_refused_beyond_the_clock_skew(signed, tmp_path, ahead, code) -> None:
    """A signed_at an hour ahead would never age past maxAge; a minute ahead is clock skew."""
    app, key = signed
    write_signed_manifest(app, key, signed_at=int(time.time()) + ahead)
    result = _verify(app, key, tmp_path, MAX_AGE_SECONDS="86400")
    assert result.returncode == code, result.stderr
    if code:
        assert "in the future" in result.stderr


def test_a_fifo_at_a_signed_name_is_refused_not_waited_for(signed, tmp_path) -> None:
    """A FIFO swapped in at a signed file's name: refused with its own code at once (a read would block for ever)."""
    app, key = signed
    level, name = replica_files(app)[-1]
    target = app.replica_dir / "ltx" / str(level) / name
    target.unlink()
    os.mkfifo(target)
    started = time.monotonic()
    result = _verify(app, key, tmp_path)
    assert result.returncode == 47, result.stderr
    assert "not a regular file" in result.stderr
    assert time.monotonic() - started < 20


def test_the_signer_skips_a_fifo_at_an_ltx_name(signed, tmp_path) -> None:
    """A FIFO planted at an unsigned LTX name is refused unread: the signer neither hangs nor lists it."""
    app, key = signed
    fifo = app.replica_dir / "ltx" / "0" / ltx_name(90, 90)
    os.mkfifo(fifo)
    result = run_manifest_script(["sh"], "sign", manifest_env(app, key), timeout=20)
    assert result.returncode == 0, result.stderr
    assert f"NOT SIGNING '{fifo}': it is not a regular file" in result.stderr
    assert manifest_files(app) == [entry for entry in replica_files(app) if entry != (0, fifo.name)]


def test_the_write_gate_counts_only_the_writers_own_shipped_file(signed, tmp_path) -> None:
    """After a restore the application waits until the replica holds Litestream's newest local file. A file
    planted at a higher position does not count; the same name with other bytes does not either."""
    app, _ = signed
    local = app.data_dir / ".app.sqlite-litestream" / "ltx" / "0"
    newest = max(local.glob("*.ltx"))
    (app.data_dir / ".litestream-catch-up").write_text("restored\n")
    shipped = app.replica_dir / "ltx" / "0" / newest.name
    original = shipped.read_bytes()
    assert position_check(["sh"], app, "caught-up").returncode == 0
    (app.data_dir / ".litestream-catch-up").write_text("restored\n")
    shipped.unlink()
    plant(newest, app, 0, ltx_name(0xFFFFF, 0xFFFFF))
    assert position_check(["sh"], app, "caught-up").returncode == 1, "a planted higher name is not the write"
    shipped.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert position_check(["sh"], app, "caught-up").returncode == 1, "other bytes under the name are not the write"
    shipped.write_bytes(original)
    assert position_check(["sh"], app, "caught-up").returncode == 0
    assert not (app.data_dir / ".litestream-catch-up").exists()
