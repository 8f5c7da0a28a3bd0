"""The proof of a compaction or snapshot (components/scripts/litestream-sign.sh): the real Litestream 0.5.17, the real
signer and the real restore script.

Litestream writes levels 1-9 straight to the export, so a file there with the right name and header proves nothing
about who wrote it. An export writer with the LTX library crafts one inside the range the writer has reached (here: a
level-1 file named for the transactions that deleted a row, holding only the last one's pages, resealed so that
Litestream reads it as valid). Before the proof the signer signed it and the next restore brought the deleted row
back; the signer now signs a file of levels 1-9 only when restoring through it gives the database its own files give.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.support.litestream_lab import (
    App,
    insert_rows,
    litestream_bin,
    manifest_env,
    manifest_txid,
    read_rows,
    replicate_app_once,
    replicating,
    run_manifest_script,
    signing,
    wait_until,
    write_backup_key,
)
from tests.support.ltx_attack import (
    ltx_name,
    manifest_files,
    next_pod,
    plant,
    signed_restore,
    with_header_range,
)

LITESTREAM = litestream_bin()
ROWS = 30

pytestmark = pytest.mark.real_tool("litestream")


def _compacting_pod(tmp_path: Path) -> App:
    """A Headscale pod whose Litestream compacts into level 1 every second (the default is every 30 s)."""
    app = App(tmp_path / "pod", name="headscale").create()
    app.config.write_text(app.config.read_text().replace("snapshot:\n", "levels:\n  - interval: 1s\nsnapshot:\n"))
    return app


def _delete_row(db: Path, row_id: int) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("DELETE FROM rows WHERE id = ?", (row_id,))
    finally:
        conn.close()


def _level0(app: App) -> list[tuple[int, int]]:
    return sorted((int(p.name[:16], 16), int(p.name[17:33], 16)) for p in app.replica_dir.glob("ltx/0/*.ltx"))


@pytest.mark.parametrize("app_name", ["headscale", "headplane"])
def test_a_crafted_compaction_inside_the_written_range_is_never_signed(app_name: str, tmp_path: Path) -> None:
    """Row 1 is deleted in its own transaction (one level-0 file each, written by this pod's Litestream); the
    attacker's level-1 file names the range from that deletion to a later insert but holds only the insert's pages.
    The signer refuses it (restoring through it keeps row 1), the manifest never lists it and the next restore has
    no row 1."""
    assert LITESTREAM is not None
    app = App(tmp_path / "pod", name=app_name).create()
    key = write_backup_key(tmp_path / "backup.key")
    # Rows of 1 KB: row 1's page is not the page the last insert writes (a level-0 file holds the changed pages).
    insert_rows(app.db_path, ROWS, pad=1000)
    with replicating(LITESTREAM, app, tmp_path / "replicate.log"):
        # Litestream's snapshot at start comes first: the crafted range then lies after it, where a restore reads it.
        assert wait_until(lambda: any(app.replica_dir.glob("ltx/9/*.ltx")), timeout=20)
        for change in (lambda: _delete_row(app.db_path, 1), lambda: insert_rows(app.db_path, 1)):
            shipped = len(_level0(app))
            change()
            assert wait_until(lambda n=shipped: len(_level0(app)) > n, timeout=20)
    (deleted_at, _), (inserted_at, _) = _level0(app)[-2:]
    assert inserted_at == deleted_at + 1
    crafted = with_header_range(
        app.replica_dir / "ltx" / "0" / ltx_name(inserted_at, inserted_at),
        tmp_path / "crafted.ltx",
        deleted_at,
        inserted_at,
    )
    crafted_name = ltx_name(deleted_at, inserted_at)
    plant(crafted, app, 1, crafted_name)

    signed = run_manifest_script(["sh"], "sign", manifest_env(app, key))
    assert signed.returncode == 0, signed.stderr
    assert f"NOT SIGNING '{app.replica_dir / 'ltx' / '1' / crafted_name}'" in signed.stderr
    assert "gives another database than this writer's own files give" in signed.stderr
    assert (1, crafted_name) not in manifest_files(app)
    assert manifest_txid(app) == inserted_at

    restored = next_pod(app, tmp_path / "next")
    result = signed_restore(restored, key)
    assert result.returncode == 0, result.stderr
    ids = [row_id for row_id, _ in read_rows(restored.db_path)]
    assert 1 not in ids
    assert len(ids) == ROWS


def test_litestream_compactions_and_snapshots_are_proven_and_restore(tmp_path: Path) -> None:
    """With a level-1 compaction every second, the running signer proves and signs Litestream's own compactions and
    its snapshot (no refusal), and a restore from what it signed holds every row."""
    assert LITESTREAM is not None
    app = _compacting_pod(tmp_path)
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(app.db_path, ROWS)
    env = manifest_env(app, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1")
    written = ROWS
    with signing(["sh"], env, tmp_path / "sign.log"), replicating(LITESTREAM, app, tmp_path / "replicate.log"):
        for _ in range(6):
            insert_rows(app.db_path, 5)
            written += 5
            time.sleep(1.2)

        def compactions_signed() -> bool:
            files = manifest_files(app)
            return sum(1 for level, _ in files if level == 1) >= 2 and any(level == 9 for level, _ in files)

        assert wait_until(compactions_signed, timeout=30), (tmp_path / "sign.log").read_text()
    log = (tmp_path / "sign.log").read_text()
    assert "NOT SIGNING" not in log, log
    # The signer's mirror holds the newest signed snapshot and what follows it, nothing older.
    mirror = tmp_path / "pod" / "signer-scratch" / "mirror" / "ltx"
    snapshots = sorted(p.name for p in mirror.glob("9/*.ltx"))
    assert len(snapshots) == 1
    assert (9, snapshots[0]) in manifest_files(app)
    snapshot_top = int(snapshots[0][17:33], 16)
    rest = [(int(p.parent.name), int(p.name[:16], 16), int(p.name[17:33], 16)) for p in mirror.glob("[0-8]/*.ltx")]
    assert all(top > snapshot_top for _, _, top in rest)
    # Nor a file a compaction it proved covers, but those of the last one proved (dropped at the next proof): the
    # level-0 files a level-1 file replaced leave it.
    covered = {(lv, lo, hi) for lv, lo, hi in rest for lv2, lo2, hi2 in rest if lv2 > lv and lo2 <= lo and hi <= hi2}
    last = max((entry for entry in rest if entry[0] >= 1), key=lambda entry: entry[2])
    assert all(last[1] <= lo and hi <= last[2] for _, lo, hi in covered), (covered, last)

    restored = next_pod(app, tmp_path / "next")
    result = signed_restore(restored, key)
    assert result.returncode == 0, result.stderr
    assert len(read_rows(restored.db_path)) == written


def test_a_compaction_the_signed_snapshot_covers_is_not_signed_and_not_reported(tmp_path: Path) -> None:
    """Below the newest signed snapshot no restore reads a compaction: it is left unsigned, without a warning."""
    assert LITESTREAM is not None
    app = App(tmp_path / "pod", name="headscale").create()
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(app.db_path, ROWS)
    replicate_app_once(LITESTREAM, app)
    insert_rows(app.db_path, 3)
    replicate_app_once(LITESTREAM, app, "-force-snapshot")
    top = _level0(app)[-1][1]
    snapshots = sorted(app.replica_dir.glob("ltx/9/*.ltx"))
    assert snapshots, sorted(app.replica_dir.rglob("*.ltx"))
    assert int(snapshots[-1].name[17:33], 16) == top
    # A level-1 file below the snapshot, Litestream's own content (the first level-0 file, named as it is).
    first = app.replica_dir / "ltx" / "0" / ltx_name(1, _level0(app)[0][1])
    covered = plant(first, app, 1, first.name)

    signed = run_manifest_script(["sh"], "sign", manifest_env(app, key))
    assert signed.returncode == 0, signed.stderr
    assert (1, covered.name) not in manifest_files(app)
    assert (9, snapshots[-1].name) in manifest_files(app)
    assert "NOT SIGNING" not in signed.stderr, signed.stderr


def test_the_running_signer_signs_level_0_files_while_it_proves(tmp_path: Path) -> None:
    """Proofs run beside the signing: while every restore of a proof is held (a gate the test opens), the level-0
    files Litestream ships are still signed (a proof never delays them, so it costs no RPO), and the compaction is
    signed once the gate opens."""
    assert LITESTREAM is not None
    gate = tmp_path / "open"
    held = tmp_path / "held"
    gated = tmp_path / "gated-litestream"
    gated.write_text(
        f'#!/bin/sh\nif [ "$1" = restore ]; then\n  : >"{held}"\n  while [ ! -e "{gate}" ]; do sleep 0.1; done\nfi\n'
        f'exec {LITESTREAM} "$@"\n'
    )
    gated.chmod(0o755)
    app = _compacting_pod(tmp_path)
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(app.db_path, ROWS)
    env = manifest_env(app, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1", LITESTREAM_BIN=str(gated))
    with signing(["sh"], env, tmp_path / "sign.log"), replicating(LITESTREAM, app, tmp_path / "replicate.log"):
        assert wait_until(held.exists, timeout=20), "no proof started"
        for _ in range(3):
            before = len(_level0(app))
            insert_rows(app.db_path, 1)
            assert wait_until(lambda n=before: len(_level0(app)) > n, timeout=10)
            shipped = _level0(app)[-1][1]
            assert wait_until(lambda top=shipped: manifest_txid(app) >= top, timeout=20), "blocked by the proof"
        assert not any(level in (1, 9) for level, _ in manifest_files(app)), "nothing proven while the gate is shut"
        gate.touch()
        assert wait_until(lambda: any(level == 1 for level, _ in manifest_files(app)), timeout=60)
    assert "NOT SIGNING" not in (tmp_path / "sign.log").read_text()
