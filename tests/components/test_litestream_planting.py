"""An NFS export writer without the key against the running pod: the real Litestream, the real signer
(components/scripts/litestream-manifest.sh run) and the real restore script.

The attacks of issue 37: a foreign LTX file, or an old legitimate snapshot, renamed into the replica at a newer
position (Litestream takes a file's TXID range from its name), and unsigned files planted just above the signed
position or far above it, which Litestream would take as the replica's position. The signer must never sign them,
the restore must never hand them to Litestream, and replication and the next restore must go on.
"""

from __future__ import annotations

import datetime
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.litestream_lab import (
    App,
    insert_rows,
    litestream_bin,
    manifest_env,
    manifest_txid,
    read_rows,
    replica_row_count,
    replicate_once,
    replicating,
    run_manifest_script,
    signing,
    wait_until,
    write_backup_key,
)
from tests.support.ltx_attack import (
    foreign_snapshot,
    header_range,
    ltx_name,
    manifest_files,
    next_pod,
    plant,
    signed_restore,
    with_header_range,
    write_signed_manifest,
)

LITESTREAM = litestream_bin()
FIRST_ROWS, ROWS, MORE_ROWS = 20, 60, 25
#: A far position: Litestream would wait for the database to pass it before shipping anything again.
FAR = 0x7FFFFFFFFFFFFF00

pytestmark = pytest.mark.real_tool("litestream")


