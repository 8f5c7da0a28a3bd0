"""The restore-before-serve script, run for real: POSIX shells, the real Litestream binary, real replicas.

Backups are produced by a running ``litestream replicate`` against a WAL-mode database written with sqlite3,
polled (bounded) until a restore of the replica returns every row. One such backup is built per module and copied
into each test's own directory.

The served witness (a site that has served never starts empty by accident) is tested in
test_litestream_restore_witness.py; the helpers both modules share are in tests/support/restore_script.py.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.litestream_lab import (
    MONITOR_INTERVAL_S,
    SCRIPT,
    App,
    ScriptResult,
    Writer,
    break_index,
    connect_wal,
    insert_rows,
    kill9,
    litestream_bin,
    read_rows,
    replicate_once,
    replicating,
    run_restore_script,
    wait_until,
    write_then_stop,
)
from tests.support.restore_script import (
    BACKUP_ROWS,
    EXIT,
    SHELLS,
    Identity,
    app_maker,
    assert_exit,
    build_backup_template,
    local_state,
    new_identity,
    record_fingerprint,
    run_script,
)
from tests.support.script_checks import SYNTAX_CHECKERS, assert_passes, exit_codes

LITESTREAM = litestream_bin()
needs_litestream = pytest.mark.real_tool("litestream")


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return request.param


@pytest.fixture(scope="module")
def backup_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, float]]]:
    """A real backup of BACKUP_ROWS rows written in two transactions while ``litestream replicate`` ran."""
    return build_backup_template(tmp_path_factory)


@pytest.fixture
def new_app(tmp_path: Path) -> Callable[..., App]:
    """``new_app(with_backup=True)``: this test's copy of the template (local DB and replica), config re-rendered."""
    return app_maker(tmp_path)


@pytest.fixture
def identity(tmp_path: Path) -> Identity:
    return new_identity(tmp_path / "noise_private.key")


# --- static checks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_script_is_clean_posix_sh(checker: list[str]) -> None:
    assert_passes(checker, SCRIPT)


def test_documented_exit_codes_match_the_script() -> None:
    documented, defined = exit_codes(SCRIPT)
    assert documented == {*defined, 0} == set(EXIT.values())


# --- a. a local database exists -------------------------------------------------------------------------------


def test_a_existing_database_is_served_untouched(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, with_local_db=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    insert_rows(app.db_path, 5)  # newer than the backup: a restore would lose these
    before = local_state(app)
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "ok", "serving existing database", key=identity)
    assert local_state(app) == before
    assert len(read_rows(app.db_path)) == BACKUP_ROWS + 5
    assert (app.data_dir / ".backup-identity.sha256").read_text().strip() == identity.fingerprint


def test_a_existing_database_without_any_backup_adopts_the_identity(shell, new_app, identity) -> None:
    app = new_app()
    insert_rows(app.db_path, 3)
    before = local_state(app)
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "ok", "serving existing database", key=identity)
    assert local_state(app) == before
    assert (app.backup_dir / "identity.sha256").read_text().strip() == identity.fingerprint
    assert (app.data_dir / ".backup-identity.sha256").read_text().strip() == identity.fingerprint


def test_a_existing_database_with_another_identity_in_the_backup_is_refused(
    shell, new_app, identity, backup_template
) -> None:
    app = new_app(with_backup=True, with_local_db=True, template=backup_template[0])
    record_fingerprint(app, hashlib.sha256(b"privkey:" + b"0" * 64).hexdigest())
    before = local_state(app)
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "identity_mismatch", "identity Secret", "disconnect every client", key=identity)
    assert local_state(app) == before


def test_a_existing_database_with_another_identity_in_the_local_marker_is_refused(shell, new_app, identity) -> None:
    app = new_app()
    insert_rows(app.db_path, 3)
    (app.data_dir / ".backup-identity.sha256").write_text("f" * 64 + "\n")
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "identity_mismatch", str(app.data_dir / ".backup-identity.sha256"), key=identity)


