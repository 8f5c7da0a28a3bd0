"""The source is never written: a WAL-mode database (Headscale's default) keeps its directory and bytes as they were.

``with_wal_frames`` leaves rows only in the ``-wal`` (uncheckpointed), as a stopped Headscale pod does; they must
arrive in PostgreSQL all the same, while no ``-shm``, ``-wal`` or ``-journal`` appears or changes beside the source.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from migration import MigrationError, PsqlConnection
from migration.source import snapshot
from tests.migration.helpers import cli, directory_digest, run_args
from tests.support import headscale_samples as sample_db
from tests.support.pg_lab import PgServer

NewDb = Callable[..., PsqlConnection]
VERSION = "0.29.2"


def _source(tmp_path: Path, kind: str) -> Path:
    (tmp_path / "build").mkdir()
    built = sample_db.build(tmp_path / "build" / "hs.sqlite", VERSION)
    if kind == "rollback":
        return built
    if kind == "wal-checkpointed":  # WAL mode, cleanly closed: no -wal beside it
        conn = sqlite3.connect(built)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
        return built
    return sample_db.with_wal_frames(built, tmp_path / "source", keep_shm=kind == "wal-frames-and-shm")


@pytest.mark.parametrize("kind", ["wal-frames", "wal-frames-and-shm", "wal-checkpointed", "rollback"])
def test_the_source_directory_is_untouched_and_wal_rows_arrive(
    kind: str, tmp_path: Path, new_db: NewDb, pg_server: PgServer
) -> None:
    source = _source(tmp_path, kind)
    before = directory_digest(source.parent)
    frames = kind.startswith("wal-frames")
    if frames:
        assert {"hs.sqlite", "hs.sqlite-wal"} <= set(before)
        main_file = sqlite3.connect(f"{source.as_uri()}?immutable=1", uri=True)  # the main file alone
        assert main_file.execute("SELECT count(*) FROM nodes WHERE id = 5").fetchone() == (0,)
        main_file.close()

    checked = cli("preflight", "--sqlite", str(source), "--version", VERSION, password="")
    assert checked.returncode == 0, checked.stderr
    assert directory_digest(source.parent) == before

    pg = new_db(VERSION)
    result = cli(*run_args(source, pg), password=pg_server.app_password)
    assert result.returncode == 0, result.stderr
    assert directory_digest(source.parent) == before
    nodes = pg.query("SELECT id, hostname, user_id FROM nodes WHERE id = 5")
    assert nodes == ([["5", "wal-node", "4"]] if frames else [])


def test_snapshot_is_a_rollback_mode_file_with_the_wal_applied(tmp_path: Path) -> None:
    source = _source(tmp_path, "wal-frames")
    copy = snapshot(source, tmp_path / "work" / "copy.sqlite")
    assert sorted(p.name for p in copy.parent.iterdir()) == ["copy.sqlite"]  # the scratch copy is gone again
    conn = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert conn.execute("SELECT hostname FROM nodes WHERE id = 5").fetchone() == ("wal-node",)
    conn.close()


def test_snapshot_refuses_a_missing_source(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="does not exist") as caught:
        snapshot(tmp_path / "absent.sqlite", tmp_path / "copy.sqlite")
    assert caught.value.step == "snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
