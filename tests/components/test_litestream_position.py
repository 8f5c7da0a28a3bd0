"""No write before the replica can hold it: the Litestream sidecar's startup probe and preStop hook
(components/scripts/litestream-position.sh), run against the real Litestream binary.

The figures (node loss right after a restore with and without the gate, a stop right after a sidecar restart with and
without the drain) are printed by ``python -m bench.write_gate``; here only what must hold.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.support.litestream_lab import (
    POSITION_SCRIPT,
    App,
    Writer,
    connect_wal,
    insert_rows,
    kill9,
    litestream_bin,
    position_check,
    read_rows,
    replica_row_count,
    replicating,
    restore_to,
    wait_until,
)
from tests.support.script_checks import SHELLS, SYNTAX_CHECKERS, assert_passes, exit_codes

LITESTREAM = litestream_bin()


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    return request.param


def _restored(tmp_path: Path, rows: int = 20) -> App:
    """A replica of ``rows`` rows, then the local database lost and restored (a new pod on disposable storage)."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    insert_rows(app.db_path, rows)
    with replicating(LITESTREAM, app, tmp_path / "first.log"):
        assert wait_until(lambda: replica_row_count(LITESTREAM, app, tmp_path) == rows, timeout=20)
    app.remove_local_db()
    shutil.rmtree(app.data_dir / f".{app.db_path.name}-litestream", ignore_errors=True)
    assert restore_to(LITESTREAM, app, app.db_path).returncode == 0
    (app.data_dir / ".litestream-catch-up").write_text("restored\n")  # as the restore script leaves it
    return app


@pytest.mark.parametrize("checker", SYNTAX_CHECKERS)
def test_position_script_is_clean_posix_sh(checker: list[str]) -> None:
    assert_passes(checker, POSITION_SCRIPT)


def test_position_exit_codes_are_documented() -> None:
    documented, defined = exit_codes(POSITION_SCRIPT)
    assert documented == {*defined, 0} == {0, 1, 2}


def test_a_first_start_is_not_held(shell, tmp_path) -> None:
    """No database yet: the application creates it, nothing can be lost, so the probe passes at once."""
    app = App(tmp_path / "app").create()
    assert position_check(shell, app, "caught-up").returncode == 0


def test_a_restored_database_is_held_until_litestream_has_taken_it_over_and_shipped_it(shell, tmp_path) -> None:
    assert LITESTREAM is not None
    app = _restored(tmp_path)
    held = position_check(shell, app, "caught-up")
    assert held.returncode == 1, "Litestream has not seen the restored database yet"
    assert "not yet" in held.stderr
    with replicating(LITESTREAM, app, tmp_path / "second.log") as proc:
        assert wait_until(lambda: position_check(shell, app, "caught-up").returncode == 0, timeout=30, interval=0.2)
        # The moment the probe passes, the replica holds everything: a node loss now loses nothing.
        kill9(proc)
    assert not (app.data_dir / ".litestream-catch-up").exists(), "held once, after the restore only"
    assert position_check(shell, app, "caught-up").returncode == 0
    out = tmp_path / "after.sqlite"
    assert restore_to(LITESTREAM, app, out).returncode == 0
    assert len(read_rows(out)) == 20


def test_a_database_that_was_not_just_restored_is_never_held(shell, tmp_path) -> None:
    """A persistent volume's database serves through an NFS outage: without the restore's marker the probe passes
    even though the replica is unreachable."""
    app = App(tmp_path / "app").create()
    insert_rows(app.db_path, 5)
    assert not app.replica_dir.exists()
    assert position_check(shell, app, "caught-up").returncode == 0


def test_a_stop_right_after_a_sidecar_restart_loses_nothing_with_the_drain(tmp_path) -> None:
    """The application writes while Litestream restarts (a crashed sidecar); it stops half a second later. Without
    the preStop drain Litestream's SIGTERM ships nothing from its first tick; with it, every row is on the replica."""
    assert LITESTREAM is not None
    app = App(tmp_path / "app").create()
    connect_wal(app.db_path).close()
    writer = Writer(app.db_path, rate=100).start()
    try:
        with replicating(LITESTREAM, app, tmp_path / "first.log") as first:
            time.sleep(2.5)
            kill9(first)
        with replicating(LITESTREAM, app, tmp_path / "second.log") as second:
            time.sleep(0.5)
            writer.stop()  # the application's container has exited: the sidecar's preStop runs now
            drained = position_check(["sh"], app, "drain", timeout=30)
            second.terminate()
            second.wait(timeout=30)
    finally:
        writer.stop()
    assert writer.error is None
    assert drained.returncode == 0
    assert "holds the last write" in drained.stderr
    out = tmp_path / "after.sqlite"
    assert restore_to(LITESTREAM, app, out).returncode == 0
    assert len(read_rows(out)) == len(writer.committed)


def test_a_bad_invocation_is_a_usage_error(tmp_path) -> None:
    app = App(tmp_path / "app").create()
    assert position_check(["sh"], app, "sometimes").returncode == 2
    assert position_check(["sh"], app, "drain", extra_env={"MAX_SECONDS": "soon"}).returncode == 2
    assert position_check(["sh"], app, "caught-up", extra_env={"DB_PATH": "relative.sqlite"}).returncode == 2