# --- b. first start ------------------------------------------------------------------------------------------


def test_b_first_start_records_the_fingerprint_and_creates_no_database(shell, new_app, identity) -> None:
    app = new_app()
    result = run_script(shell, app, identity_file=identity.path, require_backup=False)
    assert_exit(result, "ok", "first start", key=identity)
    assert not app.db_path.exists()
    assert (app.backup_dir / "identity.sha256").read_text() == identity.fingerprint + "\n"
    assert (app.data_dir / ".backup-identity.sha256").read_text() == identity.fingerprint + "\n"
    assert not list(app.backup_dir.glob("*.tmp.*")), "markers are written through a temp file and renamed"


def test_b_first_start_without_identity_writes_initialised_markers(shell, new_app) -> None:
    app = new_app()
    result = run_script(shell, app)
    assert_exit(result, "ok", "first start")
    assert (app.backup_dir / ".backup-initialised").read_text().strip() == "initialised"
    assert (app.data_dir / ".backup-initialised").read_text().strip() == "initialised"
    assert not (app.backup_dir / "identity.sha256").exists()


def test_b_first_start_moves_a_stale_wal_aside(shell, new_app, identity) -> None:
    app = new_app()
    Path(f"{app.db_path}-wal").write_bytes(b"stale wal of a database that is gone")
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "ok", "moved stale", key=identity)
    assert not Path(f"{app.db_path}-wal").exists()
    assert len(list(app.data_dir.glob(f"{app.db_path.name}-wal.orphaned-*"))) == 1


def test_b_first_start_needs_the_backup_volume_root(shell, new_app, identity) -> None:
    app = new_app()
    shutil.rmtree(app.backup_dir.parent)  # the NFS mount point itself is missing
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "local_state", "NFS", key=identity)
    assert not app.backup_dir.exists()


# --- c. restore ------------------------------------------------------------------------------------------------


def test_c_restores_the_backup_when_the_identity_matches(shell, new_app, identity, backup_template) -> None:
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    record_fingerprint(app, identity.fingerprint)
    result = run_script(shell, app, identity_file=identity.path, require_backup=True)
    assert_exit(result, "ok", "restored", key=identity)
    assert app.db_path.read_bytes()[:16] == b"SQLite format 3\x00"
    assert read_rows(app.db_path) == rows
    assert (app.data_dir / ".backup-identity.sha256").read_text().strip() == identity.fingerprint
    assert not Path(f"{app.db_path}.restoring").exists()


def test_c_restore_is_not_poisoned_by_a_stale_wal_from_another_database(
    shell, new_app, identity, backup_template, tmp_path
) -> None:
    """SQLite replays a leftover -wal onto whatever file it finds: the script must move it aside first."""
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    record_fingerprint(app, identity.fingerprint)
    other = tmp_path / "other.sqlite"
    conn = connect_wal(other)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE junk (x)")
    conn.execute("INSERT INTO junk VALUES (1)")
    shutil.copy(f"{other}-wal", f"{app.db_path}-wal")
    conn.close()
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "ok", "restored", "moved stale", key=identity)
    assert read_rows(app.db_path) == rows


def test_c_restores_an_app_without_identity(shell, new_app, backup_template) -> None:
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    result = run_script(shell, app)
    assert_exit(result, "ok", "restored")
    assert read_rows(app.db_path) == rows
    assert (app.data_dir / ".backup-initialised").read_text().strip() == "initialised"


def test_c_leftovers_of_an_interrupted_restore_are_replaced(shell, new_app, backup_template) -> None:
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    for leftover in (f"{app.db_path}.restoring", f"{app.db_path}.restoring.tmp"):
        Path(leftover).write_bytes(b"SQLite format 3\x00 half written")
    result = run_script(shell, app)
    assert_exit(result, "ok", "restored")
    assert read_rows(app.db_path) == rows
    assert not Path(f"{app.db_path}.restoring").exists()
    assert not Path(f"{app.db_path}.restoring.tmp").exists()