@contextmanager
def running_pod(app: App, key: Path, logs: Path) -> Iterator[None]:
    """The pod's two sidecars: the signer (started first, stopped last) and Litestream."""
    assert LITESTREAM is not None
    env = manifest_env(app, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1")
    with signing(["sh"], env, logs / "sign.log"), replicating(LITESTREAM, app, logs / "replicate.log"):
        yield


def _signed(app: App, rows: int, scratch: Path) -> bool:
    """The replica restores ``rows`` rows and the manifest covers its newest level-0 position."""
    assert LITESTREAM is not None
    newest_l0 = max((int(p.name[17:33], 16) for p in app.replica_dir.glob("ltx/0/*.ltx")), default=0)
    return replica_row_count(LITESTREAM, app, scratch) == rows and manifest_txid(app) >= newest_l0 > 0


def _stopped_pod(tmp_path: Path, name: str, rows: int) -> tuple[App, Path]:
    """A Headscale pod (under ``tmp_path/name``) that wrote ``rows`` rows, had them replicated and signed, and
    stopped; with the tailnet's key."""
    pod = App(tmp_path / name, name="headscale").create()
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(pod.db_path, rows)
    with running_pod(pod, key, tmp_path / name):
        assert wait_until(lambda: _signed(pod, rows, tmp_path), timeout=20)
    return pod, key


def _far_file(tmp_path: Path) -> Path:
    """A foreign database's LTX file whose header names FAR-FAR, as a careful attacker crafts it."""
    assert LITESTREAM is not None
    foreign = foreign_snapshot(LITESTREAM, tmp_path / "attacker", 3)
    return with_header_range(foreign, tmp_path / "far.ltx", FAR, FAR)


def _quarantined(app: App, level: int, name: str) -> list[Path]:
    return list(app.backup_dir.glob(f"quarantine/*/ltx/{level}/{name}"))


@pytest.mark.parametrize("app_name", ["headscale", "headplane"])
@pytest.mark.parametrize("source", ["foreign", "older"])
def test_a_snapshot_renamed_to_a_newer_position_is_never_signed_nor_served(
    app_name: str, source: str, tmp_path: Path
) -> None:
    """Step 1-3 of the issue: the planted file is named ``ltx/9/<1>-<fffff>.ltx``. The running signer refuses it (its
    header names another range), the manifest never lists it, the next restore serves the writer's rows and moves
    the planted file aside; a manifest that lists it (a signer before this rule signed it) is refused."""
    assert LITESTREAM is not None
    pod = App(tmp_path / "pod", name=app_name).create()
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(pod.db_path, FIRST_ROWS)
    planted_name = ltx_name(1, 0xFFFFF)
    with running_pod(pod, key, tmp_path):
        assert wait_until(lambda: _signed(pod, FIRST_ROWS, tmp_path), timeout=20), (tmp_path / "sign.log").read_text()
        assert wait_until(lambda: any(pod.replica_dir.glob("ltx/9/*.ltx")), timeout=20), "no snapshot at start"
        older = shutil.copy(sorted(pod.replica_dir.glob("ltx/9/*.ltx"))[-1], tmp_path / "older-snapshot.ltx")
        insert_rows(pod.db_path, ROWS - FIRST_ROWS)
        assert wait_until(lambda: _signed(pod, ROWS, tmp_path), timeout=20)
        planted_from = foreign_snapshot(LITESTREAM, tmp_path / "attacker", 7) if source == "foreign" else Path(older)
        planted = plant(planted_from, pod, 9, planted_name)
        sign_log = tmp_path / "sign.log"
        # A few signer ticks (the refusal is logged at the first one).
        wait_until(lambda: f"NOT SIGNING '{planted}'" in sign_log.read_text(), timeout=5)
        assert (9, planted_name) not in manifest_files(pod)
        assert "LTX header does not name the TXID range" in sign_log.read_text()
    assert (9, planted_name) not in manifest_files(pod)
    assert manifest_txid(pod) < 0xFFFFF

    restored = next_pod(pod, tmp_path / "next")
    result = signed_restore(restored, key)
    assert result.returncode == 0, result.stderr
    assert len(read_rows(restored.db_path)) == ROWS
    assert not (restored.replica_dir / "ltx" / "9" / planted_name).exists()
    assert _quarantined(restored, 9, planted_name), result.stderr

    # The same replica signed whole by a holder of the key (a signer before the rule): the header check refuses it.
    signed_whole = next_pod(pod, tmp_path / "signed-whole")
    write_signed_manifest(signed_whole, key)
    refused = signed_restore(signed_whole, key)
    assert refused.returncode == 43, refused.stderr
    assert "does not name the TXID range of its name" in refused.stderr
    assert not signed_whole.db_path.exists()


@pytest.mark.parametrize("position", ["next", "far"])
def test_an_unsigned_file_above_the_position_stops_neither_replication_nor_the_next_restore(
    position: str, tmp_path: Path
) -> None:
    """An unsigned level-0 file at the signed TXID + 1 (or far above it) on the export. The restore moves it aside
    before Litestream starts, Litestream ships what the restored database writes, the signer signs it, and the next
    restore holds every row."""
    assert LITESTREAM is not None
    first, key = _stopped_pod(tmp_path, "first", ROWS)
    signed = manifest_txid(first)
    txid = signed + 1 if position == "next" else FAR
    planted_name = ltx_name(txid, txid)
    plant(foreign_snapshot(LITESTREAM, tmp_path / "attacker", 7), first, 0, planted_name)

    second = next_pod(first, tmp_path / "second")
    result = signed_restore(second, key)
    assert result.returncode == 0, result.stderr
    assert len(read_rows(second.db_path)) == ROWS
    with running_pod(second, key, tmp_path / "second"):
        insert_rows(second.db_path, MORE_ROWS)
        shipped = wait_until(lambda: _signed(second, ROWS + MORE_ROWS, tmp_path), timeout=30)
        assert shipped, (tmp_path / "second" / "replicate.log").read_text()
    assert manifest_txid(second) > signed
    assert "cannot verify wal state" not in (tmp_path / "second" / "replicate.log").read_text()

    third = next_pod(second, tmp_path / "third")
    again = signed_restore(third, key)
    assert again.returncode == 0, again.stderr
    assert len(read_rows(third.db_path)) == ROWS + MORE_ROWS
    # The planted file is kept for inspection, out of Litestream's way.
    assert _quarantined(second, 0, planted_name), result.stderr


def test_the_signer_signs_a_level_0_file_only_when_it_is_this_writers_own(tmp_path: Path) -> None:
    """A level-0 file with a correct header at the next position, which Litestream did not write (no identical local
    copy), is refused; a compaction beyond every position the writer reached is refused too."""
    assert LITESTREAM is not None
    pod = App(tmp_path / "pod", name="headscale").create()
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(pod.db_path, FIRST_ROWS)
    with running_pod(pod, key, tmp_path):
        assert wait_until(lambda: _signed(pod, FIRST_ROWS, tmp_path), timeout=20)
        head = manifest_txid(pod)
        # A foreign file rewritten to a correct header at head + 1 (what a careful attacker crafts).
        foreign = foreign_snapshot(LITESTREAM, tmp_path / "attacker", 3)
        crafted = with_header_range(foreign, tmp_path / "crafted.ltx", head + 1, head + 1)
        level0 = plant(crafted, pod, 0, ltx_name(head + 1, head + 1))
        beyond = plant(
            with_header_range(foreign, tmp_path / "beyond.ltx", 1, head + 50), pod, 1, ltx_name(1, head + 50)
        )
        assert header_range(beyond) == (1, head + 50)
        log = tmp_path / "sign.log"
        for planted in (level0, beyond):
            refused = f"NOT SIGNING '{planted}'"
            assert wait_until(lambda refused=refused: refused in log.read_text(), timeout=10), log.read_text()
        assert "no identical local copy" in log.read_text()
        assert "ends beyond every position this writer wrote" in log.read_text()
        assert (0, level0.name) not in manifest_files(pod)
        assert (1, beyond.name) not in manifest_files(pod)
        assert manifest_txid(pod) == head


def test_the_documented_downgrade_restores_the_pre_upgrade_snapshot_and_is_signed_again(tmp_path: Path) -> None:
    """docs/upgrades.md's way back, step by step with the real tools: the replica and its manifest moved aside, a
    new replica seeded from the pre-upgrade snapshot with `litestream replicate -once`, then the restore under
    `allowUnsigned` (no manifest yet) restores it and hands its files to the signer, which signs them; the position
    the newer state recorded refuses the next restore until `allowRollback` of the day (or the recorder's next
    record)."""
    assert LITESTREAM is not None
    newer, key = _stopped_pod(tmp_path, "newer", ROWS)
    recorded = f"{manifest_txid(newer) + 40:016x} {int(time.time())}"  # the newer state's recorded position
    # The pre-upgrade snapshot: the database as it was before the upgrade (fewer rows).
    snapshot = tmp_path / "pre-upgrade" / "headscale.sqlite"
    snapshot.parent.mkdir()
    insert_rows(snapshot, FIRST_ROWS)
    # Steps 2-3: move the replica and its manifest aside, seed a new replica from a copy of the snapshot.
    pod = next_pod(newer, tmp_path / "pod")
    aside = pod.backup_dir / "before-downgrade"
    aside.mkdir()
    shutil.move(pod.replica_dir, aside / "replica")
    shutil.move(pod.manifest, aside / "replica.manifest")
    seed = tmp_path / "seed" / "restore.sqlite"
    seed.parent.mkdir()
    shutil.copyfile(snapshot, seed)
    replicate_once(LITESTREAM, seed, pod.replica_dir)
    witness = tmp_path / "witness" / "position"
    witness.parent.mkdir()
    witness.write_text(recorded)
    env = {"POSITION_WITNESS_FILE": str(witness)}
    # Without the override: no manifest (40).
    assert signed_restore(pod, key, **env).returncode == 40
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    restored = signed_restore(pod, key, ALLOW_UNSIGNED_RESTORE=today, **env)
    assert restored.returncode == 0, restored.stderr
    assert len(read_rows(pod.db_path)) == FIRST_ROWS
    # The signer takes the restored files from the restore's baseline and signs them (no local copies: the seed's
    # are elsewhere).
    signed = run_manifest_script(["sh"], "sign", manifest_env(pod, key))
    assert signed.returncode == 0, signed.stderr
    assert manifest_files(pod) == sorted((int(p.parent.name), p.name) for p in pod.replica_dir.glob("ltx/[0-9]/*.ltx"))
    # The next restore: the newer state's recorded position is above the new replica's, so a rollback (44) ...
    again = next_pod(pod, tmp_path / "again")
    refused = signed_restore(again, key, **env)
    assert refused.returncode == 44, refused.stderr
    # ... until allowRollback of the day (or the recorder's first record of the new position).
    accepted = signed_restore(again, key, ALLOW_ROLLBACK_RESTORE=today, **env)
    assert accepted.returncode == 0, accepted.stderr
    assert len(read_rows(again.db_path)) == FIRST_ROWS


def test_a_stray_level_0_file_planted_under_the_running_pod_is_moved_aside_by_the_signer(tmp_path: Path) -> None:
    """Litestream reads the replica's position from its highest level-0 name when it (re)starts (and fetches that
    file as its baseline when its database is behind). A file planted far above the signed position while the pod
    runs is moved aside by the signer at its next tick, so a restart of the Litestream sidecar alone (no restore
    runs then) neither fetches it nor stops shipping."""
    assert LITESTREAM is not None
    pod = App(tmp_path / "pod", name="headscale").create()
    key = write_backup_key(tmp_path / "backup.key")
    insert_rows(pod.db_path, FIRST_ROWS)
    env = manifest_env(pod, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1")
    with signing(["sh"], env, tmp_path / "sign.log"):
        with replicating(LITESTREAM, pod, tmp_path / "replicate.log"):
            assert wait_until(lambda: _signed(pod, FIRST_ROWS, tmp_path), timeout=20)
            signed = manifest_txid(pod)
            planted = plant(foreign_snapshot(LITESTREAM, tmp_path / "attacker", 3), pod, 0, ltx_name(FAR, FAR))
            assert wait_until(lambda: not planted.exists(), timeout=10), (tmp_path / "sign.log").read_text()
            assert _quarantined(pod, 0, planted.name)
            # The signer logs the move after it: the file may be gone a moment before the line is written.
            moved = wait_until(lambda: "moved the stray level-0 file" in (tmp_path / "sign.log").read_text(), timeout=5)
            assert moved, (tmp_path / "sign.log").read_text()
        # The Litestream sidecar restarts; the signer keeps running.
        with replicating(LITESTREAM, pod, tmp_path / "replicate-again.log"):
            insert_rows(pod.db_path, MORE_ROWS)
            shipped = wait_until(lambda: _signed(pod, FIRST_ROWS + MORE_ROWS, tmp_path), timeout=30)
            assert shipped, (tmp_path / "replicate-again.log").read_text()
    assert signed < manifest_txid(pod) < FAR
    again = next_pod(pod, tmp_path / "again")
    restored = signed_restore(again, key)
    assert restored.returncode == 0, restored.stderr
    assert len(read_rows(again.db_path)) == FIRST_ROWS + MORE_ROWS


def test_a_planted_baseline_litestream_fetched_is_never_signed_nor_recorded(tmp_path: Path) -> None:
    """The race the signer can lose: Litestream starts on a kept database (persistent storage, no restore) before
    the signer's first tick, and fetches a far level-0 file planted while the pod was down as its baseline, so the
    local copy is identical. The signer refuses it (it does not follow the last signed position), and the signed
    position, which the recorder hands to the witness, never jumps to it."""
    assert LITESTREAM is not None
    pod, key = _stopped_pod(tmp_path, "pod", FIRST_ROWS)
    signed = manifest_txid(pod)
    planted = plant(_far_file(tmp_path), pod, 0, ltx_name(FAR, FAR))
    position = tmp_path / "position"
    env = manifest_env(pod, key, SIGN_INTERVAL_SECONDS="0.2", HEARTBEAT_SECONDS="1", POSITION_FILE=str(position))
    local = pod.data_dir / ".app.sqlite-litestream" / "ltx" / "0" / planted.name
    with replicating(LITESTREAM, pod, tmp_path / "replicate.log"):
        assert wait_until(local.exists, timeout=20), (tmp_path / "replicate.log").read_text()
        with signing(["sh"], env, tmp_path / "sign.log"):
            log = tmp_path / "sign.log"
            assert wait_until(lambda: "does not follow the last position" in log.read_text(), timeout=10), (
                log.read_text()
            )
            time.sleep(1)
    assert manifest_txid(pod) == signed
    assert (0, planted.name) not in manifest_files(pod)
    assert int(position.read_text().split()[0], 16) == signed, "the recorder is never handed the planted position"


def test_on_a_kept_volume_the_restore_moves_a_far_file_before_litestream_starts(tmp_path: Path) -> None:
    """Persistent storage: the pod restarts on its own database (the restore serves it untouched). A level-0 file
    planted above the database's newest local position while the pod was down is moved aside by the restore before
    Litestream starts, so it is never fetched as the baseline, and the writes after the restart are signed."""
    assert LITESTREAM is not None
    pod, key = _stopped_pod(tmp_path, "pod", FIRST_ROWS)
    planted = plant(_far_file(tmp_path), pod, 0, ltx_name(FAR, FAR))
    served = signed_restore(pod, key)
    assert served.returncode == 0, served.stderr
    assert "serving existing database" in served.stderr
    assert not planted.exists()
    assert _quarantined(pod, 0, planted.name)
    with running_pod(pod, key, tmp_path):
        insert_rows(pod.db_path, MORE_ROWS)
        shipped = wait_until(lambda: _signed(pod, FIRST_ROWS + MORE_ROWS, tmp_path), timeout=30)
        assert shipped, (tmp_path / "replicate.log").read_text()
    assert "behind replica" not in (tmp_path / "replicate.log").read_text()
    assert manifest_txid(pod) < FAR