def test_c_zero_length_database_counts_as_missing(shell, new_app, identity, backup_template) -> None:
    """An empty file (e.g. touched by a failed app start) holds no data; serving it would start empty."""
    template, rows = backup_template
    app = new_app(with_backup=True, template=template)
    record_fingerprint(app, identity.fingerprint)
    app.db_path.touch()
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "ok", "restored", key=identity)
    assert read_rows(app.db_path) == rows
    assert [p.stat().st_size for p in app.data_dir.glob(f"{app.db_path.name}.orphaned-*")] == [0]


# --- d. identity refused -------------------------------------------------------------------------------------


def test_d_backup_of_another_identity_is_refused(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, hashlib.sha256(b"privkey:" + b"1" * 64).hexdigest())
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(
        result, "identity_mismatch", "identity Secret from the stack that wrote the backup", "aside", key=identity
    )
    assert not app.db_path.exists()


def test_d_the_fingerprint_alone_decides_like_the_key(shell, new_app, identity, backup_template) -> None:
    """The pods get IDENTITY_FINGERPRINT (the stack's identityFingerprint), never the Noise key: same decisions."""
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    other = hashlib.sha256(b"privkey:" + b"1" * 64).hexdigest()
    refused = run_script(shell, app, extra_env={"IDENTITY_FINGERPRINT": other})
    assert_exit(refused, "identity_mismatch", other[:12])
    assert not app.db_path.exists()
    restored = run_script(shell, app, extra_env={"IDENTITY_FINGERPRINT": identity.fingerprint})
    assert_exit(restored, "ok", "restored")
    assert len(read_rows(app.db_path)) == BACKUP_ROWS
    assert (app.data_dir / ".backup-identity.sha256").read_text().strip() == identity.fingerprint


@pytest.mark.parametrize("value", ["", "A" * 64, "0" * 63, "privkey:" + "0" * 64])
def test_d_a_malformed_fingerprint_is_refused(new_app, backup_template, value) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    result = run_script(["sh"], app, extra_env={"IDENTITY_FINGERPRINT": value})
    if value:
        assert_exit(result, "fingerprint_form", "IDENTITY_FINGERPRINT")
    else:
        assert result.returncode != EXIT["fingerprint_form"], "unset/empty: no identity contract"


@pytest.mark.parametrize("problem", ["missing", "empty", "whitespace", "directory"])
def test_d_unusable_identity_file_is_refused(shell, new_app, identity, backup_template, problem) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    if problem == "missing":
        identity.path.unlink()
    elif problem == "empty":
        identity.path.write_text("")
    elif problem == "whitespace":
        identity.path.write_text(" \n\t\n")
    else:
        identity.path.unlink()
        identity.path.mkdir()
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "identity_unavailable", "identity Secret")
    assert not app.db_path.exists()


def test_d_replica_without_a_recorded_fingerprint_is_refused(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "identity_unrecorded", "identity Secret", key=identity)
    assert not app.db_path.exists()


# --- planted markers: never followed, never echoed ---------------------------------------------------------------
# Whoever can write the backup export can plant files in it. A marker that is a link to the mounted key file would,
# read blindly, put key material into the "recorded fingerprint" of the mismatch message.


def _assert_untouched_refusal(result: ScriptResult, app: App, identity: Identity | None, *phrases: str) -> None:
    assert_exit(result, "marker_untrusted", *phrases, key=identity)
    assert not app.db_path.exists(), "a refused start creates no database"
    assert not list(app.data_dir.glob("*.orphaned-*")), "nothing on the local volume is moved"


def test_planted_backup_marker_link_to_the_key_is_refused_and_not_followed(
    shell, new_app, identity, backup_template
) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    marker = app.backup_dir / "identity.sha256"
    marker.symlink_to(identity.path)
    result = run_script(shell, app, identity_file=identity.path)
    _assert_untouched_refusal(result, app, identity, str(marker), "symbolic link")
    assert marker.is_symlink(), "the link is left for inspection"
    assert marker.readlink() == identity.path
    assert identity.key[8:20] not in result.stderr


def test_planted_local_marker_link_is_refused(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    target = app.root / "elsewhere.sha256"
    target.write_text(identity.fingerprint + "\n")  # even a link to the right value is refused
    local = app.data_dir / ".backup-identity.sha256"
    local.symlink_to(target)
    result = run_script(shell, app, identity_file=identity.path)
    _assert_untouched_refusal(result, app, identity, str(local), "symbolic link")


def test_planted_initialised_marker_link_is_refused_without_identity(shell, new_app, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    target = app.root / "initialised"
    target.write_text("initialised\n")
    (app.backup_dir / ".backup-initialised").symlink_to(target)
    result = run_script(shell, app)
    _assert_untouched_refusal(result, app, None, ".backup-initialised", "symbolic link")


def test_dangling_marker_link_is_refused(shell, new_app, identity) -> None:
    app = new_app()
    app.backup_dir.mkdir(parents=True)
    (app.backup_dir / "identity.sha256").symlink_to(app.root / "does-not-exist")
    result = run_script(shell, app, identity_file=identity.path)
    _assert_untouched_refusal(result, app, identity, "symbolic link")
    assert not (app.data_dir / ".backup-identity.sha256").exists(), "no first start over a planted link"


def test_backup_dir_that_is_a_link_is_refused(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    real = app.root / "real-backup"
    app.backup_dir.rename(real)
    app.backup_dir.symlink_to(real)
    (real / "identity.sha256").write_text(identity.fingerprint + "\n")
    result = run_script(shell, app, identity_file=identity.path)
    _assert_untouched_refusal(result, app, identity, "BACKUP_DIR", "symbolic link")


@pytest.mark.parametrize("content", ["key", "short", "upper"])
def test_marker_without_a_fingerprint_is_refused_without_echoing_it(
    shell, new_app, identity, backup_template, content
) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    value = {
        "key": identity.key,  # a copy of the key planted as the "fingerprint"
        "short": identity.fingerprint[:40],
        "upper": identity.fingerprint.upper(),
    }[content]
    record_fingerprint(app, value)
    result = run_script(shell, app, identity_file=identity.path)
    _assert_untouched_refusal(result, app, identity, "does not hold a marker value", "64 lowercase hex")
    assert value[:12] not in result.stderr, "the content of a malformed marker is never shown"


def test_mismatch_shows_only_fingerprint_prefixes(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    other = hashlib.sha256(b"privkey:" + b"2" * 64).hexdigest()
    record_fingerprint(app, other)
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "identity_mismatch", identity.fingerprint[:12] + "...", other[:12] + "...", key=identity)
    assert identity.fingerprint[:13] not in result.stderr
    assert other[:13] not in result.stderr


# --- e/f. fail closed ----------------------------------------------------------------------------------------


def test_e_local_marker_but_backup_dir_missing_fails_closed(shell, new_app, identity) -> None:
    app = new_app()
    (app.data_dir / ".backup-identity.sha256").write_text(identity.fingerprint + "\n")
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "backup_dir_unavailable", "Not starting empty", "does not exist", key=identity)
    assert not app.db_path.exists()
    assert not app.backup_dir.exists()


def test_e_local_marker_without_identity_also_fails_closed(shell, new_app) -> None:
    app = new_app()
    (app.data_dir / ".backup-initialised").write_text("initialised\n")
    app.backup_dir.mkdir()
    result = run_script(shell, app)
    assert_exit(result, "replica_missing", "Not starting empty")
    assert not app.db_path.exists()


def test_e_unreadable_backup_dir_fails_closed_even_without_markers(shell, new_app, identity) -> None:
    app = new_app()
    app.backup_dir.write_text("not a directory: what a broken mount looks like to the script")
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "backup_dir_unavailable", "cannot be read", "NFS", key=identity)
    assert not app.db_path.exists()


def test_e_unreadable_replica_fails_closed(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    level0 = app.replica_dir / "ltx" / "0"
    shutil.rmtree(level0)
    level0.write_text("garbage")
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "replica_unreadable", "cannot be read", key=identity)
    assert not app.db_path.exists()


def test_e_require_backup_without_backup_fails_closed(shell, new_app, identity) -> None:
    app = new_app()
    result = run_script(shell, app, identity_file=identity.path, require_backup=True)
    assert_exit(result, "backup_required", "REQUIRE_BACKUP", key=identity)
    assert not app.db_path.exists()
    assert not app.backup_dir.exists(), "a refused standby must not write markers"
    assert not (app.data_dir / ".backup-identity.sha256").exists()


def test_f_fingerprint_without_replica_fails_closed(shell, new_app, identity) -> None:
    app = new_app()
    record_fingerprint(app, identity.fingerprint)
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "replica_missing", "Not starting empty", "replica", key=identity)
    assert not app.db_path.exists()
    assert not (app.data_dir / ".backup-identity.sha256").exists()


# --- restore failures and bad invocations ------------------------------------------------------------------------


def test_corrupt_replica_fails_restore_and_leaves_no_database(shell, new_app, identity, backup_template) -> None:
    app = new_app(with_backup=True, template=backup_template[0])
    record_fingerprint(app, identity.fingerprint)
    for ltx in app.replica_dir.rglob("*.ltx"):
        ltx.write_bytes(ltx.read_bytes()[:100])
    result = run_script(shell, app, identity_file=identity.path)
    assert_exit(result, "restore_failed", "restore", key=identity)
    assert not app.db_path.exists()
    assert not Path(f"{app.db_path}.restoring").exists()


@needs_litestream
def test_a_replica_whose_index_does_not_match_its_table_is_refused(tmp_path: Path) -> None:
    """`PRAGMA quick_check` passes such a database, the full integrity check does not: the restore runs the full
    one, so Headscale never serves a registry whose index lookups disagree with its rows."""
    assert LITESTREAM is not None
    source = App(tmp_path / "source").create()
    insert_rows(source.db_path, 40, pad=200)
    break_index(source.db_path)
    replicate_once(LITESTREAM, source.db_path, source.replica_dir)
    source.remove_local_db()
    result = run_script(["sh"], source)
    assert result.returncode == EXIT["restore_failed"], result.stdout + result.stderr
    assert not source.db_path.exists()
    assert not Path(f"{source.db_path}.restoring").exists()


@pytest.mark.parametrize(
    ("env", "phrase"),
    [
        ({"DB_PATH": "relative/app.sqlite"}, "DB_PATH must be an absolute path"),
        ({"BACKUP_DIR": ""}, "BACKUP_DIR must be an absolute path"),
        ({"REQUIRE_BACKUP": "yes"}, "REQUIRE_BACKUP"),
        ({"LITESTREAM_BIN": "/nonexistent/litestream"}, "not found"),
        ({"DB_PATH": "/elsewhere/app.sqlite"}, "does not replicate DB_PATH"),
    ],
)
def test_bad_invocation_is_a_usage_error(shell, new_app, env, phrase) -> None:
    app = new_app()
    result = run_script(shell, app, extra_env=env)
    assert_exit(result, "usage", phrase)
    assert not app.backup_dir.exists()


# --- kill -9 of the replicator under write load ----------------------------------------------------------------

SYNC_INTERVAL_S = 1.0
# A commit reaches the replica once the DB monitor has turned the WAL into an LTX file (1s tick) and the next
# replica sync has shipped it; the two ticks are not phase-locked, so allow one monitor interval on top of the
# sync interval. Measured loss windows were all below 1.0s.
KILL_MARGIN_S = MONITOR_INTERVAL_S


@needs_litestream
def test_kill9_under_write_load_loses_at_most_the_last_sync_window(new_app, tmp_path) -> None:
    assert LITESTREAM is not None
    app = new_app()
    connect_wal(app.db_path).close()
    writer = Writer(app.db_path, rate=200)
    with replicating(LITESTREAM, app, tmp_path / "replicate.log") as proc:
        try:
            assert wait_until(lambda: app.replica_dir.exists(), timeout=10)
            writer.start()
            time.sleep(4.5)  # mid-way between two sync ticks, so the loss is not trivially ~0
            killed_at = kill9(proc)
        finally:
            writer.stop()
    assert writer.error is None, writer.error
    committed = writer.committed
    app.remove_local_db()  # Litestream's metadata dir stays behind: the script must move it aside

    result = run_script(["sh"], app)
    assert_exit(result, "ok", "restored", f".{app.db_path.name}-litestream")
    restored = read_rows(app.db_path)
    assert [row_id for row_id, _ in restored] == list(range(1, len(restored) + 1)), "a consistent prefix"
    assert restored == committed[: len(restored)], "restored rows are exactly the committed ones"

    cutoff = killed_at - (SYNC_INTERVAL_S + KILL_MARGIN_S)
    must_survive = [row for row in committed if row[1] < cutoff]
    assert len(must_survive) > 200, "the writer must have run long enough for the bound to mean something"
    assert len(restored) >= len(must_survive)
    lost = committed[len(restored) :]
    lost_window = killed_at - lost[0][1] if lost else 0.0
    print(f"\nkill -9: committed={len(committed)} restored={len(restored)} lost={len(lost)} ({lost_window:.2f}s)")


@needs_litestream
def test_disposable_storage_restores_every_pod_generation_and_loses_only_a_killed_tail(tmp_path: Path) -> None:
    """backup.local.storage disposable: each pod starts on an empty volume, restores, replicates on into the same
    replica; a graceful stop (SIGTERM) loses nothing, a node loss (SIGKILL) at most the unshipped tail."""
    assert LITESTREAM is not None
    app = App(tmp_path).create()
    key = tmp_path / "noise.key"
    key.write_text("privkey:" + "cd" * 32 + "\n")
    expected: list[tuple[int, float]] = []
    for generation, stop in enumerate((signal.SIGTERM, signal.SIGKILL, signal.SIGTERM)):
        shutil.rmtree(app.data_dir)
        app.data_dir.mkdir()  # a new emptyDir
        result = run_restore_script(["sh"], LITESTREAM, app, identity_file=key, served=generation > 0)
        assert result.returncode == 0, result.stderr
        restored = read_rows(app.db_path) if app.db_path.exists() else []
        if stop is signal.SIGTERM or generation == 0:
            assert restored == expected, f"generation {generation}: the previous graceful stop lost commits"
        _, stopped_at = write_then_stop(
            LITESTREAM, app, stop=stop, write_for=1.5, log=tmp_path / f"replicate-{generation}.log"
        )
        local = read_rows(app.db_path)
        if stop is signal.SIGKILL:
            shutil.rmtree(app.data_dir)
            app.data_dir.mkdir()
            assert run_restore_script(["sh"], LITESTREAM, app, identity_file=key, served=True).returncode == 0
            survived = read_rows(app.db_path)
            lost = local[len(survived) :]
            assert survived == local[: len(survived)], "a restore is a prefix of what was committed"
            assert not lost or stopped_at - lost[0][1] <= 2 * MONITOR_INTERVAL_S + 0.5, "more than the tail was lost"
            local = survived
        expected = local
    shutil.rmtree(app.data_dir)
    app.data_dir.mkdir()
    assert run_restore_script(["sh"], LITESTREAM, app, identity_file=key, served=True).returncode == 0
    assert read_rows(app.db_path) == expected
